"""Host -> device copies that never make the host wait for the device.

A copy from ordinary (pageable) host memory may synchronise with the stream: the host then waits for the
running decode chunk, and the device idles while the host prepares the next launches. Everything the engine
sends between decode chunks is staged in page-locked memory and copied with non_blocking=True instead;
PyTorch's pinned-memory allocator records the copy on the stream, so a staging buffer is not reused before
the copy ran.
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
