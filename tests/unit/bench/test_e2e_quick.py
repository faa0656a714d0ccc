"""`inferlab bench --preset quick`, reduced to one attention cell and the generate cells of transformers and the
engine, end to end:
fresh processes, rows, the printed table, the report and its plots; and the CLI's other commands."""

from __future__ import annotations

import json

import pytest

from inferlab.cli import main


@pytest.mark.slow
def test_quick_preset_reduced_to_three_cells_runs_end_to_end(tmp_path, capsys):
    run_dir = tmp_path / "run"
    only = ["--only", "scenario=attention-kernels,generate", "--only", "kernel=auto", "--only", "q_len=1",
            "--only", "attn_implementation=eager", "--only", "kv_cache=dynamic", "--only", "processor=python"]
    code = main(["bench", "--preset", "quick", "--run-dir", str(run_dir), *only])
    printed = capsys.readouterr().out
    assert code == 0
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [(r["scenario"], r["backend"], r["status"]) for r in rows] == [
        ("attention-kernels", "sdpa:auto", "ok"), ("generate", "hf", "ok"), ("generate", "inferlab", "ok")], rows
    assert all(r["metrics"]["output_tokens"] == 8 * 16 and r["model"] == "tiny" for r in rows[1:])
    assert (run_dir / "cache" / "models").is_dir()  # the preset was built once into the run's cache
    report = (run_dir / "report" / "report.md").read_text()
    assert "### generate · tiny" in report and "### attention-kernels" in report
    assert len(list((run_dir / "report" / "plots").glob("*.png"))) == 2
    assert "3 ok" in printed and "report:" in printed
    # a rerun resumes: nothing left to do
    assert main(["bench", "--preset", "quick", "--run-dir", str(run_dir), *only, "--no-report"]) == 0
    assert "3 already recorded" in capsys.readouterr().out
    assert len((run_dir / "results.jsonl").read_text().splitlines()) == 3


def test_bench_without_a_plan_is_refused_with_the_fix(capsys):
    assert main(["bench"]) == 2
    assert "--preset NAME" in capsys.readouterr().err


def test_report_compare_recommend_commands(tmp_path, capsys):
    row = {"run_id": "r", "cell_key": "k1", "scenario": "generate", "backend": "hf", "model": "tiny", "batch_size": 4,
           "status": "ok", "message": "", "config": {"batch_size": 4, "kv_cache": "dynamic"}, "env": {"gpu": "X"},
           "metrics": {"output_tokens_per_s": 10.0, "spread": 0.01}, "headline_metric": "output_tokens_per_s",
           "higher_is_better": True, "workload_knobs": ["batch_size"]}
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps(row) + "\n")
    b.write_text(json.dumps({**row, "metrics": {"output_tokens_per_s": 12.0, "spread": 0.01}}) + "\n")
    assert main(["compare", str(a), str(b)]) == 0 and "+20.0%" in capsys.readouterr().out
    assert main(["recommend", str(a), str(b), "--markdown"]) == 0 and "| GPU |" in capsys.readouterr().out
    assert main(["report", str(a), "--out", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "report.md").is_file()
    assert main(["report", str(tmp_path / "missing")]) == 2
