"""The demo's checkpoint: the trained reference conformer model (reference_model/, shipped as package data),
or, where it is missing, a tiny random-weight Qwen3-shaped checkpoint built once under the demo's folder.

The random checkpoint carries the qwen3-chem tokenizer (or, on a machine without it, our built-in
Llama-3-style tokenizer: the constraint compiles for any vocabulary). Its conformers are valid only by the
constraint's doing and their geometry is noise; the demo says so. It is built atomically (a half-built
folder from a crash is replaced) and reused, without importing transformers' model classes when it is.
Not here: the run (run.py).
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from inferlab.errors import InferlabError, InputError
from inferlab.workloads.conformers import reference_model

log = logging.getLogger(__name__)

# tokenizer label -> preset of the random fallback: the qwen3-chem tokenizer when it is found, else the built-in one
DEMO_MODELS = {"qwen3-chem": "tiny-qwen3", "built-in": "tiny"}


@dataclass(frozen=True)
class DemoModel:
    path: Path
    trained: bool  # the reference model; False: the random fallback
    tokenizer: str  # "reduced qwen3-chem" (the reference model's), "qwen3-chem" or "built-in" (DEMO_MODELS)
    built: bool = False  # the random fallback was built by this run (False: reused)
    missing: str | None = None  # why the reference model was not used (its InputError), for the fallback


def demo_model(work_dir: Path) -> DemoModel:
    """The reference model, or the random fallback under `work_dir` with the reason."""
    try:
        return DemoModel(reference_model.reference_model_dir(), True, "reduced qwen3-chem")
    except InputError as e:
        path, built, label = demo_checkpoint(work_dir)
        return DemoModel(path, False, label, built, str(e))


def demo_tokenizer() -> tuple[str, Path | None]:
    """("qwen3-chem", its folder) when it is found (shared_assets), else ("built-in", None), logged."""
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    try:
        return "qwen3-chem", qwen3_chem_tokenizer_dir()
    except InferlabError as e:
        log.warning("%s; the demo uses the built-in tokenizer instead", e)
        return "built-in", None


def demo_checkpoint(work_dir: Path) -> tuple[Path, bool, str]:
    """The random checkpoint under `work_dir` (built once), whether it was built now, and its tokenizer's label."""
    label, tokenizer_dir = demo_tokenizer()
    preset = DEMO_MODELS[label]
    path = work_dir / f"{preset}-float32"
    if (path / "inferlab_preset.json").exists():
        return path, False, label
    from inferlab.models.checkpoint_init import init_checkpoint  # transformers' model classes: seconds to import

    partial = work_dir / f"{path.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    init_checkpoint(preset, partial, seed=0, dtype="float32", tokenizer_dir=tokenizer_dir)
    shutil.rmtree(path, ignore_errors=True)
    partial.rename(path)
    return path, True, label
