"""A killed `inferlab bench` leaves no cell running: SIGKILL while a cell runs (the cell, leader of its own
session, kills that session itself, its children with it) or SIGTERM (the bench kills the cell's session,
prints the resume line and exits 143). test_kill_resume.py kills conformer and generate runs (their
process pools up) at random points and checks their leftovers and outputs after a rerun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from process_tree import descendants, kill_all, still_running

TESTS = Path(__file__).resolve().parent
SRC = str(TESTS.parents[1] / "src")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
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

    def grandchild_pid() -> str:
        return "".join(path.read_text() for path in run.glob("grandchild-*.pid"))

    wait_for(grandchild_pid, 120, "the cell's grandchild")
    grandchild = int(grandchild_pid())
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
