"""The rule `inferlab tune` and `inferlab recommend` share (workloads/winner.py): a knob's best value is named
only when it beats the best candidate with another value by more than the larger measured spread, with at
least three timed repeats on both sides."""

from __future__ import annotations

import pytest

from inferlab.workloads.winner import Candidate, decide, relative_range


def test_the_spread_is_the_relative_range_of_three_or_more_repeats():
    assert relative_range([90.0, 100.0, 110.0]) == pytest.approx(0.2)
    assert relative_range([100.0, 110.0]) is None  # two repeats: no spread
    c = Candidate.from_repeats({"max_slots": 8}, [3.0, 1.0, 2.0])
    assert (c.figure, c.spread, c.repeats) == (2.0, 1.0, 3)


def test_a_margin_inside_the_spread_is_no_clear_winner():
    slow = Candidate({"max_slots": 64}, 100.0, 0.20, 3)
    fast = Candidate({"max_slots": 128}, 103.5, 0.05, 3)  # 3.5% ahead, inside the 20% spread
    best, [verdict] = decide([slow, fast], ["max_slots"])
    assert best is fast and not verdict.clear and verdict.margin == pytest.approx(0.035) and verdict.spread == 0.20
    assert verdict.describe() == ("max_slots: no clear winner (max_slots=128 leads max_slots=64 by 3.5%, inside the "
                                  "spread 20.0%)")
    best, [verdict] = decide([slow, Candidate({"max_slots": 128}, 130.0, 0.05, 3)], ["max_slots"])
    assert verdict.clear and verdict.describe() == "max_slots=128 (30.0% ahead of max_slots=64, spread 20.0%)"


def test_fewer_than_three_repeats_name_no_winner():
    best, [verdict] = decide([Candidate({"k": "a"}, 100.0, None, 2), Candidate({"k": "b"}, 200.0, 0.01, 5)], ["k"])
    assert best.settings == {"k": "b"} and not verdict.clear
    assert "spread not measured: 3 timed repeats needed, 2 made" in verdict.describe()


def test_each_knob_is_judged_against_the_best_with_another_value_of_it():
    runs = [Candidate({"max_slots": 512, "kv_dtype": "fp8"}, 140.0, 0.02, 3),
            Candidate({"max_slots": 540, "kv_dtype": "fp8"}, 139.0, 0.02, 3),  # a size inside the spread
            Candidate({"max_slots": 256, "kv_dtype": "auto"}, 100.0, 0.02, 3)]  # the model dtype, far behind
    best, verdicts = decide(runs, ["max_slots", "kv_dtype", "untried"])
    assert best is runs[0] and [(v.knob, v.clear, v.rival) for v in verdicts] == [
        ("max_slots", False, runs[1]), ("kv_dtype", True, runs[2])]


def test_lower_is_better_figures():
    best, [verdict] = decide([Candidate({"kernel": "a"}, 2.0, 0.01, 3), Candidate({"kernel": "b"}, 1.0, 0.01, 3)],
                             ["kernel"], higher_is_better=False)
    assert best.settings == {"kernel": "b"} and verdict.margin == pytest.approx(1.0) and verdict.clear


def test_a_lead_larger_than_any_plausible_spread_is_named_as_such_without_repeats():
    engine, hf = Candidate({"backend": "inferlab"}, 312.0, None, 1), Candidate({"backend": "hf"}, 79.5, None, 1)
    best, [verdict] = decide([engine, hf], ["backend"])
    assert best is engine and verdict.clear and verdict.beyond_any_spread
    assert verdict.describe() == ("backend=inferlab (292.5% ahead of backend=hf; spread not measured, but a lead over "
                                  "100% is larger than any plausible run-to-run spread)")
    close = Candidate({"backend": "vllm"}, 296.0, None, 1)
    _, [verdict] = decide([engine, close], ["backend"])
    assert not verdict.clear and "3 timed repeats needed, 1 made, 2 more of each would decide it" in verdict.describe()


def test_a_knob_a_candidate_lacks_is_never_compared():
    engine = Candidate({"backend": "inferlab", "batch_size": None}, 312.0, 0.01, 3)
    hf = [Candidate({"backend": "hf", "batch_size": b}, f, 0.01, 3) for b, f in ((16, 70.0), (64, 77.0))]
    _, verdicts = decide([engine, *hf], ["backend", "batch_size"])
    assert [v.knob for v in verdicts] == ["backend"]  # not "batch_size=None leads batch_size=64"
    best, verdicts = decide(hf, ["backend", "batch_size"])
    assert [(v.knob, v.value) for v in verdicts] == [("batch_size", 64)]


def test_the_stats_spread_is_the_same_relative_range():
    from inferlab.workloads.stats import summarize

    assert summarize([1.0, 1.02, 1.02, 1.0, 0.08]).spread == pytest.approx((1.02 - 0.08) / 1.0)
    assert summarize([1.0, 1.1]).spread is None  # two samples: no spread, as winner.relative_range
