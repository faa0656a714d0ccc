"""What is in a checkpoint folder, cheaply: the SHA-256 of config.json, generation_config.json and the
tokenizer's files, and of each safetensors file its size and one SHA-256 over its header (tensor names,
shapes, dtypes and offsets) and SAMPLES blocks of SAMPLE_BYTES spread evenly over its data (about 1 MB per
file, however large). An output's manifest records it, so a resume with other weights at the same --model
path is refused by name (outputs/manifest.py). Torch-free.

The header tells apart checkpoints of another shape or layout; the sampled blocks, weights of the same
layout (another seed of `inferlab model init`, another training step), since new weights change every
block. Two files that differ only outside the sampled blocks are the blind spot of not hashing gigabytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from inferlab.models.checkpoint_files import read_small_file, safetensors_header

SAMPLES = 16
SAMPLE_BYTES = 64 << 10
SMALL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json")


def checkpoint_identity(model_dir: str | Path) -> dict[str, str]:
    """{file name: digest} of the files that decide a checkpoint's results; {} for a folder that has none."""
    folder = Path(model_dir)
    identity: dict[str, str] = {}
    for name in SMALL_FILES:
        path = folder / name
        if path.exists():
            identity[name] = "sha256 " + hashlib.sha256(read_small_file(path)).hexdigest()
    for path in sorted(folder.glob("*.safetensors")):
        identity[path.name] = _weights_digest(path)
    return identity


def _weights_digest(path: Path) -> str:
    _, size = safetensors_header(path)  # checked whole first
    digest = hashlib.sha256()
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        digest.update(f.read(n))
        data_bytes = size - 8 - n
        if data_bytes <= SAMPLES * SAMPLE_BYTES:
            blocks = [(0, data_bytes)]
        else:
            blocks = [(i * (data_bytes // SAMPLES), SAMPLE_BYTES) for i in range(SAMPLES)]
        for offset, length in blocks:
            f.seek(8 + n + offset)
            digest.update(f.read(length))
    return f"{size} bytes, sha256 {digest.hexdigest()} (header and sampled data)"
