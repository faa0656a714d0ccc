"""Classifiers trained by a committed recipe (recipe.py) on a labelled set built from a file a dependency ships
(aromatic_rings.py), their weights shipped as package data (<name>.safetensors, bf16): a preset whose `trained`
names one (presets.py) builds its checkpoint from them (checkpoint_init.py) instead of random weights."""

from __future__ import annotations

import hashlib
from pathlib import Path

from inferlab.errors import InputError


def weights_path(name: str) -> Path:
    path = Path(__file__).with_name(f"{name}.safetensors")
    if not path.is_file():
        raise InputError(f"the trained weights {path} are missing from this install; reinstall inferlab, or write "
                         f"them with `python -m inferlab.models.trained.recipe --out {path}`")
    return path


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
