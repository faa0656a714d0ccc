"""Triton kernel: the skinny GEMM of the decode step, out = x @ w^T for few rows (M <= 64), optionally with
the gated MLP product fused.

At decode batch sizes a projection streams its weight matrix: the cost is the weight bytes, and what
matters is keeping enough loads in flight. Grid (N / BLOCK_N, SPLIT_K): each program streams a
[BLOCK_N, K / SPLIT_K] slab of the weight through tl.dot against the rows' [M, K / SPLIT_K] slice. With
SPLIT_K > 1 each split writes fp32 partials and the tile's last split to finish (an atomic counter per
tile, reset by that program) sums them in a fixed order: deterministic, no second launch.
Fused forms (rounded as gate_up + triton_norm.silu_mul round them, so no silu_mul launch is needed):
SWIGLU (down projection: A = act(gate) * up computed from gate_up on the fly) and GATED (gate_up
projection: each program streams matching gate and up rows and writes act(gate) * up); GELU_TANH makes
act Gemma's tanh GELU instead of SiLU. Which projection uses this kernel, at which batch size and with
which tile, is timed at start-up against cuBLAS (engine/gemm_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels.triton_math import gate_activation


@dataclass(frozen=True)
class SkinnyConfig:
    block_n: int  # weight rows per program
    block_k: int  # reduction step
    split_k: int  # programs along K (1: no partials)
    num_warps: int = 4
    num_stages: int = 4

    def __str__(self) -> str:
        return f"triton n{self.block_n} k{self.block_k} split{self.split_k}"


@triton.jit(do_not_specialize=["M", "k_blocks"])  # one compile per tile for every bucket
def _skinny_kernel(
    X, W, OUT, PART, COUNTER, M, N, K, stride_xm, stride_wn, stride_om, k_blocks,
    PARTIALS: tl.constexpr, SWIGLU: tl.constexpr, GATED: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GELU_TANH: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rm = tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)  # GATED: W is [gate; up] (2N rows), out = silu(gate) * up
    for kb in range(0, k_blocks):
        # a whole number of BLOCK_K from 0, stated to the compiler: without it a split's start offset has
        # unknown alignment and every weight load is issued element by element
        k0 = tl.multiple_of((pid_k * k_blocks + kb) * BLOCK_K, BLOCK_K)
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < K
        a_mask = m_ok[:, None] & k_ok[None, :]
        if SWIGLU:  # x is gate_up [M, 2K]: A = act(gate) * up, rounded as triton_norm's act product rounds it
            gate = tl.load(X + rm[:, None] * stride_xm + rk[None, :], mask=a_mask, other=0.0).to(tl.float32)
            up = tl.load(X + rm[:, None] * stride_xm + K + rk[None, :], mask=a_mask, other=0.0).to(tl.float32)
            a = (gate_activation(gate, GELU_TANH) * up).to(W.dtype.element_ty)
        else:
            a = tl.load(X + rm[:, None] * stride_xm + rk[None, :], mask=a_mask, other=0.0)
        b_ptr = W + rn[:, None] * stride_wn + rk[None, :]
        b_mask = n_ok[:, None] & k_ok[None, :]
        b = tl.load(b_ptr, mask=b_mask, other=0.0)
        if IEEE:
            acc += tl.dot(a, tl.trans(b), input_precision="ieee")
        else:
            acc += tl.dot(a, tl.trans(b))
        if GATED:
            b_up = tl.load(b_ptr + N * stride_wn, mask=b_mask, other=0.0)
            if IEEE:
                acc_up += tl.dot(a, tl.trans(b_up), input_precision="ieee")
            else:
                acc_up += tl.dot(a, tl.trans(b_up))
    if GATED:  # round gate and up to the model dtype first, as the unfused gate_up GEMM + silu_mul do
        gate = acc.to(OUT.dtype.element_ty).to(tl.float32)
        acc = gate_activation(gate, GELU_TANH) * acc_up.to(OUT.dtype.element_ty).to(tl.float32)
    mask = m_ok[:, None] & n_ok[None, :]
    out_ptr = OUT + rm[:, None] * stride_om + rn[None, :]
    if not PARTIALS:
        tl.store(out_ptr, acc.to(OUT.dtype.element_ty), mask=mask)
    else:  # split-K: the tile's last split to finish sums the fp32 partials in a fixed order (deterministic)
        splits = tl.num_programs(1)
        part_ptr = PART + rm[:, None] * N + rn[None, :]  # + split * M * N
        tl.store(part_ptr + pid_k * M * N, acc, mask=mask)
        tl.debug_barrier()  # every thread's partial is written before the counter is released
        if tl.atomic_add(COUNTER + pid_n, 1, sem="acq_rel") == splits - 1:
            total = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for split in range(splits):
                total += tl.load(part_ptr + split * M * N, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(out_ptr, total.to(OUT.dtype.element_ty), mask=mask)
            tl.atomic_xchg(COUNTER + pid_n, 0)  # ready for the next launch and the next replay


def tile_counters(n: int, block_n: int, device: torch.device) -> torch.Tensor:
    """Zeroed split-K counters for an output of width n (one per BLOCK_N tile); each launch leaves them at
    zero, so one buffer serves every launch on a stream (the engine keeps one in its GemmPlan)."""
    return torch.zeros(triton.cdiv(n, block_n), dtype=torch.int32, device=device)


def skinny_linear(
    x: torch.Tensor,  # [M, K] (or [M, 2K] gate_up with swiglu), M <= 64
    w: torch.Tensor,  # [N, K], contiguous
    config: SkinnyConfig,
    swiglu: bool = False,
    counters: torch.Tensor | None = None,  # >= tile_counters(N, block_n); None: allocated (a memset)
    gated: bool = False,  # w is gate_up [2I, K]: returns silu(x @ gate^T) * (x @ up^T), [M, I]
    activation: str = "silu",  # the gate activation of swiglu / gated: "silu" or "gelu_tanh" (Gemma's GeGLU)
) -> torch.Tensor:  # [M, N] in w's dtype (N = I when gated)
    m = x.shape[0]
    n, k = w.shape
    assert m <= 64 and w.stride(1) == 1 and x.stride(-1) == 1
    assert x.shape[1] == (2 * k if swiglu else k), (x.shape, w.shape, swiglu)
    assert not (gated and (swiglu or config.split_k > 1)), "gated: one split, plain input"
    assert activation in ("silu", "gelu_tanh"), activation
    n = n // 2 if gated else n
    tiles = triton.cdiv(n, config.block_n)
    if counters is None:
        counters = tile_counters(n, config.block_n, w.device)
    assert counters.numel() >= tiles and counters.dtype == torch.int32
    out = torch.empty((m, n), dtype=w.dtype, device=w.device)
    k_blocks = triton.cdiv(triton.cdiv(k, config.split_k), config.block_k)
    part = out if config.split_k == 1 else torch.empty((config.split_k, m, n), dtype=torch.float32, device=w.device)
    _skinny_kernel[(tiles, config.split_k)](
        x, w, out, part, counters, m, n, k, x.stride(0), w.stride(0), out.stride(0), k_blocks,
        PARTIALS=config.split_k > 1, SWIGLU=swiglu, GATED=gated, IEEE=w.dtype == torch.float32,
        BLOCK_M=max(16, triton.next_power_of_2(m)), BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        GELU_TANH=activation == "gelu_tanh",
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return out
