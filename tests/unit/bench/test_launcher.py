"""Isolation: every way a cell can end becomes a row and the sweep goes on; resume; the time limit."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from inferlab.bench import launcher
from inferlab.bench.launcher import LaunchOptions, launch, pending_cells
from inferlab.bench.plan import build_plan
from inferlab.bench.results import load_rows
from inferlab.errors import ConfigError
from inferlab.outputs.lock import OutputLock


def _plan(plugin: str, behaviours: list[str], timeout_s: float = 30.0, **extra):
    return build_plan({"name": "iso", "plugins": [plugin], "timeout_s": timeout_s,
                       "sweep": [{"scenario": "test-behaviour", "set": {"behaviour": behaviours, **extra}}]})


def _alive(pid: int) -> bool:
    """Running and not a zombie (PID 1 of a container may never reap the killed grandchild)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state


def test_every_ending_becomes_a_row_and_the_sweep_goes_on(tmp_path, behaviour_plugin):
    behaviours = ["raise", "hang", "exit", "segv", "unsupported", "no-kernel", "ok"]
    plan = _plan(behaviour_plugin, behaviours, timeout_s=4.0)
    seen = []
    summary = launch(plan, LaunchOptions(run_dir=tmp_path, grace_s=1.0), on_done=lambda i, n, row: seen.append(row["status"]))
    rows = {r["config"]["behaviour"]: r for r in load_rows([tmp_path])}
    assert len(summary.rows) == len(behaviours) == len(seen)
    assert rows["ok"]["status"] == "ok" and rows["ok"]["metrics"]["value"] == 1.0
    assert rows["ok"]["warnings"] == ["a warning from the cell"]
    assert rows["raise"]["status"] == "error" and "ValueError: boom from the test scenario" in rows["raise"]["message"]
    assert rows["unsupported"]["status"] == "unavailable" and "cannot do that" in rows["unsupported"]["message"]
    assert rows["no-kernel"]["status"] == "unavailable" and "No available kernel" in rows["no-kernel"]["message"]
    hang = rows["hang"]
    assert hang["status"] == "timeout" and "no result after 4 s" in hang["message"] and "hanging now" in hang["message"]
    assert 4.0 <= hang["wall_s"] < 15.0
    grandchild = int((tmp_path / f"grandchild-{hang['cell_key']}.pid").read_text())
    assert not _alive(grandchild), "the hung cell's grandchild outlived the timeout"
    assert rows["exit"]["status"] == "error" and "exit code 3" in rows["exit"]["message"]
    assert "about to exit hard" in rows["exit"]["message"]
    assert rows["segv"]["status"] == "error" and "SIGSEGV" in rows["segv"]["message"]
    for row in rows.values():  # the shared field names of BENCHMARKING.md, in every row
        for name in ("run_id", "scenario", "backend", "model", "batch_size", "status", "message", "config", "env", "metrics"):
            assert name in row, name
        assert row["env"].get("torch") and "commit" in row["env"]
        assert row["run_id"] == summary.run_id


def test_a_rerun_skips_recorded_cells_and_can_retry_failures(tmp_path, behaviour_plugin):
    plan = _plan(behaviour_plugin, ["ok", "raise"])
    first = launch(plan, LaunchOptions(run_dir=tmp_path))
    assert len(first.rows) == 2
    again = launch(plan, LaunchOptions(run_dir=tmp_path))
    assert again.rows == [] and again.already_done == 2 and again.run_id == first.run_id
    retry = launch(plan, LaunchOptions(run_dir=tmp_path, rerun_failed=True))
    assert [r["config"]["behaviour"] for r in retry.rows] == ["raise"]
    bigger = _plan(behaviour_plugin, ["ok", "raise"], value=[1.0, 2.0])
    pending, done = pending_cells(bigger, tmp_path)
    assert done == 2 and [c.config["value"] for c in pending] == [2.0, 2.0]


def test_a_second_sweep_on_the_same_run_folder_is_refused(tmp_path, behaviour_plugin):
    """Two `inferlab bench` on one run folder would both run every cell and record each row twice."""
    plan = _plan(behaviour_plugin, ["ok"])
    with OutputLock(tmp_path / "lock", "the first sweep"):
        with pytest.raises(ConfigError, match="another inferlab run .* is writing the run folder"):
            launch(plan, LaunchOptions(run_dir=tmp_path))
    assert not (tmp_path / "results.jsonl").exists()
    assert len(launch(plan, LaunchOptions(run_dir=tmp_path)).rows) == 1


def test_a_torn_last_line_from_a_killed_sweep_is_repaired(tmp_path, behaviour_plugin):
    plan = _plan(behaviour_plugin, ["ok", "raise"])
    launch(plan, LaunchOptions(run_dir=tmp_path))
    results = tmp_path / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # killed mid-write of the second row
    resumed = launch(plan, LaunchOptions(run_dir=tmp_path))
    assert [r["config"]["behaviour"] for r in resumed.rows] == ["raise"]
    assert all(json.loads(line) for line in results.read_text().splitlines())


def test_the_time_limit_skips_cells_and_a_rerun_resumes_them(tmp_path, behaviour_plugin):
    plan = build_plan({"name": "limit", "plugins": [behaviour_plugin], "timeout_s": 200, "sweep": [
        {"scenario": "test-behaviour", "set": {"value": 1.0, "estimate": 0.5}},
        {"scenario": "test-behaviour", "set": {"value": [2.0, 3.0], "estimate": 100.0}}]})
    # A 60 s budget starts the first cell; the others say they need 100 s and are not started.
    summary = launch(plan, LaunchOptions(run_dir=tmp_path, limit_seconds=60))
    statuses = [r["status"] for r in summary.rows]
    assert statuses == ["ok", "skipped", "skipped"]
    assert "rerun the same command to resume" in summary.rows[-1]["message"]
    resumed = launch(plan, LaunchOptions(run_dir=tmp_path))
    assert [r["config"]["value"] for r in resumed.rows] == [2.0, 3.0]
    latest = load_rows([tmp_path])
    assert [r["status"] for r in latest] == ["ok", "ok", "ok"]


def test_the_time_limit_also_cuts_a_running_cell_which_a_rerun_resumes(tmp_path, behaviour_plugin, monkeypatch):
    """Cut by the run's budget (not its own timeout), the cell is `skipped`: the next call runs it again
    (a `timeout` row would be final without --rerun-failed). The environment capture, which counts
    against the limit and takes seconds on a loaded machine, is skipped here so the cell always starts."""
    monkeypatch.setattr(launcher, "_capture_environment", lambda run_dir: {})
    plan = _plan(behaviour_plugin, ["hang"], timeout_s=120.0, estimate=0.1)
    summary = launch(plan, LaunchOptions(run_dir=tmp_path, limit_seconds=3.0, grace_s=1.0))
    row = summary.rows[0]
    assert row["status"] == "skipped" and "cut by the run's time limit" in row["message"] and row["wall_s"] < 10
    assert [c.key for c in pending_cells(plan, tmp_path)[0]] == [row["cell_key"]]


def test_limit_must_be_positive(tmp_path):
    with pytest.raises(Exception, match="limit-seconds"):
        LaunchOptions(run_dir=tmp_path, limit_seconds=0)


def test_cells_run_in_fresh_processes(tmp_path, behaviour_plugin):
    launch(_plan(behaviour_plugin, ["ok"]), LaunchOptions(run_dir=tmp_path))
    row = load_rows([tmp_path])[0]
    log = (tmp_path / row["log"]).read_text()
    assert str(os.getpid()) not in log  # the log is the child's own output
    assert (tmp_path / "env.json").is_file() and (tmp_path / "run.json").is_file()


def test_a_result_that_is_not_a_mapping_is_an_error_row_and_the_reports_read_the_run(tmp_path, behaviour_plugin,
                                                                                     capsys):
    """A cell returning a list once crashed `bench` (and then `report` and `recommend` on the run folder, in
    results.py); it is an error row now, and a row an older lab wrote that way reads as one."""
    from inferlab.cli import main

    summary = launch(_plan(behaviour_plugin, ["list", "ok"]), LaunchOptions(run_dir=tmp_path))
    rows = {r["config"]["behaviour"]: r for r in summary.rows}
    assert rows["list"]["status"] == "error" and "returned a list, not a mapping" in rows["list"]["message"]
    old = {**rows["ok"], "cell_key": "old", "metrics": [1.0, 2.0], "config": {"behaviour": "ok", "value": 2.0}}
    with (tmp_path / "results.jsonl").open("a") as f:
        f.write(json.dumps(old) + "\n")
    assert {r["cell_key"]: r["status"] for r in load_rows([tmp_path])}["old"] == "error"
    assert main(["report", str(tmp_path)]) == 0
    assert main(["recommend", str(tmp_path)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_a_cells_grandchild_in_its_own_session_ends_with_the_cell(tmp_path, behaviour_plugin):
    """`setsid` takes a process out of the cell's group, which the group kill missed: the launcher walks the
    cell's process tree instead, at the timeout and when the cell ends by itself."""
    summary = launch(_plan(behaviour_plugin, ["setsid-hang", "setsid-leave"], timeout_s=4.0),
                     LaunchOptions(run_dir=tmp_path, grace_s=1.0))
    assert sorted(r["status"] for r in summary.rows) == ["ok", "timeout"]
    for row in summary.rows:
        grandchild = int((tmp_path / f"grandchild-{row['cell_key']}.pid").read_text())
        deadline = time.monotonic() + 5
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(grandchild), f"the {row['config']['behaviour']} cell's setsid grandchild outlived it"
