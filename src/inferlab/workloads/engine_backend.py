"""The engine (inferlab.engine.Engine) behind the backend protocol: `generate` is Engine.stream (requests taken
lazily, Results as they finish), so a job of any length streams through it; constraints (compiled
ConstraintPrograms), steering and collection run inside the engine's captured step, and the engine's intake
turns a request it cannot serve into an error Result. The backend of `inferlab generate --backend inferlab`
and of the lab's engine cells."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator

from inferlab.engine import EngineConfig
from inferlab.types import Request, Result
from inferlab.workloads.backend import Backend, Supports, dtype_name


class EngineBackend(Backend):
    name = "inferlab"
    supports = Supports(constraint=True, steering=True, collect=True)

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.engine_config = config  # the engine's; load's model, device and dtype win
        self.engine: Any = None

    def config_for(self, model_dir: str | Path) -> EngineConfig:
        """The configuration `load` starts the engine with, before its device and dtype (a lab backend sized
        for its cell builds its own)."""
        assert self.engine_config is not None, "EngineBackend(config) or a config_for of its own"
        return dataclasses.replace(self.engine_config, model=str(model_dir))

    def load(self, model_dir: str | Path, device: Any = None, dtype: Any = None) -> None:
        from inferlab.engine import Engine

        config = self.config_for(model_dir)
        if device is not None:
            config = dataclasses.replace(config, device=str(device))
        if dtype is not None:
            config = dataclasses.replace(config, dtype=dtype_name(dtype))
        self.engine = Engine(config)
        self.eos_token_ids = frozenset(self.engine.spec.eos_token_ids)

    def add_steering_vectors(self, vectors: Any) -> None:
        self.engine.add_steering_vectors(vectors)

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        if stop_after_steps is not None:
            requests = [shortened(r, stop_after_steps) for r in requests]
        return self.engine.stream(requests)

    def extra_metrics(self) -> dict[str, Any]:
        stats = self.engine.stats.as_dict()
        return {"engine": stats, "graph_capture_s": stats.get("capture_s")}

    def close(self) -> None:
        """End the engine's life (Engine.close); its config and stats stay readable."""
        if self.engine is not None:
            self.engine.close()


def shortened(request: Request, steps: int) -> Request:
    """`request` asking for at most `steps` new tokens (its minimum cut alike); a constrained request keeps its
    program's length."""
    s = request.sampling
    if request.constraint is not None or s.max_new_tokens <= steps:
        return request
    sampling = dataclasses.replace(s, max_new_tokens=steps, min_new_tokens=min(s.min_new_tokens, steps))
    return dataclasses.replace(request, sampling=sampling)
