"""How `inferlab generate` and `inferlab hidden-states` end: a summary with the error rows grouped by reason
(hidden-states: rows, samples/s and p50/p95/p99 latency, and the same figures as JSON with --summary-json),
exit 1 when no row of the run succeeded (usage errors stay 2), and "wrote" only for a file that exists."""

from __future__ import annotations

import json

import pytest
from workload_testkit import TEXTS, write_jsonl

from inferlab.cli import main

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def test_generate_exits_1_when_every_row_fails_and_says_why(tiny_checkpoint, tmp_path, capsys):
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": f"t{i}", "text": "under the wrong key"} for i in range(3)])
    out = tmp_path / "out.jsonl"
    argv = ["generate", "--model", str(tiny_checkpoint("tiny")), "--input", str(inp), "--output", str(out),
            "--device", "cpu", "--max-new-tokens", "2"]
    assert main(argv) == 1
    printed = capsys.readouterr().out
    assert "rows: 0 ok, 3 errors" in printed and f"error rows by reason (3 in {out}):" in printed
    assert "  3 x, e.g. t0: line 1: give exactly one of 'prompt' (text) or 'prompt_ids'" in printed

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main([*argv[:4], str(empty), "--output", str(tmp_path / "e.jsonl"), *argv[7:]]) == 1
    printed = capsys.readouterr().out
    assert "nothing written: the input holds no line" in printed and "wrote" not in printed


def test_a_generate_resume_left_only_failing_rows_exits_0(tiny_checkpoint, tmp_path, capsys):
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "ok", "prompt_ids": [5, 6]}, {"id": "bad", "text": "no prompt"}])
    out = tmp_path / "out.jsonl"
    argv = ["generate", "--model", str(tiny_checkpoint("tiny")), "--input", str(inp), "--output", str(out),
            "--device", "cpu", "--max-new-tokens", "2"]
    assert main(argv) == 0
    out.write_text("".join(line for line in out.read_text().splitlines(keepends=True) if '"bad"' not in line))
    capsys.readouterr()
    assert main(argv) == 0  # the rerun wrote only the failing row; the job's rows stand
    assert "rows: 0 ok, 1 errors, 1 already done" in capsys.readouterr().out


def test_hidden_states_prints_a_summary_and_writes_it_as_json(tiny_checkpoint, tmp_path, capsys):
    lines = [{"id": k, "prompt": v} for k, v in TEXTS.items()] + [{"id": "odd", "text": "no prompt field"}]
    inp = write_jsonl(tmp_path / "p.jsonl", lines)
    out, summary = tmp_path / "acts.safetensors", tmp_path / "summary.json"
    argv = ["hidden-states", "--model", str(tiny_checkpoint("tiny")), "--input", str(inp), "--output", str(out),
            "--layers", "-1", "--device", "cpu", "--dtype", "float32", "--summary-json", str(summary)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"rows: {len(TEXTS)} ok, 1 errors, 0 done by earlier runs" in printed and "prompts/s" in printed
    assert "latency per prompt (its batch's time): p50 " in printed and "p95" in printed and "p99" in printed
    assert "e.g. odd: line 6: field 'prompt' is missing; name the field that holds the text with --text-field text" \
        in printed
    assert "{" not in printed and f"wrote {out}" in printed
    figures = json.loads(summary.read_text())
    assert figures["rows_ok"] == len(TEXTS) and figures["prompts_per_s"] > 0 and figures["latency_ms"]["p99"] > 0
    assert figures["errors_by_reason"][0]["example_id"] == "odd"

    only_bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "x", "body": "nothing"}])
    assert main([*argv[:4], str(only_bad), "--output", str(tmp_path / "b.safetensors"), *argv[7:-2]]) == 1
