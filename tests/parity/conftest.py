"""Parity fixtures: the tiny checkpoints as the parity tests hold them to transformers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file


def _with_random_norms(path: Path, dst: Path) -> Path:
    """A copy of the checkpoint at `path` whose RMSNorm weights are random (N(0, 0.3))."""
    shutil.copytree(path, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    g = torch.Generator().manual_seed(1)
    for key in sorted(tensors):
        if key.endswith("norm.weight"):
            tensors[key] = torch.randn(tensors[key].shape, generator=g) * 0.3
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


@pytest.fixture(scope="session")
def parity_checkpoint(tiny_checkpoint, tmp_path_factory):
    """Factory: preset -> a tiny checkpoint; the Gemma presets with random norm weights (transformers
    initialises Gemma's (1 + w) norms at w = 0, which would hide how w enters), built once."""
    built: dict[str, Path] = {}

    def make(preset: str) -> Path:
        if preset not in built:
            path = tiny_checkpoint(preset)
            if preset.startswith("tiny-gemma"):
                path = _with_random_norms(path, tmp_path_factory.mktemp("norms") / preset)
            built[preset] = path
        return built[preset]

    return make
