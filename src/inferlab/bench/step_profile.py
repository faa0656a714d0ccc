"""Which kernel family (bench/roofline.py) each kernel of a decode step belongs to, and its device time
(scenario decode-profile). Child process only.

Labels: the engine's DecodeStepProbe runs eager steps with every operation (the op set, the GEMM plan's
projections, the LM head) inside a range its `labelled(range_for)` names by family; `family_range` is the
range given to it here, a torch.profiler range; each step runs inside the range `other` (`step_range`: what
launches outside a family's range). On CUDA every range is synchronised (the device drained before it opens
and before it closes), so a range's kernels run inside its time span.
Attribution on CUDA: by the innermost of torch's device-side copies of the ranges (it records the span of each
range's kernels on the device timeline) that holds the kernel's start; where those are missing, by a kernel's
correlation id, which is the id of the runtime call that launched it (cudaLaunchKernel, cuLaunchKernelEx,
cudaMemsetAsync...), whose host time lies inside the innermost range; else by the innermost (synchronised) host
range whose span holds the kernel's start; failing all, by pairing the launches and the kernels in order (if
their counts agree). On CPU the aten ops' self times count for the range their start lies in.
Graph replays run the eager step's launches in the same order, so the eager step's labels carry over to the
replayed kernels (aligned by name: a library may choose another kernel under capture, and a replay's host side
may launch a kernel of its own, which `graph_kernels` leaves out); when the profiler shows no kernel of the
replays, or too few of them match, the caller takes the eager steps' own kernel times (and says so).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from inferlab.bench.roofline import FAMILIES, Measured

PREFIX = "roofline:"
OUTSIDE = "other"  # the range each profiled step runs in: kernels of no family's range


@dataclass(frozen=True)
class Kernel:
    name: str
    start_us: float
    us: float
    family: str


@contextmanager
def family_range(family: str, synchronise: bool = False) -> Iterator[None]:
    """A profiler range named after `family` (unknown names: `other`); `synchronise`: the device drained on the
    way in (before the range opens) and on the way out (before it closes)."""
    import torch
    from torch.profiler import record_function

    if synchronise:
        torch.cuda.synchronize()
    with record_function(PREFIX + (family if family in FAMILIES else OUTSIDE)):
        yield
        if synchronise:
            torch.cuda.synchronize()


def step_range(synchronise: bool):
    """The range a profiled step runs in (its kernels outside every family's range count as `other`)."""
    return family_range(OUTSIDE, synchronise)


def profile_events(fn: Callable[[], Any], on_cuda: bool) -> list[Any]:
    """Every event torch.profiler records while `fn` runs (host ops, ranges, runtime calls, device kernels)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as prof:
        fn()
        if on_cuda:
            torch.cuda.synchronize()
    return list(prof.events())


def _is_device(event: Any) -> bool:
    """A device kernel, copy or memset (not the device-side copy of a profiler range, which torch also records)."""
    from torch.autograd import DeviceType

    return event.device_type != DeviceType.CPU and not event.name.startswith(PREFIX)


def _is_launch(name: str) -> bool:
    return name.startswith("cu") and any(word in name for word in ("Launch", "Memset", "Memcpy"))


def device_kernels(events: list[Any]) -> list[Kernel]:
    """The device's kernels (and copies, memsets) in start order, unlabelled."""
    kernels = [e for e in events if _is_device(e)]
    kernels.sort(key=lambda e: e.time_range.start)
    return [Kernel(e.name, e.time_range.start, e.time_range.end - e.time_range.start, "") for e in kernels]


def labelled_kernels(events: list[Any], on_cuda: bool) -> tuple[list[Kernel], str]:
    """Each kernel (CUDA) or aten op (CPU) with its family, and how they were attributed."""
    from torch.autograd import DeviceType

    def spans(device: bool) -> list[tuple[float, float, str]]:
        return [(e.time_range.start, e.time_range.end, e.name[len(PREFIX):]) for e in events
                if e.name.startswith(PREFIX) and (e.device_type != DeviceType.CPU) == device]  # fmt: skip

    def family_at(t: float, ranges: list[tuple[float, float, str]]) -> str:
        inside = [r for r in ranges if r[0] <= t <= r[1]]
        return max(inside, key=lambda r: r[0])[2] if inside else OUTSIDE

    host = spans(device=False)
    if not on_cuda:
        ops = [e for e in events if not _is_device(e) and e.name.startswith("aten::") and e.self_cpu_time_total > 0]
        ops.sort(key=lambda e: e.time_range.start)
        return [Kernel(e.name, e.time_range.start, e.self_cpu_time_total, family_at(e.time_range.start, host))
                for e in ops], "cpu ops"  # fmt: skip
    kernels = device_kernels(events)
    gpu = spans(device=True)  # torch's device-side copies of the ranges, where it records them
    device = sorted((e for e in events if _is_device(e)), key=lambda e: e.time_range.start)
    launches = [e for e in events if not _is_device(e) and _is_launch(e.name)]
    by_id = {e.id: e for e in launches}
    if gpu and all(any(r[0] <= k.start_us <= r[1] for r in gpu) for k in kernels):
        return [dataclasses.replace(k, family=family_at(k.start_us, gpu)) for k in kernels], "device ranges"
    if all(e.id in by_id for e in device):
        starts, how = [by_id[e.id].time_range.start for e in device], "correlation ids"
    elif host and all(any(r[0] <= k.start_us <= r[1] for r in host) for k in kernels):
        starts, how = [k.start_us for k in kernels], "synchronised ranges"
    elif len(launches) == len(device):
        starts, how = [e.time_range.start for e in sorted(launches, key=lambda e: e.time_range.start)], "launch order"
    else:
        return [dataclasses.replace(k, family=OUTSIDE) for k in kernels], "unattributed"
    return [dataclasses.replace(k, family=family_at(t, host)) for k, t in zip(kernels, starts)], how


def one_step(kernels: list[Kernel], steps: int) -> list[Kernel] | None:
    """The first step's kernels when `kernels` are `steps` repetitions of the same launches, else None."""
    if steps < 1 or not kernels or len(kernels) % steps:
        return None
    n = len(kernels) // steps
    if any(kernels[i].name != kernels[i % n].name for i in range(len(kernels))):
        return None
    return kernels[:n]


def graph_kernels(events: list[Any]) -> list[Kernel]:
    """The kernels the replayed graphs ran: those whose correlation id is a graph launch's (a replay's host side
    may launch kernels of its own, e.g. torch's fills of the RNG offsets), or every kernel where none is."""
    launches = {e.id for e in events if not _is_device(e) and "GraphLaunch" in e.name}
    kernels = device_kernels(events)
    ids = [e.id for e in sorted((e for e in events if _is_device(e)), key=lambda e: e.time_range.start)]
    inside = [k for k, i in zip(kernels, ids) if i in launches]
    return inside or kernels


def carry_labels(step: list[Kernel], replayed: list[Kernel], min_matched: float = 0.5
                 ) -> tuple[list[Kernel], int] | None:  # fmt: skip
    """The replayed kernels with the labels of the eager step's kernels, and how many matched by name: the
    replays are aligned with the step's launches repeated (difflib on the names). A kernel in a run of equal
    names, or in place of another kernel (a library chose another one under capture), takes its counterpart's
    family; one more than its counterparts (a kernel added) the family of the kernel before it. None when fewer
    than `min_matched` of the replayed kernels have an equal name in the alignment."""
    n = len(step)
    if n == 0 or not replayed:
        return None
    names = [k.name for k in step] * -(-len(replayed) // n)
    matcher = difflib.SequenceMatcher(None, names, [k.name for k in replayed], autojunk=False)
    family: list[str | None] = [None] * len(replayed)
    matched = 0
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op in ("equal", "replace"):
            for j in range(min(a1 - a0, b1 - b0)):
                family[b0 + j] = step[(a0 + j) % n].family
            matched += (b1 - b0) if op == "equal" else 0
    if matched < min_matched * len(replayed):
        return None
    last, out = OUTSIDE, []
    for k, f in zip(replayed, family):
        last = f if f is not None else last
        out.append(dataclasses.replace(k, family=last))
    return out, matched


def per_step(kernels: list[Kernel], steps: int) -> dict[str, Measured]:
    """Device time and launches of each family per step."""
    us: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for k in kernels:
        us[k.family] += k.us
        count[k.family] += 1
    return {f: Measured(us[f] / steps, count[f] / steps) for f in us}


def top_kernels(kernels: list[Kernel], steps: int, top: int = 15) -> list[dict[str, Any]]:
    """The kernels by device time per step, grouped by (name, family)."""
    us: dict[tuple[str, str], float] = defaultdict(float)
    count: dict[tuple[str, str], int] = defaultdict(int)
    for k in kernels:
        us[(k.name, k.family)] += k.us
        count[(k.name, k.family)] += 1
    ranked = sorted(us, key=lambda key: -us[key])[:top]
    return [{"kernel": name[:120], "family": family, "us": us[(name, family)] / steps,
             "calls": count[(name, family)] / steps} for name, family in ranked]  # fmt: skip
