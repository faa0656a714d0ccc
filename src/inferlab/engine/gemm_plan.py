"""Which implementation runs each projection of the decode step at each batch bucket: cuBLAS (F.linear)
or the skinny Triton GEMM (kernels/triton_gemm.py), decided once at start-up by timing both on the device.

At decode batch sizes (M <= 64 rows) a projection streams its weight matrix, and cuBLAS's choice of kernel
for such skinny shapes reached ~1.8 TB/s on an H200 in the first GPU run (split-K reduce kernels
included), far from the ~4 TB/s the device copies at. Whether our kernel does better depends on the shape,
the batch and the GPU, so it is measured, not assumed: for every (projection, bucket <= 64) the engine
times cuBLAS and a few tiles of the Triton kernel inside a CUDA graph, each call on a cold L2 (a flush
between calls, timed apart and subtracted), over the real weights of successive layers, and keeps Triton
only where it wins by more than MARGIN (so the choice does not flip on noise). The down projection is
timed as silu_mul + GEMM against the fused SwiGLU GEMM. Prefill (hundreds of rows) and the LM head
(128k+ rows of weight, where cuBLAS streams at full speed) stay on cuBLAS. The choices are fixed for the
engine's life and reported in engine.stats.gemm_choices.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

PROJECTIONS = ("qkv", "o", "gate_up", "down")
MAX_ROWS = 64  # the kernel's limit, and where cuBLAS's tensor-core kernels take over anyway
MARGIN = 0.95  # Triton is chosen when it takes < 95% of cuBLAS's time


@dataclass
class GemmPlan:
    """(projection, rows) -> the Triton config to use; absent: cuBLAS."""

    silu_mul: Callable  # ops.silu_mul, for the unfused down projection
    choices: dict = field(default_factory=dict)  # {(name, rows): SkinnyConfig}

    def linear(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, name: str) -> torch.Tensor:
        config = self.choices.get((name, x.shape[0])) if bias is None else None
        if config is None:
            return F.linear(x, w, bias)
        from inferlab.engine.kernels.triton_gemm import skinny_linear

        return skinny_linear(x, w, config)

    def swiglu_down(self, gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up @ w_down^T for gate_up [T, 2I] -> [T, hidden]."""
        config = self.choices.get(("down", gate_up.shape[0]))
        if config is None:
            return F.linear(self.silu_mul(gate_up), w_down)
        from inferlab.engine.kernels.triton_gemm import skinny_linear

        return skinny_linear(gate_up, w_down, config, swiglu=True)

    def describe(self, buckets: list[int]) -> dict[str, str]:
        return {
            f"{name}@{rows}": str(self.choices.get((name, rows), "cublas"))
            for rows in buckets
            if rows <= MAX_ROWS
            for name in PROJECTIONS
        }


def candidate_configs(n: int, k: int, rows: int, sm_count: int) -> list:
    """A few tiles per shape: 32 or 64 weight rows per program, split along K until the grid fills the GPU."""
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig

    block_k = 128 if rows <= 16 else 64  # no register spills at 4 pipeline stages (scripts/gpu/triton_aot_check.py)
    configs = []
    for block_n in (32, 64):
        tiles = -(-n // block_n)
        split = 1
        while tiles * split < sm_count and split < 8 and k // (2 * split) >= block_k:
            split *= 2
        configs.append(SkinnyConfig(block_n, block_k, split))
    return configs


def tune_gemm_plan(weights, buckets: list[int], silu_mul: Callable, device: torch.device) -> tuple[GemmPlan, dict]:
    """Time cuBLAS against the Triton candidates for each projection and bucket <= MAX_ROWS; returns the plan
    and the timings {"name@rows": {impl: us}}."""
    from inferlab.engine.kernels.triton_gemm import skinny_linear

    plan = GemmPlan(silu_mul)
    timings: dict[str, dict[str, float]] = {}
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count
    flush = torch.empty(96 * 1024**2 // 4, dtype=torch.float32, device=device)  # 96 MB: > the L2 of an H100/H200
    layers = weights.layers
    dtype = layers[0].qkv.dtype
    baseline_us = _graph_us(None, len(layers), flush)  # the flushes alone
    for rows in [b for b in buckets if b <= MAX_ROWS]:
        for name in PROJECTIONS:
            mats = [_weight(layer, name) for layer in layers]
            if name == "qkv" and layers[0].qkv_bias is not None:
                continue  # a bias (Qwen2): cuBLAS's fused epilogue
            n, k = mats[0].shape
            x = torch.randn(rows, 2 * k if name == "down" else k, device=device).to(dtype)
            options: dict[str, Callable] = {}
            if name == "down":
                options["cublas"] = lambda i: F.linear(silu_mul(x), mats[i])
            else:
                options["cublas"] = lambda i: F.linear(x, mats[i])
            for config in candidate_configs(n, k, rows, sm_count):
                options[str(config)] = lambda i, c=config: skinny_linear(x, mats[i], c, swiglu=name == "down")
            cell = {label: _time_us(fn, len(mats), flush, baseline_us) for label, fn in options.items()}
            timings[f"{name}@{rows}"] = cell
            best = min((label for label in cell if label != "cublas"), key=cell.get)
            if cell[best] < MARGIN * cell["cublas"]:
                plan.choices[(name, rows)] = next(c for c in candidate_configs(n, k, rows, sm_count) if str(c) == best)
    del flush
    log.info("GEMM plan: %s", {f"{name}@{rows}": str(c) for (name, rows), c in plan.choices.items()} or "cuBLAS only")
    return plan, timings


def _weight(layer, name: str) -> torch.Tensor:
    return {"qkv": layer.qkv, "o": layer.o, "gate_up": layer.gate_up, "down": layer.down}[name]


def _time_us(fn: Callable[[int], torch.Tensor], layers: int, flush: torch.Tensor, baseline_us: float) -> float:
    """Device time of one call of fn(layer), the L2 flushed before each call, in a CUDA graph (no host
    overhead): (graph of flush + call for every layer - the flushes' own time) per call."""
    side = torch.cuda.Stream()  # compile and warm up outside the capture, off the capture stream (cuBLAS)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(layers):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    return max(0.0, _graph_us(fn, layers, flush) - baseline_us) / layers


def _graph_us(fn, layers: int, flush: torch.Tensor) -> float:
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(layers):
            flush.zero_()
            if fn is not None:
                fn(i)
    graph.replay()  # warm
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / 3
