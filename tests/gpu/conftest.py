"""Fixtures of the device suite: its size (quick or full) and random checkpoints built once.

Size: `--gpu-size quick|full` (declared in tests/conftest.py), else $INFERLAB_GPU_SIZE, else quick. Quick
runs tiny presets and small shapes (the whole suite in a few minutes on one H100); full runs the model
shapes the engine is measured on (llama-380m, qwen3-0.6b, gemma-2b) and the vocabulary-sized kernels.
A test's CPU case (gpu_testkit.CPU_AND_CUDA) is always quick.

Checkpoints: random weights of a preset (models/presets.py), bf16 on CUDA, kept in $INFERLAB_GPU_TEST_CACHE
(default: <tmp>/inferlab-gpu-tests) so that several device calls on one warm machine build each only once;
fp32 on CPU, the CPU suite's own (tests/conftest.py `tiny_checkpoint`: built once per session).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest


@dataclass(frozen=True)
class Size:
    full: bool

    def pick(self, quick: Any, full: Any) -> Any:
        return full if self.full else quick

    def on(self, device: str) -> "Size":
        """This size where the device allows it: the CPU case of a test is always quick."""
        return self if device == "cuda" else Size(False)


@pytest.fixture(scope="session")
def size(request: pytest.FixtureRequest) -> Size:
    chosen = request.config.getoption("--gpu-size") or os.environ.get("INFERLAB_GPU_SIZE", "quick")
    if chosen not in ("quick", "full"):
        raise pytest.UsageError(f"INFERLAB_GPU_SIZE={chosen!r}: use quick or full")
    return Size(chosen == "full")


@pytest.fixture(scope="session")
def checkpoint(tiny_checkpoint: Callable[..., Path]) -> Callable[..., Path]:
    """Factory: checkpoint("llama-380m", "cuda") -> a random checkpoint of the preset (bf16 for CUDA, fp32
    for CPU), built once into the cache folder (through a temporary name, so an interrupted build is
    never taken for a checkpoint)."""
    from inferlab.models.checkpoint_init import init_checkpoint
    from inferlab.models.presets import get_preset
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    kept = Path(os.environ.get("INFERLAB_GPU_TEST_CACHE", Path(tempfile.gettempdir()) / "inferlab-gpu-tests"))

    def make(preset: str, device: str = "cuda", dtype: str | None = None) -> Path:
        if device == "cpu":
            return tiny_checkpoint(preset, dtype or "float32")
        dtype = dtype or "bfloat16"
        path = kept / f"{preset}-{dtype}"
        if not (path / "config.json").exists():
            tokenizer = qwen3_chem_tokenizer_dir() if get_preset(preset).tokenizer == "qwen3-chem" else None
            partial = path.with_name(path.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            init_checkpoint(preset, partial, seed=0, dtype=dtype, tokenizer_dir=tokenizer)
            partial.rename(path)
        return path

    return make


@pytest.fixture(autouse=True)
def one_thread_on_cpu(request: pytest.FixtureRequest):
    """A test's CPU case runs tiny tensors step by step: torch's intra-op threads would only add
    synchronisation (tens of times slower on a busy 2-core machine)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or callspec.params.get("device") != "cpu":
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
