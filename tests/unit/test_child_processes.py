"""Child processes end with their parent, SIGKILL included (inferlab/child_processes.py): a subprocess told
its parent through the environment (started from the main thread: the parent-death signal; from another
thread: the watching thread), a spawn pool's processes and multiprocessing's resource tracker, and a
session leader's whole group (a bench cell and what it started)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from process_tree import kill_all, still_running, wait_for_descendants

SRC = str(Path(__file__).resolve().parents[2] / "src")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}

SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"
ARMED_SLEEPER = ("from inferlab.child_processes import die_with_parent_from_environment as d; d(); " + SLEEPER)

# A parent that starts one sleeping child, from its main thread or another one, told of its parent or not.
SUBPROCESS_PARENT = """
import os, subprocess, sys, threading, time
from inferlab.child_processes import child_environment
code = sys.argv[1]
def start():
    env = child_environment() if sys.argv[2] == "told" else dict(os.environ)
    subprocess.Popen([sys.executable, "-c", code], env=env)
if sys.argv[3] == "thread":
    t = threading.Thread(target=start); t.start(); t.join()
else:
    start()
time.sleep(60)
"""


def start_parent(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], env=ENV, stdout=subprocess.PIPE, text=True)


def children_left_after_kill(parent: subprocess.Popen, expected: int, ready_lines: int | None = None) -> set[int]:
    """SIGKILL `parent` once it has `expected` descendants and `ready_lines` of them (default: all) said they
    are past their start-up; the descendants still running a moment later."""
    children = wait_for_descendants(parent.pid, expected, timeout_s=60)
    assert len(children) >= expected, f"the parent started {len(children)} of {expected} children"
    for _ in range(expected if ready_lines is None else ready_lines):
        assert parent.stdout.readline().strip() == "ready"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    left = still_running(children, timeout_s=3)
    kill_all(left)
    return left


@pytest.mark.parametrize("thread", ["main", "thread"])
def test_a_subprocess_told_of_its_parent_ends_with_it(thread):
    assert children_left_after_kill(start_parent(SUBPROCESS_PARENT, ARMED_SLEEPER, "told", thread), 1) == set()


def test_a_subprocess_not_told_outlives_its_parent():  # the control: the check above can fail
    assert len(children_left_after_kill(start_parent(SUBPROCESS_PARENT, ARMED_SLEEPER, "untold", "main"), 1)) == 1


POOL_PARENT = """
import time
from inferlab.child_processes import spawn_pool
def ready():
    print("ready", flush=True)
if __name__ == "__main__":
    pool = spawn_pool(2, ready)
    time.sleep(60)
"""


def test_a_spawn_pool_and_its_resource_tracker_end_with_a_killed_parent(tmp_path):
    script = tmp_path / "pool_parent.py"
    script.write_text(POOL_PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], env=ENV, stdout=subprocess.PIPE, text=True)
    assert children_left_after_kill(parent, 3, ready_lines=2) == set()  # two workers and the resource tracker


def test_pool_processes_ignore_ctrl_c_and_leave_it_to_the_parent(tmp_path):
    script = tmp_path / "pool_parent.py"
    script.write_text(POOL_PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], env=ENV, stdout=subprocess.PIPE, text=True,
                              stderr=subprocess.PIPE)
    children = wait_for_descendants(parent.pid, 3, timeout_s=60)
    for _ in range(2):
        assert parent.stdout.readline().strip() == "ready"
    for pid in children:
        os.kill(pid, signal.SIGINT)
    assert len(still_running(children, timeout_s=1)) == len(children)
    parent.kill()
    parent.wait()
    kill_all(still_running(children, timeout_s=3))


# A bench-cell-like child: the leader of its own session, which starts a grandchild, then sleeps.
LEADER = ("from inferlab.child_processes import die_with_parent_from_environment as d; d(kill_group=True); "
          "import subprocess, sys; subprocess.Popen([sys.executable, '-c', " + repr(SLEEPER) + "]); " + SLEEPER)
SESSION_PARENT = """
import subprocess, sys, time
from inferlab.child_processes import child_environment
subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=child_environment(), start_new_session=True)
time.sleep(60)
"""


def test_a_session_leader_takes_its_whole_group_with_it():
    assert children_left_after_kill(start_parent(SESSION_PARENT, LEADER), 2) == set()
