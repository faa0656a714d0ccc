"""The device's measured memory bandwidth: a one-off device-to-device copy, cached per run (in the run's
cache folder, keyed by device), so achieved GB/s can be read against what this device really does.
Child process only (imports torch)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def device_id(device: Any) -> str:
    import torch

    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return "cpu"


def measure_copy_gb_per_s(device: Any, repeats: int = 10) -> float:
    """(read + write bytes) / time of a large tensor copy, median of `repeats`: 1 GiB on CUDA, 256 MiB on CPU."""
    import statistics
    import time

    import torch

    nbytes = 2**30 if device.type == "cuda" else 2**28
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    dst.copy_(src)
    times = []
    for _ in range(repeats if device.type == "cuda" else 3):
        sync()
        start = time.perf_counter()
        dst.copy_(src)
        sync()
        times.append(time.perf_counter() - start)
    del src, dst
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(times) / 1e9


def device_bandwidth_gb_per_s(device: Any, cache_dir: Path) -> float | None:
    """Measured once per run and device; None if the measurement fails (it is a reference, not a result)."""
    path = cache_dir / "device_bandwidth.json"
    cached = json.loads(path.read_text()) if path.is_file() else {}
    key = device_id(device)
    if key not in cached:
        try:
            cached[key] = round(measure_copy_gb_per_s(device), 1)
        except Exception as e:  # e.g. not enough free memory for the copy; the cell goes on without it
            log.warning("device bandwidth measurement failed: %s", e)
            return None
        path.write_text(json.dumps(cached, indent=1))
    return cached[key]
