"""The KV-cache gate (bench/kv_dtype_gate.py): the committed file is what the committed H200 quality rows give
(regenerated here: a new quality run must update it), the rule's both outcomes on those rows, and its command."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from inferlab.bench.kv_dtype_gate import gate_text, kv_dtype_gate, main, metric_label
from inferlab.bench.results import load_rows
from inferlab.workloads.conformers.reference_model import KV_DTYPE_GATE_FILE

ROWS = "benchmarks/results/2026-12-02-h200-conformer-quality-stereo-variants.jsonl"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture()
def rows(monkeypatch):
    monkeypatch.chdir(REPO)  # the gate names its sources as given, relative to the checkout
    return load_rows([ROWS])


def test_the_committed_gate_is_what_the_committed_rows_give(rows):
    assert KV_DTYPE_GATE_FILE.read_text() == gate_text(kv_dtype_gate(rows, [ROWS])), (
        f"rerun: python -m inferlab.bench.kv_dtype_gate {ROWS}")
    gate = json.loads(KV_DTYPE_GATE_FILE.read_text())
    assert gate["fp8_within_spread"] is True and gate["outside"] == []
    assert gate["seeds"] == [1, 2, 3] and gate["gpu"] == "NVIDIA H200"
    assert {c["sampling"] for c in gate["checks"]} == {"T=1, top-p 1, no top-k", "T=1, top-p 1, top-k 50"}
    assert all(c["within"] for c in gate["checks"])


def test_fp8_below_the_spread_on_one_figure_fails_the_gate_naming_it(rows):
    moved = copy.deepcopy(rows)
    for row in moved:
        if row["backend"] == "inferlab" and row["config"].get("kv_dtype") == "fp8" and not row["config"].get("top_k"):
            row["metrics"]["quality"]["cov_p_0.75"]["mean"] = 0.12  # below bf16's seeds' 0.126-0.134
    gate = kv_dtype_gate(moved, [ROWS])
    assert gate["fp8_within_spread"] is False and gate["outside"] == ["COV-P@0.75"]
    outside = [c for c in gate["checks"] if not c["within"]]
    assert [c["sampling"] for c in outside] == ["T=1, top-p 1, no top-k"]
    assert all(c["fp8_mean"] < c["bf16_min"] for c in outside)  # higher is better for coverage


def test_rows_without_an_fp8_row_give_no_gate(rows):
    with pytest.raises(ValueError, match="both an engine bf16 and an engine fp8 row"):
        kv_dtype_gate([r for r in rows if r["config"].get("kv_dtype") != "fp8"], [ROWS])


def test_the_command_writes_and_checks_the_file(rows, tmp_path, capsys):
    out = tmp_path / "gate.json"
    assert main([ROWS, "--out", str(out), "--check"]) == 1  # no file yet
    assert main([ROWS, "--out", str(out)]) == 0 and out.read_text() == KV_DTYPE_GATE_FILE.read_text()
    assert main([ROWS, "--out", str(out), "--check"]) == 0
    out.write_text(out.read_text().replace('"fp8_within_spread": true', '"fp8_within_spread": false'))
    assert main([ROWS, "--out", str(out), "--check"]) == 1
    assert "does not match" in capsys.readouterr().out


def test_metric_labels():
    assert [metric_label(k) for k in ("cov_r_0.75", "cov_p_1.25", "amr_r", "amr_p", "validity")] == [
        "COV-R@0.75", "COV-P@1.25", "AMR-R", "AMR-P", "validity"]
