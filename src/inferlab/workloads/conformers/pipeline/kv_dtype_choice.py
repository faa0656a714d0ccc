"""`conformers generate --kv-dtype auto`: the KV cache the job runs with, and why.

An FP8 KV cache halves the bytes a decode step reads (1.16x-1.3x the engine's speed on an H200) but rounds
every cached K/V to 3 mantissa bits, which may cost conformer quality. So `auto` stays the model dtype
unless the reference model's quality gate (reference_model/kv_dtype_gate.json, derived from the lab's
conformer-quality rows by bench/kv_dtype_gate.py) shows FP8 within the model dtype's spread over sampling
seeds on every metric, and then picks FP8 only on GPUs that run it (CUDA capability >= 8.9); a CPU always
keeps the model dtype (its FP8 path is a correctness reference, slower). A gate file that is missing or
unreadable keeps the model dtype, saying so. `model` and `fp8` are taken as asked.

Not here: the engine's own reading of kv_dtype (engine/startup.py: "auto" and "model" are the model dtype there).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from inferlab.workloads.conformers.reference_model import KV_DTYPE_GATE_FILE


@dataclass(frozen=True)
class KvGate:
    fp8_within_spread: bool
    outside: tuple[str, ...]  # the figures where FP8 left the spread (COV-P@0.75, ...)
    seeds: int  # sampling seeds of each system's spread
    path: str  # the gate file
    problem: str = ""  # why the file could not be read ("": read)


@dataclass(frozen=True)
class KvChoice:
    kv_dtype: str  # the EngineConfig value: "model" or "fp8"
    reason: str


def read_kv_gate(path: str | Path = KV_DTYPE_GATE_FILE) -> KvGate:
    """The committed gate; a file that is missing or not the gate's shape reads as "FP8 not shown within"."""
    try:
        data = json.loads(Path(path).read_text())
        within, outside = data["fp8_within_spread"], data["outside"]
        if not isinstance(within, bool) or not isinstance(outside, list):
            raise ValueError("fp8_within_spread must be true or false and outside a list")
        return KvGate(within, tuple(str(m) for m in outside), len(data.get("seeds") or ()), str(path))
    except (OSError, ValueError, KeyError, TypeError) as e:
        return KvGate(False, (), 0, str(path), f"{type(e).__name__}: {e}")


def choose_kv_dtype(requested: str, gate: KvGate, device_type: str, fp8_supported: bool) -> KvChoice:
    """`requested`: --kv-dtype (auto, model or fp8); `fp8_supported`: the GPU runs an FP8 cache (sm89+)."""
    if requested != "auto":
        return KvChoice(requested, f"--kv-dtype {requested}")
    if device_type == "cpu":
        return KvChoice("model", "auto: the model dtype on a CPU (its FP8 cache is a slower correctness path)")
    spread = f"the {gate.seeds}-seed spread" if gate.seeds else "the seeds' spread"
    if gate.problem:
        return KvChoice("model", f"auto: the model dtype, the quality gate {gate.path} being unreadable ({gate.problem})")
    if not gate.fp8_within_spread:
        where = ", ".join(gate.outside) or "a figure the gate lacks"
        return KvChoice("model", f"auto: FP8 differs beyond {spread} on {where} on the reference model (gate file "
                                 f"{gate.path})")
    if not fp8_supported:
        return KvChoice("model", "auto: the model dtype, this GPU having no FP8 (CUDA capability < 8.9); FP8 is within "
                                 f"{spread} on the reference model")
    return KvChoice("fp8", f"auto: FP8 within {spread} of the model dtype's cache on every figure on the reference "
                           f"model (gate file {gate.path})")
