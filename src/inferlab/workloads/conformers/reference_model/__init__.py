"""The reference conformer model, shipped as package data: this folder is its HuggingFace checkpoint
(config.json, model.safetensors, the reduced qwen3-chem tokenizer and its id map, the model card) and
holds its split file (split.tsv: which molecules were trained on, validated on, held out), the held-out
molecules as a .smi (held_out.smi, sources interleaved: the evaluation's input) and its KV-cache gate
(kv_dtype_gate.json: whether an FP8 cache kept its quality, bench/kv_dtype_gate.py). The recipe
that makes it is inferlab.workloads.conformers.training (docs/conformers.md "The reference model").
"""

from __future__ import annotations

from pathlib import Path

from inferlab.errors import InputError

FOLDER = Path(__file__).resolve().parent
SPLIT_FILE = FOLDER / "split.tsv"
HELD_OUT_FILE = FOLDER / "held_out.smi"
KV_DTYPE_GATE_FILE = FOLDER / "kv_dtype_gate.json"  # written by bench/kv_dtype_gate.py from the quality rows


def reference_model_dir() -> Path:
    """The checkpoint folder; InputError when its weights are not there (a checkout before the first run of
    the recipe, or a wheel built without its package data)."""
    missing = [name for name in ("config.json", "model.safetensors", "tokenizer.json") if not (FOLDER / name).exists()]
    if missing:
        raise InputError(f"the reference conformer model is not in {FOLDER} (no {', '.join(missing)}); train it with "
                         "`python -m inferlab.workloads.conformers.training train --data DATA --out CKPT` and copy "
                         "CKPT's files there")
    return FOLDER
