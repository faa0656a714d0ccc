"""Backend `inferlab` of the `generate` scenario: our engine (inferlab.engine) through its public API.

One Engine per cell, sized for the cell: `max_slots` = batch_size, `max_seq_len` = prompt + new tokens, so
the KV cache is exactly what the comparison needs. Building the engine (weights, Triton JIT, GEMM choice,
CUDA-graph capture) happens in `load`, which the scenario times apart; each `generate` call is one
`Engine.generate` over the batch, every row asked for exactly `new_tokens` tokens (min == max, EOS
ignored), like every other backend. The engine's own figures (capture time, decode steps, its bandwidth
estimate, its KV dtype) go to the row through `extra_metrics`; knob `kv_dtype=fp8` runs the FP8 KV cache, and
the scenario then counts its bytes (`kv_bytes_per_position`) in the achieved bandwidth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.backends import estimates
from inferlab.bench.backends.base import BackendSpec, GenerateSpec
from inferlab.bench.knobs import Knob

KNOBS = (
    Knob("cuda_graphs", bool, True, "capture the decode step in CUDA graphs (on CUDA)"),
    Knob("kernels", str, "auto", "Triton kernels (auto: on CUDA) or plain torch", choices=("auto", "torch", "triton")),
    Knob("gemm", str, "auto", "decode projections: auto (timed choice of cuBLAS or our skinny Triton GEMM) or cublas",
         choices=("auto", "cublas")),
    Knob("decode_steps_per_sync", int, 16, "decode steps between host reads of the finished flags", minimum=1),
    Knob("kv_dtype", str, "auto", "KV cache: auto (the model dtype) or fp8 (e4m3 + per-position scales; CUDA >= 8.9)",
         choices=("auto", "fp8")),
)


class InferlabGenerateBackend:
    def __init__(self, config: dict[str, Any], spec: GenerateSpec) -> None:
        self.config = config
        self.spec = spec
        self.engine: Any = None
        self.eos_token_ids: frozenset[int] = frozenset()
        self.calls = 0

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        import torch

        from inferlab.engine import Engine, EngineConfig

        c = self.config
        dtype_name = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[dtype]
        self.engine = Engine(EngineConfig(
            model=str(model_dir), device=str(device), dtype=dtype_name, max_slots=c["batch_size"],
            max_seq_len=c["prompt_tokens"] + self.spec.new_tokens, seed=self.spec.seed,
            cuda_graphs=c["cuda_graphs"] if device.type == "cuda" else False, kernels=c["kernels"], gemm=c["gemm"],
            decode_steps_per_sync=c["decode_steps_per_sync"], kv_dtype=c["kv_dtype"], decode_text=False,
        ))
        self.eos_token_ids = frozenset(self.engine.spec.eos_token_ids)

    def generate(self, prompt_ids: Any, stop_after_steps: int | None = None) -> list[list[int]]:
        from inferlab.types import Request, SamplingParams

        s = self.spec
        new_tokens = min(stop_after_steps, s.new_tokens) if stop_after_steps else s.new_tokens
        sampling = SamplingParams(
            temperature=s.temperature if s.do_sample else 0.0, top_p=s.top_p, top_k=s.top_k,
            max_new_tokens=new_tokens, min_new_tokens=new_tokens,  # EOS masked until then, as HF's min_new_tokens
        )
        self.calls += 1
        requests = [Request(id=f"{self.calls}-{i}", prompt_ids=tuple(row), sampling=sampling)
                    for i, row in enumerate(prompt_ids.tolist())]
        return [list(r.token_ids) for r in self.engine.generate(requests)]

    def kv_bytes_per_position(self) -> int:
        """The KV bytes one position costs in this engine's cache (fp8: values + scales), for the scenario's
        bandwidth figure, which otherwise prices K/V at the model dtype."""
        return self.engine.kv_bytes_per_token

    def close(self) -> None:
        """End the engine's life (Engine.close): the scenario calls it after its last use."""
        if self.engine is not None:
            self.engine.close()

    def extra_metrics(self) -> dict[str, Any]:
        stats = self.engine.stats.as_dict()
        return {"engine": stats, "graph_capture_s": stats.get("capture_s"),
                "engine_decode_gb_per_s": self.engine.stats.decode_gb_per_s}


BACKEND = BackendSpec(
    name="inferlab",
    description="the inferlab engine: static KV cache, CUDA-graph decode, sampling on the device",
    knobs=KNOBS,
    create=lambda config, spec: InferlabGenerateBackend(config, spec),
    estimate_s=estimates.inferlab_generate,
)
