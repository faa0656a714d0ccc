"""The device properties kernel wrappers size their grids by, for tensors on any device.

The start-up's kernel precompile (engine/kernel_precompile.py) runs the engine's warm-up on "meta" tensors
(shapes without memory) to find the kernels it will compile; a wrapper that sizes its grid by the GPU must
then answer for the GPU the meta tensors stand for, or it would ask for other specialisations than the
real warm-up does. `meta_stands_for(device)` says which device that is, in the calling thread.
"""

from __future__ import annotations

import functools
import threading
from typing import ContextManager

import torch

from inferlab.engine.thread_scoped import scoped

_stand_in = threading.local()  # .device: what meta tensors stand for in this thread (unset: the CPU)


def meta_stands_for(device: torch.device) -> ContextManager[None]:
    """Inside, sm_count of a meta tensor's device answers for `device` (in this thread only)."""
    return scoped(_stand_in, "device", device)


def sm_count(device: torch.device, cpu_value: int) -> int:
    """Streaming multiprocessors of `device`; `cpu_value` off CUDA (what a wrapper wants on the CPU, where
    the Triton interpreter runs programs one by one). A meta device answers for meta_stands_for's device."""
    if device.type == "meta":
        device = getattr(_stand_in, "device", None) or torch.device("cpu")
    return _cuda_sm_count(device) if device.type == "cuda" else cpu_value


@functools.lru_cache(maxsize=None)
def _cuda_sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count
