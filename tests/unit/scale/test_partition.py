"""Token-balanced partition (greedy LPT): every unit placed once, repeated ids together, the LPT bound,
and a balance that row counting cannot reach on skewed inputs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inferlab.scale.partition import imbalance, partition_units, shard_loads
from inferlab.scale.units import Unit


def units_of(weights, keys=None):
    return [Unit(line=i + 1, key=(keys[i] if keys else f"id{i}"), weight=float(w)) for i, w in enumerate(weights)]


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(st.integers(1, 5000), min_size=1, max_size=200), shards=st.integers(1, 9))
def test_every_unit_once_and_lpt_bound(weights, shards):
    units = units_of(weights)
    assignment = partition_units(units, shards)
    assert len(assignment) == len(units)
    used = sorted(set(assignment))
    assert used == list(range(min(shards, len(units))))  # no empty shard
    loads = [load.weight for load in shard_loads(units, assignment)]
    assert sum(loads) == sum(weights)
    # Greedy LPT: the heaviest shard is at most the mean plus the heaviest unit.
    assert max(loads) <= sum(weights) / len(loads) + max(weights) + 1e-9


def test_repeated_ids_share_a_shard():
    keys = ["a", "b", "c", "a", "d", "c", "a"]
    units = units_of([10, 20, 30, 40, 50, 60, 70], keys)
    assignment = partition_units(units, 3)
    for key in set(keys):
        assert len({assignment[i] for i, k in enumerate(keys) if k == key}) == 1


def test_tokens_not_rows_balance_skewed_prompts():
    # 10 long prompts (2,000 tokens) at the start, 990 short ones (20 tokens): what a sorted input looks like.
    weights = [2000] * 10 + [20] * 990
    units = units_of(weights)
    by_tokens = shard_loads(units, partition_units(units, 4))
    by_rows = shard_loads(units, [i * 4 // len(units) for i in range(len(units))])  # 250 rows each
    assert imbalance(by_tokens) < 1.01
    assert imbalance(by_rows) > 1.9  # the first shard holds every long prompt
    assert {load.rows for load in by_rows} == {250}


def test_fewer_units_than_shards():
    assignment = partition_units(units_of([5, 7]), 8)
    assert sorted(assignment) == [0, 1]
