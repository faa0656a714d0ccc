"""The start-up's Triton precompile (engine/kernel_precompile.py) on the real Triton compiler for a CUDA
target (default sm_90, H100/H200; $INFERLAB_AOT_ARCH=89 for Ada), on any machine: no GPU is needed, only
the triton wheel. tests/unit/engine/test_engine_kernel_precompile.py checks that the dry run asks for the
launches the warm-up makes; this compiles them for real (precompile_aot_child.py), then runs the warm-up
compile-only: every specialisation it launches must already be in the JIT's caches (the misses are printed).
A few minutes on a loaded 2-core machine for a tiny preset, so marked gpu; quick: on a machine without CUDA
only (with one, test_startup_cache_gpu.py checks the same on the real device); full: everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
CHILD = Path(__file__).with_name("precompile_aot_child.py")


@pytest.mark.parametrize("preset", ["tiny", "tiny-gemma2"])
def test_the_precompile_leaves_the_warm_up_nothing_to_compile(preset, size):
    pytest.importorskip("triton.backends.nvidia", reason="needs the triton wheel's NVIDIA backend")
    if not size.full and torch.cuda.is_available():
        pytest.skip("quick size on a CUDA machine: test_startup_cache_gpu.py counts the warm-up's compiles there")
    if not size.full and preset != "tiny":
        pytest.skip("quick size: one preset")
    arch = os.environ.get("INFERLAB_AOT_ARCH", "90")
    done = subprocess.run([sys.executable, str(CHILD), preset, arch], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{preset} sm_{arch}: precompile {out['kernels']} kernels in {out['wall_s']:.1f} s ({out['compile_s']:.1f} s "
          f"of compile threads); warm-up {out['warm_up_s']:.1f} s, {len(out['misses'])} misses")
    assert out["error"] == "" and out["kernels"] > 0
    assert out["misses"] == []
