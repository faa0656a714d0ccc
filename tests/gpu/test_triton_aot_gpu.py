"""The engine's Triton kernels compiled ahead of time for a CUDA target (default sm_90, H100/H200;
$INFERLAB_AOT_ARCH=89 for Ada), on any machine: no GPU is needed, only the triton wheel (its ptxas).

The Triton interpreter (what the CPU suite runs) checks the arithmetic but not the compiler: type rules,
loop-carried types, register pressure. This runs Triton's real NVIDIA pipeline on every case of
triton_aot_kernels.py, one test per kernel module, and prints each kernel's registers, spilled bytes and
shared memory (pytest -s). Run it before spending GPU time on a kernel change:
    python -m pytest -q -s -m gpu tests/gpu/test_triton_aot_gpu.py [-k triton_attention] [--gpu-size full]
against another Triton than the installed one (e.g. the device's): put it first on PYTHONPATH. Quick: one
tile or config per constexpr variant, on a machine without CUDA only (with one, the kernel tests have just
compiled the kernels they launch, for real: the quick device run saves the minute); full: every tile and
config the engine may launch, everywhere.
"""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.gpu
MODULES = ["triton_gemm", "triton_attention", "triton_rope", "triton_norm", "triton_filter", "triton_sampling",
           "triton_top_p", "triton_collect", "triton_step", "triton_kv_copy", "step_kernels", "triton_varlen_attention",
           "triton_rope_inplace", "triton_fp8_rows", "triton_gemm_wide", "triton_attention_rows", "triton_forced_runs"]


@pytest.mark.parametrize("module", MODULES)
def test_kernels_compile_for_the_cuda_target(module, size):
    pytest.importorskip("triton.backends.nvidia", reason="needs the triton wheel's NVIDIA backend")
    if not size.full and torch.cuda.is_available():
        pytest.skip("quick size on a CUDA machine: the kernel tests compile what they launch (--gpu-size full runs it)")
    from triton_aot_kernels import compile_case, kernel_cases

    arch = int(os.environ.get("INFERLAB_AOT_ARCH", "90"))
    cases = [case for case in kernel_cases(size.full) if case[1].fn.__module__.rsplit(".", 1)[-1] == module]
    assert cases, f"no case of {module} in triton_aot_kernels.py"
    failures = []
    for case in cases:
        try:
            print(f"ok   {case[0]}: {compile_case(case, arch)}")
        except Exception as e:  # the compiler's message is the finding; the module's other kernels still compile
            failures.append(f"{case[0]}: {type(e).__name__}: {str(e)[:1500]}")
    assert failures == [], "\n".join(failures)
