"""Runs triton_interpreter_cases.py in a child pytest with TRITON_INTERPRET=1 (see that file for why)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")


def test_triton_kernels_match_the_torch_references_in_the_interpreter():
    cases = Path(__file__).with_name("triton_interpreter_cases.py")
    env = dict(os.environ, TRITON_INTERPRET="1")
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(cases)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-3000:]
    assert " passed" in child.stdout and "skipped" not in child.stdout, child.stdout[-2000:]
