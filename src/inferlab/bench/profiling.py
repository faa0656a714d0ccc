"""Profile one call with torch.profiler and return the event names it produced (aten ops on the host,
kernels on the GPU), for kernel_names.classify. Owns the profiler setup only."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from inferlab.bench.kernel_names import KernelReport, classify


def event_names(fn: Callable[[], Any], device: Any) -> Counter[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_cuda = str(device).startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as prof:
        fn()
        if on_cuda:
            torch.cuda.synchronize()
    return Counter(evt.name for evt in prof.events())


def observe_attention(fn: Callable[[], Any], device: Any) -> KernelReport:
    """Run `fn` once under the profiler and say which attention kernels ran."""
    return classify(event_names(fn, device), on_cpu=not str(device).startswith("cuda"))
