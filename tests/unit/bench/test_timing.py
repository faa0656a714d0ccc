"""Statistics against numpy, and the repeat-until-count-and-duration loop."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferlab.bench.timing import measure, timed
from inferlab.workloads.stats import Stats, percentile, summarize

samples = st.lists(st.floats(min_value=1e-6, max_value=1e3, allow_nan=False), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(samples, st.floats(min_value=0, max_value=100))
def test_percentile_matches_numpy_linear(values, q):
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(samples)
def test_summary_matches_numpy(values):
    s = summarize(values)
    arr = np.asarray(values)
    assert s.n == len(values)
    assert s.median == pytest.approx(float(np.median(arr)), rel=1e-9)
    assert s.mean == pytest.approx(float(arr.mean()), rel=1e-9)
    for q in (50, 90, 95, 99):
        assert getattr(s, f"p{q}") == pytest.approx(float(np.percentile(arr, q)), rel=1e-9)
    assert (s.min, s.max) == (float(arr.min()), float(arr.max()))
    if len(values) > 1:
        assert s.stdev == pytest.approx(float(arr.std(ddof=1)), rel=1e-6, abs=1e-9)
    else:
        assert s.stdev is None
    if len(values) >= 3:  # the spread: the relative range, as recommend and tune judge by (workloads/winner.py)
        assert s.spread == pytest.approx(float(np.ptp(arr) / np.median(arr)), rel=1e-6, abs=1e-12)
    else:
        assert s.spread is None


def test_stats_round_trip_through_json_and_scale():
    s = summarize([0.001, 0.002, 0.004])
    again = Stats.from_dict(json.loads(json.dumps(s.to_dict())))
    assert again == s
    ms = s.scaled(1000)
    assert ms.median == pytest.approx(2.0) and ms.spread == s.spread
    assert set(ms.latency_dict()) == {"p50", "p90", "p95", "p99"}


def test_measure_meets_both_the_count_and_the_duration():
    calls = []

    def fn():
        calls.append(time.perf_counter())
        time.sleep(0.01)
        return len(calls)

    seen = []
    m = measure(fn, warmup=2, min_repeats=3, min_duration_s=0.08, on_result=seen.append)
    assert len(m.warmup_s) == 2 and len(calls) == 2 + len(m.samples_s)
    assert len(m.samples_s) >= 3 and m.total_s >= 0.08  # duration dominated here
    assert seen == list(range(3, 3 + len(m.samples_s)))  # results of timed calls only, in order
    count_bound = measure(lambda: None, warmup=0, min_repeats=25, min_duration_s=0.0)
    assert len(count_bound.samples_s) == 25  # count dominated here


def test_timed_synchronises_before_both_clock_reads():
    events = []
    with timed(lambda: events.append("sync")) as t:
        events.append("work")
    assert events == ["sync", "work", "sync"] and t.seconds >= 0


def test_measure_rejects_zero_repeats():
    with pytest.raises(ValueError):
        measure(lambda: None, warmup=0, min_repeats=0, min_duration_s=0)
