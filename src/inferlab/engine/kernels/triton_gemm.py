"""Triton kernel: the skinny GEMM of the decode step, out = x @ w^T for few rows (M <= 64), optionally with
the SwiGLU product computed on the fly (down projection: x = gate_up, A = silu(gate) * up).

At decode batch sizes a projection is a stream over its weight matrix: the cost is the weight bytes, and
the question is only whether enough programs keep enough loads in flight. Grid (N / BLOCK_N, SPLIT_K):
each program streams a [BLOCK_N, K / SPLIT_K] slab of the weight (contiguous along K) through tl.dot
against the rows' [M, K / SPLIT_K] slice. SPLIT_K = 1 writes the output directly; otherwise each split
writes fp32 partials and a second kernel sums them in a fixed order (deterministic, no atomics). With
SWIGLU the A operand is silu(gate) * up rounded to the model dtype, exactly what triton_norm.silu_mul
writes, so the fused product equals silu_mul followed by a GEMM up to the order of accumulation, and the
silu_mul launch (and its [M, I] round trip) disappears. Which projection uses this kernel at which batch
size, and with which tile, is decided at start-up by timing against cuBLAS (engine/gemm_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class SkinnyConfig:
    block_n: int  # weight rows per program
    block_k: int  # reduction step
    split_k: int  # programs along K (1: no partials)
    num_warps: int = 4
    num_stages: int = 4

    def __str__(self) -> str:
        return f"triton n{self.block_n} k{self.block_k} split{self.split_k}"


@triton.jit(do_not_specialize=["M", "k_span"])  # one compile per tile for every bucket
def _skinny_kernel(
    X, W, OUT, PART, M, N, K, stride_xm, stride_wn, stride_om, k_span,
    PARTIALS: tl.constexpr, SWIGLU: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rm = tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    start = pid_k * k_span
    for k0 in range(start, tl.minimum(start + k_span, K), BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < K
        a_mask = m_ok[:, None] & k_ok[None, :]
        if SWIGLU:  # x is gate_up [M, 2K]: A = silu(gate) * up, rounded as triton_norm.silu_mul rounds it
            gate = tl.load(X + rm[:, None] * stride_xm + rk[None, :], mask=a_mask, other=0.0).to(tl.float32)
            up = tl.load(X + rm[:, None] * stride_xm + K + rk[None, :], mask=a_mask, other=0.0).to(tl.float32)
            a = (gate / (1.0 + tl.exp(-gate)) * up).to(W.dtype.element_ty)
        else:
            a = tl.load(X + rm[:, None] * stride_xm + rk[None, :], mask=a_mask, other=0.0)
        b = tl.load(W + rn[:, None] * stride_wn + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        if IEEE:
            acc += tl.dot(a, tl.trans(b), input_precision="ieee")
        else:
            acc += tl.dot(a, tl.trans(b))
    mask = m_ok[:, None] & n_ok[None, :]
    if not PARTIALS:
        tl.store(OUT + rm[:, None] * stride_om + rn[None, :], acc.to(OUT.dtype.element_ty), mask=mask)
    else:
        tl.store(PART + (pid_k * M + rm[:, None]) * N + rn[None, :], acc, mask=mask)


@triton.jit(do_not_specialize=["M", "split_k"])
def _split_sum_kernel(PART, OUT, M, N, stride_om, split_k, BLOCK: tl.constexpr):
    m = tl.program_id(0)
    rn = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = rn < N
    total = tl.zeros([BLOCK], tl.float32)
    for s in range(split_k):  # fixed order: deterministic
        total += tl.load(PART + (s * M + m) * N + rn, mask=ok, other=0.0)
    tl.store(OUT + m * stride_om + rn, total.to(OUT.dtype.element_ty), mask=ok)


def skinny_linear(
    x: torch.Tensor,  # [M, K] (or [M, 2K] gate_up with swiglu), M <= 64
    w: torch.Tensor,  # [N, K], contiguous
    config: SkinnyConfig,
    swiglu: bool = False,
) -> torch.Tensor:  # [M, N] in w's dtype
    m = x.shape[0]
    n, k = w.shape
    assert m <= 64 and w.stride(1) == 1 and x.stride(-1) == 1
    assert x.shape[1] == (2 * k if swiglu else k), (x.shape, w.shape, swiglu)
    out = torch.empty((m, n), dtype=w.dtype, device=w.device)
    k_span = triton.cdiv(triton.cdiv(k, config.split_k), config.block_k) * config.block_k
    part = out if config.split_k == 1 else torch.empty((config.split_k, m, n), dtype=torch.float32, device=w.device)
    _skinny_kernel[(triton.cdiv(n, config.block_n), config.split_k)](
        x, w, out, part, m, n, k, x.stride(0), w.stride(0), out.stride(0), k_span,
        PARTIALS=config.split_k > 1, SWIGLU=swiglu, IEEE=w.dtype == torch.float32,
        BLOCK_M=max(16, triton.next_power_of_2(m)), BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    if config.split_k > 1:
        block = min(1024, triton.next_power_of_2(n))
        _split_sum_kernel[(m, triton.cdiv(n, block))](part, out, m, n, out.stride(0), config.split_k, BLOCK=block)
    return out
