"""Runs triton_interpreter_cases.py in a child pytest with TRITON_INTERPRET=1 (see that file for why); the
child starts at collection and runs beside the rest of the suite (tests/triton_interpreter_child.py)."""

from __future__ import annotations

import pytest
from triton_interpreter_child import result

pytest.importorskip("triton")


@pytest.mark.slow  # ~2 minutes of one core, in a child beside the rest of the suite
def test_triton_kernels_match_the_torch_references_in_the_interpreter(request):
    code, output = result(request.config)
    assert code == 0, output[-9000:]
    assert " passed" in output and "skipped" not in output, output[-2000:]
