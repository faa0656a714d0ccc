"""Host -> device copies that never make the host wait for the device.

A copy from ordinary (pageable) host memory may synchronise with the stream: the host then waits for
the decode chunk that is running, and the device idles while the host prepares the next launches (the
first GPU run lost ~5 ms per sync point this way: prefill and release created device tensors straight
from Python lists). Everything the engine sends between decode chunks goes through here instead: the
values are staged in page-locked memory and copied with non_blocking=True. PyTorch's pinned-memory
allocator records the copy on the stream, so the staging buffer is not reused before the copy ran.
Not here: device -> host reads (snapshots.py).
"""

from __future__ import annotations

from typing import Sequence

import torch


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`host` (a CPU tensor) on `device`, without blocking the host when the device is a GPU."""
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def tensor_on(values: Sequence, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """torch.tensor(values) on `device` through pinned memory (see the module docstring)."""
    return to_device(torch.tensor(values, dtype=dtype), device)
