"""Shared fixtures: tiny random checkpoints (built once per session) and the qwen3-chem tokenizer; the
Triton-interpreter child started at collection (tests/triton_interpreter_child.py); the device suite's
size option (`--gpu-size quick|full`, tests/gpu/conftest.py reads it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import triton_interpreter_child

from inferlab.models.checkpoint_init import init_checkpoint
from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declared here, at the tests' root, so that it parses however pytest is pointed at tests/gpu."""
    parser.addoption("--gpu-size", choices=("quick", "full"), default=None,
                     help="shapes of the device tests (pytest -m gpu): quick (default; minutes on one H100) or "
                          "full (the real model shapes); default: $INFERLAB_GPU_SIZE, else quick")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The Triton-interpreter cases (~2 minutes of one core) start now in their child process, beside the
    rest of the suite, and their test runs last (tests/triton_interpreter_child.py)."""
    chosen = [item for item in session.items if item.path.name == triton_interpreter_child.TEST_FILE]
    if not chosen or session.config.option.collectonly:
        return
    session.items[:] = [item for item in session.items if item not in chosen] + chosen
    if importlib.util.find_spec("triton") is not None:  # without triton the test skips itself
        triton_interpreter_child.start(session.config)


def pytest_unconfigure(config: pytest.Config) -> None:
    triton_interpreter_child.stop(config)


def pytest_report_header(config: pytest.Config) -> str:
    """Say up front where the qwen3-chem tokenizer is (the conformer tests need it), or why those tests will
    error: a fresh clone away from ../shared has to name it."""
    from inferlab.errors import InputError

    try:
        return f"qwen3-chem tokenizer: {qwen3_chem_tokenizer_dir()}"
    except InputError as e:
        return f"qwen3-chem tokenizer: NOT FOUND, the tests that use it will error: {e}"


@pytest.fixture(scope="module")
def one_cpu_thread():
    """Small tensors step by step: intra-op threads only add synchronisation (badly so on a busy 2-core
    machine, where an OpenMP barrier can cost milliseconds). Use: pytest.mark.usefixtures("one_cpu_thread")."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def qwen3_chem_dir() -> Path:
    return qwen3_chem_tokenizer_dir()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Factory: tiny_checkpoint("tiny-qwen2") -> path of a float32 random checkpoint, built once."""
    root = tmp_path_factory.mktemp("checkpoints")
    built: dict[str, Path] = {}

    def make(preset: str = "tiny", dtype: str = "float32") -> Path:
        key = f"{preset}-{dtype}"
        if key not in built:
            tokenizer = qwen3_chem_tokenizer_dir() if preset == "tiny-qwen3" else None
            built[key] = init_checkpoint(preset, root / key, seed=0, dtype=dtype, tokenizer_dir=tokenizer)
        return built[key]

    return make
