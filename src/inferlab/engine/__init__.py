"""The generation engine (static KV cache, CUDA-graph decode, GPU sampling, continuous batching) and the
encoder (engine/packed: packed prefill batches for sequence classification and hidden states).

This package is the engine's whole public surface (docs/engine.md "Public names"): code outside
inferlab.engine imports these names from here, never from its submodules (an import-linter contract in
pyproject.toml holds it). Each name is imported on first use, so `import inferlab.engine` needs no torch.
resolve_steering, resolve_collect and wants_steering_or_collection are the engine's host-side checks of a
request's steering and collection, shared with the transformers fallback so every backend refuses alike.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Collect",
    "CollectPlan",
    "DecodeStepProbe",
    "Encoder",
    "EncoderConfig",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "PackedBatch",
    "Request",
    "Result",
    "SamplingParams",
    "Steer",
    "SteerEntry",
    "SteeringVectors",
    "compile_program",
    "encoder_support",
    "fp8_kv_supported",
    "pack_rows",
    "plan_without_loading",
    "prefill_flops",
    "projection_flops",
    "resolve_collect",
    "resolve_device",
    "resolve_steering",
    "wants_steering_or_collection",
]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from inferlab.engine.engine import Engine as value
    elif name == "EngineConfig":
        from inferlab.engine.config import EngineConfig as value
    elif name == "EngineStats":
        from inferlab.engine.stats import EngineStats as value
    elif name == "SteeringVectors":
        from inferlab.engine.steering_vectors import SteeringVectors as value
    elif name == "resolve_steering":
        from inferlab.engine.steering import resolve_steering as value
    elif name == "SteerEntry":
        from inferlab.engine.steering import SteerEntry as value
    elif name == "resolve_collect":
        from inferlab.engine.collection import resolve_collect as value
    elif name == "CollectPlan":
        from inferlab.engine.collection import CollectPlan as value
    elif name == "DecodeStepProbe":
        from inferlab.engine.step_probe import DecodeStepProbe as value
    elif name == "wants_steering_or_collection":
        from inferlab.engine.steering import wants_steering_or_collection as value
    elif name in ("plan_without_loading", "resolve_device", "fp8_kv_supported"):
        import inferlab.engine.startup

        value = getattr(inferlab.engine.startup, name)
    elif name in ("Encoder", "encoder_support"):
        import inferlab.engine.packed.encoder

        value = getattr(inferlab.engine.packed.encoder, name)
    elif name == "EncoderConfig":
        from inferlab.engine.packed.config import EncoderConfig as value
    elif name in ("PackedBatch", "pack_rows"):
        import inferlab.engine.packed.batch

        value = getattr(inferlab.engine.packed.batch, name)
    elif name == "prefill_flops":
        from inferlab.engine.packed.flops import prefill_flops as value
    elif name == "projection_flops":
        from inferlab.engine.packed.flops import projection_flops as value
    elif name == "compile_program":
        from inferlab.constraints.program import compile_program as value
    elif name in ("Request", "Result", "SamplingParams", "Steer", "Collect"):
        import inferlab.types

        value = getattr(inferlab.types, name)
    else:
        raise AttributeError(f"module 'inferlab.engine' has no attribute {name!r}")
    globals()[name] = value  # the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
