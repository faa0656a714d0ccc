"""Does a second run of the recipe give the committed reference model? Compares two checkpoint folders:
the weights file's SHA-256, each tensor's largest absolute difference, and the training summaries' losses.
Identical weights settle the question (the quality table is then the same by construction); otherwise the
quality table of the new checkpoint must fall within the committed one's three-seed spread, which the
conformer-quality preset measures (`--model NEW`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

WEIGHTS = "model.safetensors"
SUMMARY = "training.json"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def compare_checkpoints(new: str | Path, reference: str | Path) -> dict[str, Any]:
    """The comparison as a JSON-ready dict: identical (bitwise equal weights), the digests, the largest absolute
    difference per tensor where they differ (in float32), and both runs' train and validation losses."""
    from safetensors.torch import load_file

    new, reference = Path(new), Path(reference)
    a, b = load_file(new / WEIGHTS), load_file(reference / WEIGHTS)
    if a.keys() != b.keys():
        raise ValueError(f"{new} and {reference} hold different tensors: "
                         f"{sorted(a.keys() ^ b.keys())[:5]} are in one only")
    differing = {name: float((a[name].float() - b[name].float()).abs().max()) for name in sorted(a)
                 if a[name].shape != b[name].shape or not a[name].equal(b[name])}
    losses = {}
    for label, folder in (("new", new), ("reference", reference)):
        summary = json.loads((folder / SUMMARY).read_text()) if (folder / SUMMARY).is_file() else {}
        losses[label] = {key: summary.get(key) for key in ("steps", "train_loss", "validation_loss", "device")}
    digests = {"new": sha256(new / WEIGHTS), "reference": sha256(reference / WEIGHTS)}
    return {"identical": digests["new"] == digests["reference"], "sha256": digests,
            "tensors": len(a), "tensors_differing": len(differing),
            "max_abs_difference": max(differing.values(), default=0.0), "differing": differing, "runs": losses}
