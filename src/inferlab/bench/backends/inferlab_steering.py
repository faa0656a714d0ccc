"""Backend `inferlab` of the `steering` scenario: our engine, steering and collecting inside its captured step.

One Engine per cell: `max_slots` = batch_size (rows refilled continuously over all the prompts),
`max_seq_len` = the longest prompt + new_tokens. The scenario's vector is registered once as a named set
(`Engine.add_steering_vectors`); a steered pass names it in every request (`Steer(layer, "steer", scale)`),
a collecting pass asks `Collect(collect_layers, pool)` and gets Result.activations on the host. Requests
keep their ids across passes, so every pass samples with the same per-request seeds. The engine's own
device-clock decode time and step count per pass give the step time the steering cost is read from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.backends.base import BackendSpec
from inferlab.bench.backends.steering_base import PassOutput, SteeringSpec
from inferlab.bench.knobs import Knob

KNOBS = (
    Knob("cuda_graphs", bool, True, "capture the decode step in CUDA graphs (on CUDA)"),
    Knob("kernels", str, "auto", "Triton kernels (auto: on CUDA) or plain torch", choices=("auto", "torch", "triton")),
    Knob("gemm", str, "auto", "decode projections: auto (timed choice) or cublas", choices=("auto", "cublas")),
    Knob("decode_steps_per_sync", int, 16, "decode steps between host reads of the finished flags", minimum=1),
)


class InferlabSteeringBackend:
    def __init__(self, config: dict[str, Any], spec: SteeringSpec) -> None:
        self.config = config
        self.spec = spec
        self.engine: Any = None

    def load(self, model_dir: Path, device: Any, dtype: Any, vector: Any) -> None:
        import torch

        from inferlab.engine import Engine, EngineConfig, SteeringVectors

        c = self.config
        dtype_name = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[dtype]
        self.engine = Engine(EngineConfig(
            model=str(model_dir), device=str(device), dtype=dtype_name, max_slots=c["batch_size"],
            max_seq_len=c["prompt_max_tokens"] + self.spec.new_tokens, seed=self.spec.seed,
            cuda_graphs=c["cuda_graphs"] if device.type == "cuda" else False, kernels=c["kernels"], gemm=c["gemm"],
            decode_steps_per_sync=c["decode_steps_per_sync"], decode_text=False,
        ))
        self.engine.add_steering_vectors(SteeringVectors({"steer": vector}, source="the scenario's vector"))

    def run(self, prompts: list[list[int]], mode: str, new_tokens: int | None = None,
            pool: str | None = None) -> PassOutput:
        from inferlab.types import Collect, Request, SamplingParams, Steer

        s = self.spec
        n = new_tokens or s.new_tokens
        sampling = SamplingParams(temperature=s.temperature if s.do_sample else 0.0, top_p=s.top_p, max_new_tokens=n,
                                  min_new_tokens=n)  # EOS masked until n: exactly n tokens per row
        steering = (Steer(s.layer, "steer", s.scale),) if "steer" in mode else ()
        collect = Collect(s.collect_layers, pool or s.collect_pool) if "collect" in mode else None
        stats = self.engine.stats
        decode_s, steps = stats.decode_s, stats.decode_steps
        results = self.engine.generate([Request(id=f"p{i}", prompt_ids=tuple(p), sampling=sampling, steering=steering,
                                                collect=collect) for i, p in enumerate(prompts)])
        failed = [r for r in results if not r.ok]
        if failed:
            raise RuntimeError(f"{len(failed)} requests failed, e.g. {failed[0].id}: {failed[0].error}")
        return PassOutput(sum(len(r.token_ids) for r in results),
                          [r.activations for r in results] if collect is not None else None,
                          stats.decode_s - decode_s, stats.decode_steps - steps, [r.token_ids for r in results])

    def extra_metrics(self) -> dict[str, Any]:
        stats = self.engine.stats.as_dict()
        return {"engine": stats, "graph_capture_s": stats.get("capture_s"),
                "steering_collection_setup_s": stats.get("steering_collection_setup_s")}


BACKEND = BackendSpec(
    name="inferlab",
    description="the inferlab engine: steering fused into the residual add + norm, activations collected in the step",
    knobs=KNOBS,
    create=lambda config, spec: InferlabSteeringBackend(config, spec),
    scenario="steering",
)
