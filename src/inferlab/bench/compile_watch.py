"""What torch.compile did inside a cell, read from dynamo's and inductor's global counters: how many
graphs were compiled (a count taken before and after the timed calls says whether anything was compiled
while the clock ran) and how often inductor's on-disk FX graph cache was hit (a hit makes a first call
shorter than a cold compile, so the row says so). Child process only (imports torch)."""

from __future__ import annotations


def compiled_graphs() -> int:
    """Graphs dynamo has compiled in this process so far (every recompilation adds one)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def inductor_cache_counts() -> dict[str, int]:
    """Inductor FX graph cache hits and misses in this process so far."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return {"fx_graph_cache_hits": int(inductor["fxgraph_cache_hit"]),
            "fx_graph_cache_misses": int(inductor["fxgraph_cache_miss"])}
