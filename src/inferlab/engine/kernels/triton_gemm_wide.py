"""Triton kernel: the gate_up projection of a packed prefill batch (thousands of rows) with the gated product
in its epilogue: out = act(x @ gate^T) * (x @ up^T), [M, I], without writing gate_up [M, 2I].

At prefill sizes the MLP's GEMMs are compute-bound, but the unfused path also moves gate_up through memory
three times (the GEMM writes [M, 2I], silu_mul reads it and writes [M, I]): on Qwen2-0.5B's shapes at 32k
tokens, ~0.9 GB per layer (docs/decisions.md). Here each program computes a [BLOCK_M, BLOCK_N]
tile of gate and the matching tile of up (rows n and I + n of the [gate; up] weight) from the same x tile,
and writes only act(gate) * up, rounded as gate_up + triton_norm.silu_mul round it (gate and up to the model
dtype first). Programs are ordered in groups of GROUP_M row tiles so that a group's weight tiles stay in L2.
Whether it beats cuBLAS + silu_mul is timed at the encoder's start-up (packed/wide_mlp.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels.triton_math import gate_activation


@dataclass(frozen=True)
class WideConfig:
    block_m: int
    block_n: int  # columns of the gated output (so 2 * block_n weight rows) per program
    block_k: int
    num_warps: int = 8
    num_stages: int = 3
    group_m: int = 8

    def __str__(self) -> str:
        return f"triton-wide m{self.block_m} n{self.block_n} k{self.block_k} w{self.num_warps} s{self.num_stages}"


# the tiles timed against cuBLAS at start-up (two accumulators per program: 128 x 64 is one 128 x 128 tile's)
CANDIDATES = (
    WideConfig(128, 64, 64, num_warps=4, num_stages=4),
    WideConfig(128, 64, 64, num_warps=8, num_stages=4),
    WideConfig(128, 128, 64, num_warps=8, num_stages=3),
    WideConfig(64, 128, 64, num_warps=4, num_stages=4),
)


@triton.jit(do_not_specialize=["M"])
def _wide_gated_kernel(
    X, W, OUT, M, N, K, stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    GELU_TANH: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    acc_gate = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < K
        a = tl.load(X + rm[:, None] * stride_xm + rk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b_ptr = W + rn[:, None] * stride_wn + rk[None, :]  # gate rows n; up rows N + n
        b_mask = n_ok[:, None] & k_ok[None, :]
        gate = tl.load(b_ptr, mask=b_mask, other=0.0)
        up = tl.load(b_ptr + N * stride_wn, mask=b_mask, other=0.0)
        if IEEE:
            acc_gate += tl.dot(a, tl.trans(gate), input_precision="ieee")
            acc_up += tl.dot(a, tl.trans(up), input_precision="ieee")
        else:
            acc_gate += tl.dot(a, tl.trans(gate))
            acc_up += tl.dot(a, tl.trans(up))
    # round gate and up to the model dtype first, as the unfused gate_up GEMM + silu_mul do
    gate_f = acc_gate.to(OUT.dtype.element_ty).to(tl.float32)
    out = gate_activation(gate_f, GELU_TANH) * acc_up.to(OUT.dtype.element_ty).to(tl.float32)
    tl.store(OUT + rm[:, None] * stride_om + rn[None, :], out.to(OUT.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


def wide_gated_linear(
    x: torch.Tensor,  # [M, K]
    w_gate_up: torch.Tensor,  # [2I, K], contiguous: gate rows, then up rows
    config: WideConfig,
    activation: str = "silu",  # "silu" (SwiGLU) or "gelu_tanh" (Gemma's GeGLU)
) -> torch.Tensor:  # [M, I] in the weight's dtype: act(x @ gate^T) * (x @ up^T)
    m, k = x.shape
    assert w_gate_up.shape[1] == k and w_gate_up.shape[0] % 2 == 0, (x.shape, w_gate_up.shape)
    assert w_gate_up.stride(1) == 1 and x.stride(1) == 1 and activation in ("silu", "gelu_tanh")
    n = w_gate_up.shape[0] // 2
    out = torch.empty((m, n), dtype=w_gate_up.dtype, device=w_gate_up.device)
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    _wide_gated_kernel[grid](
        x, w_gate_up, out, m, n, k, x.stride(0), w_gate_up.stride(0), out.stride(0),
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
        GELU_TANH=activation == "gelu_tanh", IEEE=w_gate_up.dtype == torch.float32,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return out
