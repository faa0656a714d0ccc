"""Device time per call of a list of calls, as the engine runs them: captured once in a CUDA graph and
replayed, so launch overhead is not counted. Shared by the engine-kernels lab plugin and the GPU tests."""

from __future__ import annotations

from typing import Any, Callable


def graph_us(calls: list[Callable[[], Any]], replays: int = 10) -> float:
    """Device microseconds per call: the calls (one per layer, over distinct tensors: no L2 reuse) warmed up on a
    side stream, captured once in a CUDA graph and replayed `replays` times."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return 1e3 * start.elapsed_time(end) / (replays * len(calls))
