"""Reusable measurement pieces (workloads/measure.py, workloads/stats.py) the GPU check and the lab call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
from inferlab.workloads.measure import MeasureSpec, measure_batches, sample_batches, synthetic_texts
from inferlab.workloads.stats import latency_summary_ms


def test_synthetic_texts_have_the_requested_token_spread():
    tok = build_builtin_tokenizer()
    texts = synthetic_texts(tok, 40, 20, 200, seed=3)
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    assert all(15 <= n <= 205 for n in lengths)  # decode/re-encode may move a boundary token or two
    assert max(lengths) - min(lengths) > 100  # spread, not all alike
    assert synthetic_texts(tok, 40, 20, 200, seed=3) == texts  # deterministic


def test_sample_batches_bucketed_or_consecutive():
    ids = [[1] * n for n in (5, 50, 6, 49, 7, 48)]
    bucketed = sample_batches(ids, MeasureSpec(2, bucket_by_length=True))
    assert sorted(sorted(len(r) for r in b) for b in bucketed) == [[5, 6], [7, 48], [49, 50]]
    consecutive = sample_batches(ids, MeasureSpec(2, bucket_by_length=False))
    assert sorted(sorted(len(r) for r in b) for b in consecutive) == [[5, 50], [6, 49], [7, 48]]


def test_measure_batches_times_whole_passes_and_reports_lab_fields():
    calls = []
    batches = [[[1, 2, 3]], [[1] * 5, [1] * 5]]
    metrics = measure_batches(calls.append, batches, MeasureSpec(2, min_batches=5, min_seconds=0.0), torch.device("cpu"))
    assert metrics["batches_timed"] >= 5 and metrics["whole_passes"]
    assert len(calls) == 1 + 2 + metrics["batches_timed"]  # first call, warm-up, timed
    assert metrics["rows_timed"] == sum(len(calls[3 + i]) for i in range(metrics["batches_timed"]))
    assert metrics["padding_fraction"] == 0.0
    assert {"p50", "p90", "p95", "p99"} <= set(metrics["latency_ms"])


def test_the_warm_up_runs_every_batch_of_the_sample_once():
    """A backend's first call of each shape stays out of the timing: the warm-up covers the whole sample."""
    calls = []
    batches = [[[1] * n] for n in (3, 5, 7, 9)]
    metrics = measure_batches(calls.append, batches, MeasureSpec(1, warmup_batches=1, min_batches=1, min_seconds=0.0),
                              torch.device("cpu"))  # fmt: skip
    assert metrics["warmup_batches"] == 4
    assert sorted(len(c[0]) for c in calls[1:5]) == [3, 5, 7, 9]  # after the first call: each shape once
    none = measure_batches(lambda b: None, batches, MeasureSpec(1, warmup_batches=0, min_batches=1, min_seconds=0.0),
                           torch.device("cpu"))  # fmt: skip
    assert none["warmup_batches"] == 0


def test_latency_summary_matches_numpy_percentiles():
    seconds = [0.010, 0.020, 0.030, 0.040, 0.100]
    s = latency_summary_ms(seconds)
    assert s["p50"] == pytest.approx(30.0)
    assert s["p95"] == pytest.approx(float(np.percentile(np.array(seconds) * 1000, 95)))
    assert s["n"] == 5 and s["max"] == pytest.approx(100.0)
    assert latency_summary_ms([]) == {"n": 0}
