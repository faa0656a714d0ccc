"""Device and dtype resolution inside a cell (child process only: imports torch), and the peak-memory
readings every scenario reports."""

from __future__ import annotations

import resource
import sys
from typing import Any

from inferlab.errors import UnsupportedError

DTYPE_NAMES = ("bfloat16", "float16", "float32")


def resolve_device(name: str) -> Any:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UnsupportedError("device=cuda but torch sees no CUDA device here; use device=cpu or auto")
    return torch.device(name)


def torch_dtype(name: str) -> Any:
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def reset_peak_memory(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: Any) -> dict[str, float | None]:
    """peak_memory_gb (max allocated by torch) and peak_reserved_gb on CUDA, in GB (1e9 bytes); the
    process's peak resident host memory everywhere (ru_maxrss: KiB on Linux, bytes on macOS)."""
    import torch

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_bytes = rss if sys.platform == "darwin" else rss * 1024
    out: dict[str, float | None] = {"peak_memory_gb": None, "peak_reserved_gb": None,
                                    "peak_host_rss_gb": round(rss_bytes / 1e9, 3)}
    if device.type == "cuda":
        out["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 1e9, 3)
        out["peak_reserved_gb"] = round(torch.cuda.max_memory_reserved(device) / 1e9, 3)
    return out
