"""Shared fixtures: tiny random checkpoints (built once per session) and the qwen3-chem tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inferlab.models.checkpoint_init import init_checkpoint
from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir


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
