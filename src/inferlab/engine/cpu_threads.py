"""torch's intra-op thread count set for a stretch of code and put back after (torch's setting is the
process's: the caller's own torch work keeps its threads).

A CPU engine's decode step is hundreds of small ops (norms, [16, 256] GEMMs, the sampler's passes): an
OpenMP team adds a barrier to each, and when another process holds one of the cores the barrier waits for
the thread it preempted. On a 2-core machine shared with one other busy process, two threads made a step
several times slower than one (docs/decisions.md, "One torch thread for CPU steps").
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """torch.set_num_threads(count) while inside (None: leave it as it is)."""
    before = torch.get_num_threads()
    if count is None or count == before:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
