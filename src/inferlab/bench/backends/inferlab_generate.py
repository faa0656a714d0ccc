"""Backend `inferlab` of the `generate` scenario: our engine through the workloads' engine backend
(workloads/engine_backend.py, the one `inferlab generate` runs).

One Engine per cell, sized for the cell: `max_slots` = batch_size, `max_seq_len` = prompt + new tokens, so
the KV cache is exactly what the comparison needs. Building the engine (weights, Triton JIT, GEMM choice,
CUDA-graph capture) happens in `load`, which the scenario times apart; each `generate` call streams the
batch's requests through the engine, every row asked for exactly `new_tokens` tokens (min == max, EOS
masked), like every other backend. The engine's own figures (capture time, decode steps, its bandwidth
estimate, its KV dtype) go to the row through `extra_metrics`; knob `kv_dtype=fp8` runs the FP8 KV cache, and
the scenario then counts its bytes (`kv_bytes_per_position`) in the achieved bandwidth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.backends import estimates
from inferlab.bench.backends.base import BackendSpec, GenerateSpec
from inferlab.bench.knobs import Knob
from inferlab.engine import EngineConfig
from inferlab.workloads.engine_backend import EngineBackend

DECODE_STEPS_PER_SYNC_KNOB = Knob("decode_steps_per_sync", int, 16, "decode steps between host reads of the finished "
                                  "flags", minimum=1)
KV_DTYPE_KNOB = Knob("kv_dtype", str, "auto", "KV cache: auto (the model dtype) or fp8 (e4m3 + per-position scales; "
                     "CUDA >= 8.9)", choices=("auto", "fp8"))
ENGINE_KNOBS = (  # the engine's knobs in the generating scenarios (generate, steering)
    Knob("cuda_graphs", bool, True, "capture the decode step in CUDA graphs (on CUDA)"),
    Knob("kernels", str, "auto", "Triton kernels (auto: on CUDA) or plain torch", choices=("auto", "torch", "triton")),
    Knob("gemm", str, "auto", "decode projections: auto (timed choice of cuBLAS or our skinny Triton GEMM) or cublas",
         choices=("auto", "cublas")),
    DECODE_STEPS_PER_SYNC_KNOB,
)
KNOBS = (*ENGINE_KNOBS, KV_DTYPE_KNOB)


def engine_config(model_dir: str | Path, config: dict[str, Any], max_seq_len: int, seed: int,
                  **more: Any) -> EngineConfig:
    """The engine of a cell of ENGINE_KNOBS: `batch_size` slots of up to `max_seq_len` positions (`more`: other
    EngineConfig fields)."""
    return EngineConfig(model=str(model_dir), max_slots=config["batch_size"], max_seq_len=max_seq_len, seed=seed,
                        cuda_graphs=None if config["cuda_graphs"] else False,  # None: on for CUDA
                        kernels=config["kernels"], gemm=config["gemm"],
                        decode_steps_per_sync=config["decode_steps_per_sync"], decode_text=False, **more)


class InferlabGenerateBackend(EngineBackend):
    """The workloads' engine backend sized for the cell; its KV bytes per position for the scenario's bandwidth."""

    def __init__(self, config: dict[str, Any], spec: GenerateSpec) -> None:
        super().__init__()
        self.cell, self.max_seq_len, self.seed = config, config["prompt_tokens"] + spec.new_tokens, spec.seed

    def config_for(self, model_dir: str | Path) -> EngineConfig:
        return engine_config(model_dir, self.cell, self.max_seq_len, self.seed, kv_dtype=self.cell["kv_dtype"])

    def kv_bytes_per_position(self) -> int:
        """The KV bytes one position costs in this engine's cache (fp8: values + scales), for the scenario's
        bandwidth figure, which otherwise prices K/V at the model dtype."""
        return self.engine.kv_bytes_per_token

    def extra_metrics(self) -> dict[str, Any]:
        return {**super().extra_metrics(), "engine_decode_gb_per_s": self.engine.stats.decode_gb_per_s}


BACKEND = BackendSpec(
    "inferlab", "the inferlab engine: static KV cache, CUDA-graph decode, sampling on the device",
    KNOBS, InferlabGenerateBackend, estimate_s=estimates.inferlab_generate,
)
