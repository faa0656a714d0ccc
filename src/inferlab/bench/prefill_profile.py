"""Where a packed prefill's device time goes: a few of a cell's batches under torch.profiler, the kernels
summed by family (knob `profile` of the classify and hidden-states scenarios; child process only).

Families by kernel name (the first rule that matches): attention (the varlen kernels, FlashAttention's), gemm
(cuBLAS's nvjet / cutlass / xmma kernels, ours: the skinny and wide Triton GEMMs, aten's mm on the CPU), rope,
norm, activation (act_mul), copy (copies, fills, gathers), other. Per family: device microseconds per pass over
the profiled batches, share of the kernels' time, and for gemm and attention their TFLOP/s and the fraction of
the measured matmul peak (model FLOPs as flops.prefill_flops counts them: the projections for gemm, q.k and
p.v for attention). `busy` is the kernels' time over the profiled span's wall time: below 1, the device waited
for the host (a batch's packing, its upload, the Python between launches). On the CPU the aten ops' self
times stand for kernels.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from typing import Any, Callable, Sequence

FAMILY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (family, re.compile(pattern, re.IGNORECASE))
    for family, pattern in (
        ("attention", r"attention|attn|fmha|flash"),
        ("gemm", r"gemm|nvjet|cutlass|xmma|cublas|aten::(add)?mm$|aten::bmm$|aten::linear$|_skinny|wide_gated"),
        ("rope", r"rope|rotary"),
        ("norm", r"norm"),
        ("activation", r"act_mul|silu|gelu"),
        ("copy", r"copy|memcpy|memset|fill|index|gather|scatter|cat"),
    )
)
FAMILIES = (*(family for family, _ in FAMILY_RULES), "other")
TOP_KERNELS = 12


def family_of(name: str) -> str:
    for family, pattern in FAMILY_RULES:
        if pattern.search(name):
            return family
    return "other"


def kernel_times(events: Any, on_cuda: bool) -> dict[str, float]:
    """Kernel (or, on the CPU, aten op) name -> device microseconds summed over the profiler's events."""
    from torch.autograd import DeviceType

    totals: dict[str, float] = defaultdict(float)
    for event in events:
        if on_cuda:
            if event.device_type == DeviceType.CUDA:
                totals[event.name] += event.time_range.elapsed_us()
        elif event.name.startswith("aten::") and event.self_cpu_time_total > 0:
            totals[event.name] += event.self_cpu_time_total
    return dict(totals)


def family_table(times: dict[str, float], passes: int, wall_us: float, projection_flops: float,
                 attention_flops: float, peak_tflops: float | None) -> dict[str, Any]:
    """The profile's figures from kernel times over `passes` runs of the batches (flops: one pass's)."""
    by_family: dict[str, float] = defaultdict(float)
    for name, us in times.items():
        by_family[family_of(name)] += us
    kernels_us = sum(by_family.values())
    flops = {"gemm": projection_flops, "attention": attention_flops}
    rows = []
    for family in FAMILIES:
        us = by_family.get(family, 0.0) / passes
        if not us:
            continue
        row: dict[str, Any] = {"family": family, "us": round(us, 1), "share": round(us * passes / kernels_us, 4)}
        if family in flops:
            tflops = flops[family] / us / 1e6
            row["tflops"] = float(f"{tflops:.3g}")  # significant digits: a CPU's rate is a few GFLOP/s
            row["pct_of_matmul_peak"] = round(100 * tflops / peak_tflops, 1) if peak_tflops else None
        rows.append(row)
    top = sorted(times.items(), key=lambda item: -item[1])[:TOP_KERNELS]
    return {"families": rows, "kernels_us": round(kernels_us / passes, 1), "wall_us": round(wall_us / passes, 1),
            "busy": round(kernels_us / wall_us, 4) if wall_us else None,
            "top_kernels": [{"kernel": name[:120], "family": family_of(name), "us": round(us / passes, 1)}
                            for name, us in top]}  # fmt: skip


def profile_batches(encode: Callable[[Any], Any], batches: Sequence[Any], device: Any, projection_flops: float,
                    attention_flops: float, peak_tflops: float | None, passes: int = 2) -> dict[str, Any]:
    """`encode` over `batches`, `passes` times under the profiler (after one pass unprofiled: nothing compiles
    or allocates for the first time inside); the flops are one pass's."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_cuda = str(device).startswith("cuda")

    def run() -> None:
        for batch in batches:
            encode(batch)
        if on_cuda:
            torch.cuda.synchronize(device)

    run()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        for _ in range(passes):
            run()
        wall_us = (time.perf_counter() - started) * 1e6
    table = family_table(kernel_times(prof.events(), on_cuda), passes, wall_us, projection_flops, attention_flops,
                         peak_tflops)  # fmt: skip
    return {"batches": len(batches), "passes": passes, **table}
