"""`conformers generate --kv-dtype auto` (pipeline/kv_dtype_choice.py): the model dtype unless the committed
quality gate shows FP8 within the spread, and then FP8 only on a GPU that runs it; both outcomes of the gate,
the CPU, a GPU without FP8, an unreadable gate file, and the values taken as asked."""

from __future__ import annotations

import json

import pytest

from inferlab.workloads.conformers.pipeline.kv_dtype_choice import KvGate, choose_kv_dtype, read_kv_gate

FAILING = KvGate(False, ("COV-P@0.75",), 3, "gate.json")
PASSING = KvGate(True, (), 3, "gate.json")


def test_the_committed_gate_picks_fp8_on_a_gpu_that_runs_it():
    gate = read_kv_gate()
    assert (gate.fp8_within_spread, gate.outside, gate.seeds, gate.problem) == (True, (), 3, "")
    choice = choose_kv_dtype("auto", gate, "cuda", fp8_supported=True)
    assert choice.kv_dtype == "fp8" and "within the 3-seed spread" in choice.reason
    assert gate.path in choice.reason


def test_a_failing_gate_keeps_the_model_dtype_naming_the_figure_outside_the_spread():
    choice = choose_kv_dtype("auto", FAILING, "cuda", fp8_supported=True)
    assert choice.kv_dtype == "model"
    assert "FP8 differs beyond the 3-seed spread on COV-P@0.75 on the reference model" in choice.reason
    assert FAILING.path in choice.reason


def test_a_passing_gate_picks_fp8_on_a_gpu_that_runs_it_and_only_there():
    fp8 = choose_kv_dtype("auto", PASSING, "cuda", fp8_supported=True)
    assert fp8.kv_dtype == "fp8" and "within the 3-seed spread" in fp8.reason
    older = choose_kv_dtype("auto", PASSING, "cuda", fp8_supported=False)
    assert older.kv_dtype == "model" and "no FP8" in older.reason
    assert choose_kv_dtype("auto", PASSING, "cpu", fp8_supported=False).kv_dtype == "model"


@pytest.mark.parametrize("requested", ["model", "fp8"])
def test_a_value_asked_for_is_taken_whatever_the_gate(requested):
    for gate in (FAILING, PASSING):
        choice = choose_kv_dtype(requested, gate, "cuda", fp8_supported=True)
        assert (choice.kv_dtype, choice.reason) == (requested, f"--kv-dtype {requested}")


@pytest.mark.parametrize("text", ["{", "[]", json.dumps({"fp8_within_spread": "yes", "outside": []}),
                                  json.dumps({"outside": []})])
def test_an_unreadable_gate_keeps_the_model_dtype_and_says_why(tmp_path, text):
    path = tmp_path / "gate.json"
    path.write_text(text)
    gate = read_kv_gate(path)
    assert not gate.fp8_within_spread and gate.problem
    choice = choose_kv_dtype("auto", gate, "cuda", fp8_supported=True)
    assert choice.kv_dtype == "model" and "unreadable" in choice.reason
    assert read_kv_gate(tmp_path / "missing.json").problem
