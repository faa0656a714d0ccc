"""Killed commands leave nothing running and say what to do: `inferlab bench` killed while a cell runs
(SIGKILL: the cell, leader of its own session, kills that session itself; SIGTERM: the bench kills it,
prints the resume line and exits 143) and `inferlab conformers generate` killed with its process pools
up (SIGKILL: the pools and multiprocessing's resource tracker end by themselves). test_kill_resume.py
kills whole runs at random points and checks their outputs after a rerun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_tree import descendants, kill_all, still_running, wait_for_descendants

TESTS = Path(__file__).resolve().parent
SRC = str(TESTS.parents[1] / "src")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
RESUME_LINE = "the rows finished so far are saved; rerun the same command to resume"


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def hanging_bench(tmp_path: Path) -> tuple[subprocess.Popen, int, set[int]]:
    """`inferlab bench` running one cell that hangs with a grandchild: (bench, grandchild pid, the cell's
    processes)."""
    plan = tmp_path / "plan.toml"
    plan.write_text(f'name = "kill"\nplugins = [{str(TESTS / "bench" / "plugin_behaviours.py")!r}]\n'
                    'timeout_s = 300\n[[sweep]]\nscenario = "test-behaviour"\nset = { behaviour = ["hang"] }\n')
    run = tmp_path / "run"
    bench = subprocess.Popen([sys.executable, "-m", "inferlab.cli", "bench", "--plan", str(plan), "--run-dir",
                              str(run), "--no-report"], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    pid_files: list[Path] = []
    wait_for(lambda: (pid_files := list(run.glob("grandchild-*.pid"))) and pid_files[0].read_text(), 120,
             "the cell's grandchild")
    grandchild = int(next(run.glob("grandchild-*.pid")).read_text())
    return bench, grandchild, descendants(bench.pid) | {grandchild}


def test_a_killed_bench_takes_its_running_cell_and_the_cells_children_with_it(tmp_path):
    bench, grandchild, cell = hanging_bench(tmp_path)
    assert len(cell) >= 2  # the cell process and its grandchild
    bench.send_signal(signal.SIGKILL)
    bench.wait()
    left = still_running(cell, timeout_s=3)
    kill_all(left)
    assert left == set()


def test_sigterm_ends_bench_like_ctrl_c_with_the_resume_line(tmp_path):
    bench, grandchild, cell = hanging_bench(tmp_path)
    bench.send_signal(signal.SIGTERM)
    _, err = bench.communicate(timeout=60)
    left = still_running(cell, timeout_s=3)
    kill_all(left)
    assert bench.returncode == 143 and left == set()
    assert f"interrupted (SIGTERM): {RESUME_LINE}" in err and "Traceback" not in err


@pytest.mark.usefixtures("one_cpu_thread")
def test_a_killed_conformer_run_leaves_no_pool_process(tmp_path, tiny_checkpoint):
    model = tiny_checkpoint("tiny")
    inp = tmp_path / "in.smi"
    inp.write_text("CCO a\nc1ccccc1 b\n")
    cli = subprocess.Popen([sys.executable, "-m", "inferlab.cli", "conformers", "generate", "--model", str(model),
                            "--input", str(inp), "--output", str(tmp_path / "out.sdf"), "--num-conformers", "1000",
                            "--workers", "1", "--judge-workers", "1", "--device", "cpu", "--max-slots", "2"],
                           env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # the preparing and judging processes and the resource tracker, past their start (rows are being written)
    wait_for(lambda: (tmp_path / "out.jsonl").exists() and (tmp_path / "out.jsonl").read_text().count("\n") >= 2,
             300, "the first rows")
    children = wait_for_descendants(cli.pid, 3, timeout_s=10)
    assert len(children) >= 3
    cli.send_signal(signal.SIGKILL)
    cli.wait()
    left = still_running(children, timeout_s=5)
    kill_all(left)
    assert left == set()
