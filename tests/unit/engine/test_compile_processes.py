"""Triton compiles in worker processes (engine/compile_processes.py): a worker compiles an engine kernel for
sm_90 into Triton's disk cache (no GPU needed, only the triton wheel's NVIDIA backend), the JIT's own compile
in the parent then finds it there (a cache hit under the same key); what a worker cannot do is declined, not
raised, and the caller compiles it as before. The whole precompile through processes, with its warm-up finding
every kernel: tests/gpu/test_precompile_aot_gpu.py."""

from __future__ import annotations

import pytest

pytest.importorskip("triton.backends.nvidia", reason="needs the triton wheel's NVIDIA backend")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from inferlab.engine.compile_jobs import UnresolvedKernel, job_for, resolve_kernel  # noqa: E402
from inferlab.engine.compile_processes import CompileProcesses  # noqa: E402
from inferlab.engine.kernels import triton_norm  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


def _rms_norm_source(block: int = 1024) -> ASTSource:
    """The engine's plain RMS norm as its JIT specialises it (tests/gpu/triton_aot_kernels.py's case)."""
    kernel = triton_norm._rms_norm_kernel
    signature = dict(X="*bf16", R="*bf16", W="*bf16", WX="*bf16", OUT="*bf16", RES_OUT="*bf16", VEC="*bf16",
                     SLOT="*i32", SCALE="*fp32", TOKEN_ROWS="*i64", stride_x="i32", stride_r="i32", stride_o="i32",
                     stride_ro="i32", stride_v="i32", stride_slot="i32", stride_scale="i32", dim="i32", eps="fp32")
    constexprs = dict(HAS_RESIDUAL=False, NORM_X=False, UNIT_OFFSET=False, STEER=False, HAS_ROW_MAP=False,
                      BLOCK=block)  # fmt: skip
    signature |= {name: "constexpr" for name in constexprs}
    return ASTSource(kernel, signature, constexprs, {})


def _hits(monkeypatch) -> list[bool]:
    hits: list[bool] = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda **kw: hits.append(kw["cache_hit"]))
    return hits


def test_a_worker_compiles_into_the_cache_the_jit_reads_and_declines_what_it_cannot(tmp_path, monkeypatch):
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path))
    processes = CompileProcesses(1, str(tmp_path))
    try:
        src = _rms_norm_source()
        assert processes.compile(job_for(src, TARGET, {"num_warps": 4}, None, str(tmp_path)))
        hits = _hits(monkeypatch)
        triton.compile(src, target=TARGET, options={"num_warps": 4})
        assert hits == [True], "the parent compiled again what the worker had compiled"
        assert processes.compiled == 1 and processes.worker_s > 0

        @triton.jit
        def made_here(X):
            tl.store(X, 1.0)

        local = ASTSource(made_here, {"X": "*fp32"}, {}, {})
        assert not processes.compile(job_for(local, TARGET, {}, None, str(tmp_path)))
        assert "made inside a function" in processes.declined[-1]
        # the worker is still in step after declining: the next job compiles
        assert processes.compile(job_for(_rms_norm_source(2048), TARGET, {"num_warps": 8}, None, str(tmp_path)))
        assert processes.compiled == 2
        processes._workers[0].kill()
        processes._workers[0].wait()
        assert not processes.compile(job_for(src, TARGET, {"num_warps": 2}, None, str(tmp_path)))
        assert "exited" in processes.declined[-1]
        assert not processes.compile(job_for(src, TARGET, {"num_warps": 2}, None, str(tmp_path)))
        assert processes.declined[-1] == "no compile worker left"
    finally:
        processes.close()


def test_a_kernel_resolves_only_to_the_parents_source():
    kernel = triton_norm._rms_norm_kernel
    assert resolve_kernel(kernel.fn.__module__, kernel.fn.__qualname__, kernel.cache_key) is kernel
    with pytest.raises(UnresolvedKernel, match="not the parent's kernel"):
        resolve_kernel(kernel.fn.__module__, kernel.fn.__qualname__, "another source")
    with pytest.raises(UnresolvedKernel, match="not importable"):
        resolve_kernel(kernel.fn.__module__, "_no_such_kernel", kernel.cache_key)
