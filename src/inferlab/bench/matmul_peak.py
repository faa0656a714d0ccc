"""The device's measured bf16 matmul rate: large square matmuls timed once per run and device (cached in the
run's cache folder, as bench/bandwidth.py caches the copy rate), so a prefill's achieved TFLOP/s is read as a
percentage of what this device really does, not of its datasheet. Child process only (imports torch)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SIZE = 8192  # M = N = K: large enough for cuBLAS's best tiles on any current GPU


def measure_matmul_tflops(device: Any, repeats: int = 20) -> float:
    """Median TFLOP/s of bf16 [SIZE, SIZE] x [SIZE, SIZE] matmuls on `device` (CUDA events, after a warm-up)."""
    import statistics

    import torch

    a = torch.randn(SIZE, SIZE, device=device, dtype=torch.bfloat16)
    b = torch.randn(SIZE, SIZE, device=device, dtype=torch.bfloat16)
    out = torch.empty(SIZE, SIZE, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b, out=out)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b, out=out)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    del a, b, out
    torch.cuda.empty_cache()
    return 2 * SIZE**3 / statistics.median(times) / 1e12


def device_matmul_tflops(device: Any, cache_dir: Path) -> float | None:
    """Measured once per run and CUDA device; None on CPU or if the measurement fails (a reference)."""
    import torch

    if device.type != "cuda":
        return None
    path = cache_dir / "device_matmul_peak.json"
    cached = json.loads(path.read_text()) if path.is_file() else {}
    key = f"cuda:{torch.cuda.get_device_name(device)}"
    if key not in cached:
        try:
            cached[key] = round(measure_matmul_tflops(device), 1)
        except Exception as e:  # e.g. not enough free memory; the cell goes on without it
            log.warning("matmul peak measurement failed: %s", e)
            return None
        path.write_text(json.dumps(cached, indent=1))
    return cached[key]
