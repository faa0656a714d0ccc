"""Shared fixtures: tiny random checkpoints (built once per session), the qwen3-chem tokenizer, one lab
environment capture per session; the Triton-interpreter child started at collection
(tests/triton_interpreter_child.py); the device suite's size option (`--gpu-size quick|full`,
tests/gpu/conftest.py reads it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import triton_interpreter_child

from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

# torch and the checkpoint builder (transformers) are imported by the fixtures that use them: this file is also
# the xdist controller's, which runs no test, and its import comes before the workers start (seconds of one core)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declared here, at the tests' root, so that it parses however pytest is pointed at tests/gpu."""
    parser.addoption("--gpu-size", choices=("quick", "full"), default=None,
                     help="shapes of the device tests (pytest -m gpu): quick (default; minutes on one H100) or "
                          "full (the real model shapes); default: $INFERLAB_GPU_SIZE, else quick")


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reports its collection: the order reaches the scheduler
def pytest_collection_finish(session: pytest.Session) -> None:
    """The Triton-interpreter cases (minutes of one core) run in a child process beside the rest of the
    suite (tests/triton_interpreter_child.py). In one process the child starts now and its test runs last.
    Under pytest-xdist (CI: -n 2) its test runs first instead: the worker that takes it starts the child and
    waits, while the other worker runs the suite, so the child and that worker keep both cores busy."""
    chosen = [item for item in session.items if item.path.name == triton_interpreter_child.TEST_FILE]
    if not chosen or session.config.option.collectonly:
        return
    others = [item for item in session.items if item not in chosen]
    if hasattr(session.config, "workerinput"):  # an xdist worker: every worker collects the same order
        session.items[:] = chosen + others
        return
    session.items[:] = others + chosen
    if importlib.util.find_spec("triton") is not None:  # without triton the test skips itself
        triton_interpreter_child.start(session.config)


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker (CI: -n 2 on 2 cores) runs torch on one intra-op thread: the other worker, or the
    interpreter child, holds the other core, and a team of two then only waits at each op's barrier for the
    thread that was preempted (HF generate in the parity tests took twice the CPU on two). Tests that need
    another count set it themselves; the processes the tests start keep torch's default."""
    if hasattr(config, "workerinput"):
        import torch

        torch.set_num_threads(1)


def pytest_unconfigure(config: pytest.Config) -> None:
    triton_interpreter_child.stop(config)


def tokenizer_line() -> str:
    """Where the qwen3-chem tokenizer is (the conformer tests need it), or why those tests will error: a
    fresh clone away from ../shared has to name it."""
    from inferlab.errors import InputError

    try:
        return f"qwen3-chem tokenizer: {qwen3_chem_tokenizer_dir()}"
    except InputError as e:
        return f"qwen3-chem tokenizer: NOT FOUND, the tests that use it will error: {e}"


def pytest_report_header(config: pytest.Config) -> str:
    return tokenizer_line()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """`pytest -q` hides the header: the line is said again at the end, where -q shows it too."""
    if config.get_verbosity() < 0:
        terminalreporter.write_line(tokenizer_line())


@pytest.fixture(scope="session", autouse=True)
def one_environment_capture():
    """Each lab launch captures the environment in a child that imports torch (seconds on 2 busy cores):
    in this process the session's first real capture serves every later launch, written to its run
    folder's env.json as the launcher does. Launches by a CLI subprocess still capture their own."""
    from inferlab.bench import launcher

    capture = launcher._capture_environment
    captured: list[dict] = []

    def capture_once(run_dir: Path) -> dict:
        if not captured:
            captured.append(capture(run_dir))
        (run_dir / "env.json").write_text(json.dumps(captured[0]))
        return captured[0]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(launcher, "_capture_environment", capture_once)
        yield


@pytest.fixture(scope="module")
def one_cpu_thread():
    """Small tensors step by step: intra-op threads only add synchronisation (badly so on a busy 2-core
    machine, where an OpenMP barrier can cost milliseconds). Use: pytest.mark.usefixtures("one_cpu_thread")."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def qwen3_chem_dir() -> Path:
    return qwen3_chem_tokenizer_dir()


# a sequence classifier of each family the engine runs, from the causal preset of that family
CLASSIFIER_OF_PRESET = {
    "tiny": "LlamaForSequenceClassification",
    "tiny-mistral": "MistralForSequenceClassification",
    "tiny-qwen2": "Qwen2ForSequenceClassification",
    "tiny-qwen3": "Qwen3ForSequenceClassification",
    "tiny-gemma": "GemmaForSequenceClassification",
    "tiny-gemma2": "Gemma2ForSequenceClassification",
    "tiny-gemma3": "Gemma3TextForSequenceClassification",
}
CLASSIFIER_PAD_ID = 3


@pytest.fixture(scope="session")
def tiny_classifier(tmp_path_factory):
    """Factory: tiny_classifier("tiny-gemma2") -> a float32 random ...ForSequenceClassification checkpoint of that
    preset's shape (3 labels, a 512-token vocabulary, pad id 3, random norm weights so that Gemma's (1 + w) is
    exercised), no tokenizer: the tests feed token ids. Built once."""
    import torch
    import transformers

    from inferlab.models.presets import get_preset

    root = tmp_path_factory.mktemp("classifiers")
    built: dict[str, Path] = {}

    def make(preset: str) -> Path:
        if preset not in built:
            config = get_preset(preset).make_config()
            config.vocab_size, config.num_labels, config.pad_token_id = 512, 3, CLASSIFIER_PAD_ID
            config.architectures = [CLASSIFIER_OF_PRESET[preset]]
            torch.manual_seed(0)
            model = getattr(transformers, CLASSIFIER_OF_PRESET[preset])(config).float()
            g = torch.Generator().manual_seed(1)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name.endswith("norm.weight"):
                        p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (0.0 if "gemma" in preset else 1.0))
            model.save_pretrained(root / preset, safe_serialization=True)
            built[preset] = root / preset
        return built[preset]

    return make


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Factory: tiny_checkpoint("tiny-qwen2") -> path of a float32 random checkpoint, built once."""
    from inferlab.models.checkpoint_init import init_checkpoint

    root = tmp_path_factory.mktemp("checkpoints")
    built: dict[str, Path] = {}

    def make(preset: str = "tiny", dtype: str = "float32") -> Path:
        key = f"{preset}-{dtype}"
        if key not in built:
            tokenizer = qwen3_chem_tokenizer_dir() if preset == "tiny-qwen3" else None
            built[key] = init_checkpoint(preset, root / key, seed=0, dtype=dtype, tokenizer_dir=tokenizer)
        return built[key]

    return make
