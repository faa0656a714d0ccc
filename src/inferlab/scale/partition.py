"""Balanced partition of input units into shards by estimated tokens.

Throughput of data parallelism is the sum of the replicas' throughputs minus the stragglers: the run
ends when the most loaded shard ends. Rows are a poor measure of load (a 2,000-token prompt costs a
hundred 20-token ones; a 60-atom molecule's conformer costs six 10-atom ones), so shards are balanced on
estimated tokens. The method is greedy LPT (longest processing time first): groups sorted by weight,
heaviest first, each to the currently lightest shard. Its guarantee: the heaviest shard is at most the
mean plus the heaviest single group, and at most 4/3 of the optimum.

Units with the same key (a repeated id) form one group, so the shard's worker sees every copy and
reports the repeat exactly as a single-process run would. Not here: reading units (the adapters).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from inferlab.errors import ConfigError
from inferlab.scale.units import Unit


@dataclass(frozen=True)
class ShardLoad:
    units: int
    rows: int
    weight: float  # estimated tokens


def partition_units(units: Sequence[Unit], num_shards: int) -> list[int]:
    """The shard index of every unit. Shards are numbered so that none is empty: with fewer groups than
    `num_shards`, fewer shards are used."""
    if num_shards < 1:
        raise ConfigError(f"number of shards {num_shards} must be >= 1")
    groups: dict[str, list[int]] = {}
    for index, unit in enumerate(units):
        groups.setdefault(unit.key, []).append(index)
    weights = {key: sum(units[i].weight for i in members) for key, members in groups.items()}
    # Heaviest first; ties keep input order (groups were created in input order).
    order = sorted(groups, key=lambda key: -weights[key])
    shards = min(num_shards, len(groups))
    heap = [(0.0, shard) for shard in range(shards)]  # (load, shard): the lightest shard on top
    assignment = [0] * len(units)
    for key in order:
        load, shard = heapq.heappop(heap)
        for i in groups[key]:
            assignment[i] = shard
        heapq.heappush(heap, (load + weights[key], shard))
    return assignment


def shard_loads(units: Sequence[Unit], assignment: Sequence[int]) -> list[ShardLoad]:
    count = max(assignment, default=-1) + 1
    n_units, rows, weight = [0] * count, [0] * count, [0.0] * count
    for unit, shard in zip(units, assignment):
        n_units[shard] += 1
        rows[shard] += unit.rows
        weight[shard] += unit.weight
    return [ShardLoad(n_units[s], rows[s], weight[s]) for s in range(count)]


def imbalance(loads: Sequence[ShardLoad]) -> float:
    """Heaviest shard over the mean shard, in estimated tokens (1.0 = perfect)."""
    if not loads:
        return 1.0
    mean = sum(load.weight for load in loads) / len(loads)
    return max(load.weight for load in loads) / mean if mean > 0 else 1.0
