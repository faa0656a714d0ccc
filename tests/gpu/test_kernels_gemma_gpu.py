"""The Gemma variants of the engine's Triton kernels against their torch references on CUDA (tolerances as
test_kernels_gpu.py: relative max error, fp32 <= 1e-5, bf16 <= 2^-6).

(1 + w) norms, the post-norm add (plain and steered), the scaled embedding, the GeGLU product and both GeGLU
GEMM forms, and the decode attention at Gemma shapes: gemma-2b (8 query heads on 1 kv head, head_dim
256), a Gemma 2 layer (8 on 4, window 300 of 1100 positions, soft-cap 50) and a Gemma 3 layer (4 on 1,
window 512 of 2048, (1 + w) q/k norms). Quick: the Gemma 2 and 3 layers at fewer rows; full: all three.
"""

from __future__ import annotations

import pytest
import torch
from gpu_testkit import CUDA_ONLY, rel_err

pytestmark = CUDA_ONLY
CUDA = torch.device("cuda")
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.bfloat16: 2**-6}
HIDDEN = 2048
# (name, rows, heads, kv_heads, head_dim, max_len, window, softcap, (1 + w) q/k norms)
ATTENTION_SHAPES = [("gemma2", 16, 8, 4, 256, 1100, 300, 50.0, False), ("gemma3", 16, 4, 1, 256, 2048, 512, None, True)]
FULL_ONLY_SHAPES = [("gemma-2b", 64, 8, 1, 256, 1100, 0, None, False)]


def randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g, device=CUDA).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_gemma_norm_kernels_match_torch(dtype):
    from inferlab.engine import torch_ops
    from inferlab.engine.kernels import triton_norm
    from inferlab.engine.steering import SteerLayer

    g = torch.Generator(device=CUDA).manual_seed(0)
    x, r = randn(g, 64, HIDDEN, dtype=dtype), randn(g, 64, HIDDEN, dtype=dtype)
    w, wx = (randn(g, HIDDEN) * 0.3).to(dtype), (randn(g, HIDDEN) * 0.3).to(dtype)
    assert rel_err(triton_norm.rms_norm(x, w, 1e-6, True), torch_ops.rms_norm(x, w, 1e-6, True)) <= TOL[dtype]
    pairs = [(triton_norm.add_rms_norm(x, r, w, 1e-6, True, x_norm=wx), torch_ops.add_rms_norm(x, r, w, 1e-6, True,
                                                                                             x_norm=wx))]  # fmt: skip
    rows = torch.arange(64, device=CUDA)
    slot = torch.where(rows % 2 == 0, rows % 5, -1).int()
    for token_rows in (None, rows.flip(0)):  # steering on Gemma 2/3's residual update, decode and prefill maps
        steer = SteerLayer(randn(g, 5, HIDDEN, dtype=dtype), slot, randn(g, 64), token_rows)
        pairs.append((triton_norm.add_steer_rms_norm(x, r, w, 1e-6, steer, True, wx),
                      torch_ops.add_steer_rms_norm(x, r, w, 1e-6, steer, True, wx)))  # fmt: skip
    embed, tokens = randn(g, 1000, HIDDEN, dtype=dtype), torch.randint(0, 1000, (48,), generator=g, device=CUDA)
    scale = torch.tensor(HIDDEN**0.5, dtype=dtype).item()
    pairs.append((triton_norm.embed_rms_norm(tokens, embed, w, 1e-6, scale, True),
                  torch_ops.embed_rms_norm(tokens, embed, w, 1e-6, scale, True)))  # fmt: skip
    for ours, ref in pairs:
        assert max(rel_err(a, b) for a, b in zip(ours, ref)) <= TOL[dtype]
    gate_up = randn(g, 64, 2 * HIDDEN, dtype=dtype) * 3
    assert rel_err(triton_norm.gelu_tanh_mul(gate_up), torch_ops.gelu_tanh_mul(gate_up)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_geglu_skinny_gemm_forms_match_torch(dtype, size):
    """GeGLU fused into the down projection's input, and into the gated gate_up projection's epilogue."""
    from inferlab.engine import torch_ops
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig, skinny_linear

    g = torch.Generator(device=CUDA).manual_seed(1)
    n, k = size.pick((256, 512), (2048, 4096))
    weight, gate_up = randn(g, n, k, dtype=dtype) * 0.05, randn(g, 2 * n, k, dtype=dtype) * 0.05
    for rows in (1, 16, 64):
        a = randn(g, rows, 2 * k, dtype=dtype)
        ref = (torch_ops.gelu_tanh_mul(a).float() @ weight.float().T).to(dtype)
        out = skinny_linear(a, weight, SkinnyConfig(32, 64, 4), swiglu=True, activation="gelu_tanh")
        assert rel_err(out, ref) <= TOL[dtype], ("down", rows)
        h = randn(g, rows, k, dtype=dtype)
        ref = torch_ops.gelu_tanh_mul((h.float() @ gate_up.float().T).to(dtype))
        out = skinny_linear(h, gate_up, SkinnyConfig(32, 64, 1), gated=True, activation="gelu_tanh")
        assert rel_err(out, ref) <= TOL[dtype], ("gated", rows)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_gemma_decode_attention_matches_torch(dtype, size):
    """Windows, soft-caps and (1 + w) q/k norms of the decode attention kernel, over the split counts."""
    from inferlab.engine.attention import decode_rope_attention_torch
    from inferlab.engine.kernels import triton_attention
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    g = torch.Generator(device=CUDA).manual_seed(2)
    for name, rows, heads, kv_heads, head_dim, max_len, window, softcap, offset in ATTENTION_SHAPES + size.pick(
            [], FULL_ONLY_SHAPES):
        tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, max_len, CUDA)
        caches = [randn(g, rows + 2, kv_heads, max_len, head_dim, dtype=dtype) for _ in range(2)]
        ref_caches = [c.clone() for c in caches]
        qkv = randn(g, rows, (heads + 2 * kv_heads) * head_dim, dtype=dtype)
        norms = [(randn(g, head_dim) * 0.3).to(dtype) if offset else None for _ in range(2)]
        slots = torch.randperm(rows + 2, generator=g, device=CUDA)[:rows]
        positions = torch.randint(0, max_len, (rows,), generator=g, device=CUDA)
        positions[0], positions[-1] = 0, max_len - 1
        args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
        gemma = dict(window=window, softcap=softcap, qk_norm_offset=offset)
        counters = torch.zeros((rows + 2) * kv_heads, dtype=torch.int32, device=CUDA)
        ref = decode_rope_attention_torch(*args, *ref_caches, slots, heads, head_dim**-0.5, **gemma)
        for splits in (None, 1, 5):
            out = triton_attention.decode_rope_attention(*args, *caches, slots, heads, head_dim**-0.5, counters,
                                                         splits=splits, **gemma)  # fmt: skip
            assert rel_err(out, ref) <= TOL[dtype], (name, splits)
            assert max(rel_err(c, r) for c, r in zip(caches, ref_caches)) <= TOL[dtype], name
            assert not counters.any()
