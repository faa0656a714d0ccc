"""Backend `inferlab` of the `steering` scenario: our engine (the workloads' engine backend,
workloads/engine_backend.py), steering and collecting inside its captured step.

One Engine per cell: `max_slots` = batch_size (rows refilled continuously over all the prompts),
`max_seq_len` = the longest prompt + new_tokens. The scenario's vector is registered once as a named set
(add_steering_vectors); a steered request names it (`Steer(layer, "steer", scale)`), a collecting one asks
`Collect(collect_layers, pool)` and gets Result.activations on the host. The engine's own device-clock decode
time and step count (its stats, in extra_metrics) give the step time the scenario reads the steering cost from.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench.backends.base import BackendSpec, GenerateSpec
from inferlab.bench.knobs import Knob
from inferlab.workloads.engine_backend import EngineBackend

KNOBS = (
    Knob("cuda_graphs", bool, True, "capture the decode step in CUDA graphs (on CUDA)"),
    Knob("kernels", str, "auto", "Triton kernels (auto: on CUDA) or plain torch", choices=("auto", "torch", "triton")),
    Knob("gemm", str, "auto", "decode projections: auto (timed choice) or cublas", choices=("auto", "cublas")),
    Knob("decode_steps_per_sync", int, 16, "decode steps between host reads of the finished flags", minimum=1),
)


class InferlabSteeringBackend(EngineBackend):
    """The workloads' engine backend sized for the cell."""

    def __init__(self, config: dict[str, Any], spec: GenerateSpec) -> None:
        super().__init__({
            "max_slots": config["batch_size"], "max_seq_len": config["prompt_max_tokens"] + spec.new_tokens,
            "seed": spec.seed, "cuda_graphs": None if config["cuda_graphs"] else False,  # None: on for CUDA
            "kernels": config["kernels"], "gemm": config["gemm"],
            "decode_steps_per_sync": config["decode_steps_per_sync"], "decode_text": False,
        })

    def extra_metrics(self) -> dict[str, Any]:
        extra = super().extra_metrics()
        return {**extra, "steering_collection_setup_s": extra["engine"].get("steering_collection_setup_s")}


BACKEND = BackendSpec(
    name="inferlab",
    description="the inferlab engine: steering fused into the residual add + norm, activations collected in the step",
    knobs=KNOBS,
    create=lambda config, spec: InferlabSteeringBackend(config, spec),
    scenario="steering",
)
