"""The device's measured ceilings for the decode step's roofline (scenario decode-profile), besides the large
copy's bandwidth (bandwidth.py): the matrix rate of a large product in the model dtype, the bandwidth copies
of the sizes a decode step's kernels move reach, the shortest a kernel runs (a trivial kernel's profiled
duration: the launch floor) and, on CUDA, the gap between trivial kernels replayed in a graph and the number of
SMs. Measured
once per run and device (cached in the run's cache folder, like bandwidth.py). Child process only.

On CUDA each copy is an elementwise kernel (out = x * 1: reads and writes its bytes once), its duration read
from the profiler, so launch gaps do not count against the bandwidth; the gap is the replay time of a graph
of trivial kernels per kernel, less their duration.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

COPY_SIZES_MB = (1, 4, 16, 64)  # bytes copied per kernel (moved: twice that), on CUDA; CPU: the first three
TRIVIAL_KERNELS = 100  # kernels in the graph that measures the floor and the gap
MATMUL_N = 8192  # CUDA; the CPU product is 512 square


def _kernel_durations_us(fn: Callable[[], Any]) -> list[float]:
    """Device durations of the kernels (and copies) `fn` runs, in order, from torch.profiler."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    return [e.time_range.end - e.time_range.start for e in events]


def _graph(fn: Callable[[], Any]) -> Any:
    import torch

    fn()  # warm: compiles and allocates outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def _cuda_limits(device: Any, dtype: Any) -> dict[str, Any]:
    import torch

    a = torch.randn(MATMUL_N, MATMUL_N, device=device).to(dtype)
    b = torch.randn(MATMUL_N, MATMUL_N, device=device).to(dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    tflops = 2 * MATMUL_N**3 / statistics.median(times) / 1e12
    del a, b
    curve = []
    for mb in COPY_SIZES_MB:
        n = mb * 2**20 // 4
        src, dst = torch.ones(8, n, device=device), torch.empty(8, n, device=device)  # 8 buffers: no L2 reuse
        copies = lambda: [torch.mul(src[i], 1.0, out=dst[i]) for i in range(8)]  # noqa: E731
        copies()
        durations = _kernel_durations_us(copies)
        curve.append((2.0 * n * 4, 2.0 * n * 4 / (statistics.median(durations) * 1e3)))
    tiny = torch.zeros(1, device=device)
    trivial = lambda: [tiny.add_(1.0) for _ in range(TRIVIAL_KERNELS)]  # noqa: E731
    floor_us = statistics.median(_kernel_durations_us(trivial))
    graph = _graph(trivial)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        graph.replay()
    end.record()
    end.synchronize()
    per_kernel_us = start.elapsed_time(end) * 1e3 / (20 * TRIVIAL_KERNELS)
    torch.cuda.empty_cache()
    return {"matmul_tflops": tflops, "copy_curve": curve, "kernel_floor_us": floor_us,
            "graph_gap_us": max(0.0, per_kernel_us - floor_us),
            "sm_count": torch.cuda.get_device_properties(device).multi_processor_count}  # fmt: skip


def _cpu_limits(dtype: Any) -> dict[str, Any]:
    import torch

    def median_s(fn: Callable[[], Any], repeats: int) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    a, b = torch.randn(512, 512).to(dtype), torch.randn(512, 512).to(dtype)
    tflops = 2 * 512**3 / median_s(lambda: a @ b, 5) / 1e12
    curve = []
    for mb in COPY_SIZES_MB[:3]:
        src = torch.ones(mb * 2**20 // 4)
        dst = torch.empty_like(src)
        seconds = median_s(lambda: torch.mul(src, 1.0, out=dst), 5)
        curve.append((2.0 * src.numel() * 4, 2.0 * src.numel() * 4 / seconds / 1e9))
    tiny = torch.zeros(1)
    floor_us = median_s(lambda: [tiny.add_(1.0) for _ in range(TRIVIAL_KERNELS)], 5) / TRIVIAL_KERNELS * 1e6
    return {"matmul_tflops": tflops, "copy_curve": curve, "kernel_floor_us": floor_us, "graph_gap_us": None,
            "sm_count": None}


def device_limits(device: Any, dtype: Any, cache_dir: Path) -> dict[str, Any]:
    """Measured once per run, device and dtype (see the module docstring)."""
    from inferlab.bench.bandwidth import device_id

    path = cache_dir / "device_limits.json"
    cached = json.loads(path.read_text()) if path.is_file() else {}
    key = f"{device_id(device)}|{str(dtype).removeprefix('torch.')}"
    if key not in cached:
        cached[key] = _cuda_limits(device, dtype) if device.type == "cuda" else _cpu_limits(dtype)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cached, indent=1))
    return cached[key]
