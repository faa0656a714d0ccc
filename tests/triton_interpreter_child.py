"""The child pytest that runs tests/unit/engine/triton_interpreter_cases.py with TRITON_INTERPRET=1 (the
variable must be set before triton is first imported, so those cases cannot run in this process).

The interpreter cases take minutes of one core, a large part of the CPU suite; tests/conftest.py runs them
beside the rest of the suite: in one process it starts the child as soon as collection has selected
test_engine_triton_interpreter.py (and moves that test last); under pytest-xdist (CI: -n 2) it moves that test
first, and the worker that takes it starts the child and waits while the other worker runs the suite. The test
waits for the child and fails with its output. The child is killed if the session ends first (-x, Ctrl-C).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

CASES = Path(__file__).parent / "unit" / "engine" / "triton_interpreter_cases.py"
TEST_FILE = "test_engine_triton_interpreter.py"
TIMEOUT_S = 600


@dataclass
class Child:
    process: subprocess.Popen
    log: IO[str]  # a file, not a pipe: a long failure report would fill a pipe nobody reads yet


CHILD = pytest.StashKey[Child]()


def start(config: pytest.Config) -> None:
    """Start the child once per session (the test starts it itself when run some other way)."""
    if CHILD in config.stash:
        return
    log = tempfile.TemporaryFile(mode="w+")
    # one torch thread: the child has one core of its own at most, beside the suite
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    process = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)],
                               env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    config.stash[CHILD] = Child(process, log)


def result(config: pytest.Config) -> tuple[int, str]:
    """Wait for the child (at most TIMEOUT_S in all): its exit code and its output."""
    start(config)
    child = config.stash[CHILD]
    try:
        code = child.process.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.process.kill()
        code = child.process.wait()
    child.log.seek(0)
    return code, child.log.read()


def stop(config: pytest.Config) -> None:
    child = config.stash.get(CHILD, None)
    if child is not None:
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait()
        child.log.close()
