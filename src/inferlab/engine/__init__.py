"""The generation engine: static KV cache, CUDA-graph decode, GPU sampling, continuous batching.

`Engine` and `EngineConfig` are imported lazily so that `import inferlab.engine.<module>` stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Engine", "EngineConfig", "EngineStats", "SteeringVectors"]


def __getattr__(name: str) -> Any:
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
