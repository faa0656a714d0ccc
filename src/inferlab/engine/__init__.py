"""The generation engine: static KV cache, CUDA-graph decode, GPU sampling, continuous batching; and the
encoder (engine/packed): packed prefill batches for sequence classification and hidden states.

Everything is imported lazily so that `import inferlab.engine.<module>` stays light. What the workloads and
the lab use of the engine is exported here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Encoder", "EncoderConfig", "Engine", "EngineConfig", "EngineStats", "PackedBatch", "SteeringVectors",
           "encoder_support", "pack_rows", "prefill_flops"]

# name -> (module, attribute) of the encoder's public surface
_ENCODER = {
    "Encoder": ("inferlab.engine.packed.encoder", "Encoder"),
    "encoder_support": ("inferlab.engine.packed.encoder", "encoder_support"),
    "EncoderConfig": ("inferlab.engine.packed.config", "EncoderConfig"),
    "PackedBatch": ("inferlab.engine.packed.batch", "PackedBatch"),
    "pack_rows": ("inferlab.engine.packed.batch", "pack_rows"),
    "prefill_flops": ("inferlab.engine.packed.flops", "prefill_flops"),
}


def __getattr__(name: str) -> Any:
    if name in _ENCODER:
        import importlib

        module, attribute = _ENCODER[name]
        return getattr(importlib.import_module(module), attribute)
    if name == "Engine":
        from inferlab.engine.engine import Engine

        return Engine
    if name == "EngineConfig":
        from inferlab.engine.config import EngineConfig

        return EngineConfig
    if name == "SteeringVectors":
        from inferlab.engine.steering_vectors import SteeringVectors

        return SteeringVectors
    if name == "EngineStats":
        from inferlab.engine.stats import EngineStats

        return EngineStats
    raise AttributeError(f"module 'inferlab.engine' has no attribute {name!r}")
