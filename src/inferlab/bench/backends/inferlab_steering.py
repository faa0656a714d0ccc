"""Backend `inferlab` of the `steering` scenario: our engine (the workloads' engine backend,
workloads/engine_backend.py), steering and collecting inside its captured step.

One Engine per cell: `max_slots` = batch_size (rows refilled continuously over all the prompts),
`max_seq_len` = the longest prompt + new_tokens. The scenario's vector is registered once as a named set
(add_steering_vectors); a steered request names it (`Steer(layer, "steer", scale)`), a collecting one asks
`Collect(collect_layers, pool)` and gets Result.activations on the host. The engine's own device-clock decode
time and step count (its stats, in extra_metrics) give the step time the scenario reads the steering cost from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.backends.base import BackendSpec, GenerateSpec
from inferlab.bench.backends.inferlab_generate import ENGINE_KNOBS, engine_config
from inferlab.engine import EngineConfig
from inferlab.workloads.engine_backend import EngineBackend


class InferlabSteeringBackend(EngineBackend):
    """The workloads' engine backend sized for the cell."""

    def __init__(self, config: dict[str, Any], spec: GenerateSpec) -> None:
        super().__init__()
        self.cell, self.max_seq_len, self.seed = config, config["prompt_max_tokens"] + spec.new_tokens, spec.seed

    def config_for(self, model_dir: str | Path) -> EngineConfig:
        return engine_config(model_dir, self.cell, self.max_seq_len, self.seed)

    def extra_metrics(self) -> dict[str, Any]:
        extra = super().extra_metrics()
        return {**extra, "steering_collection_setup_s": extra["engine"].get("steering_collection_setup_s")}


BACKEND = BackendSpec(
    "inferlab", "the inferlab engine: steering fused into the residual add + norm, activations collected in the step",
    ENGINE_KNOBS, InferlabSteeringBackend, scenario="steering",
)
