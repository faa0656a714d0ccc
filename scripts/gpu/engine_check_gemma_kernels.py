"""engine_check part kernels, the Gemma variants: each Triton kernel's Gemma flags against its torch reference
(same tolerances as the other kernels: relative max error, fp32 <= 1e-5, bf16 <= 2^-6).

(1 + w) norms, the post-norm add (plain and steered), the scaled embedding, the GeGLU product and both GeGLU
GEMM forms, and the decode attention at the Gemma shapes: gemma-2b (8 query heads on 1 kv head, head_dim
256), a Gemma 2 layer (8 on 4, window 300 of 1100 positions, soft-cap 50) and a Gemma 3 layer (4 on 1,
window 512, (1 + w) q/k norms). --quick: small shapes (the Triton interpreter; attention in fp32 only).
The same attention shapes over an fp8 cache: engine_check_fp8_gemma.py (part fp8_kv, its own tolerance).
"""

from __future__ import annotations

from typing import Callable

import torch


def gemma_kernel_cases(ctx, randn: Callable, note: Callable, dtypes, attention_dtypes, g: torch.Generator) -> None:
    from inferlab.engine import torch_ops
    from inferlab.engine.attention import decode_rope_attention_torch
    from inferlab.engine.kernels import triton_attention, triton_norm
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig, skinny_linear
    from inferlab.engine.steering import SteerLayer
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    from engine_check_correctness import _rel

    dev = ctx.device
    hidden = 96 if ctx.quick else 2048
    for dtype in dtypes:
        x, r = randn(64, hidden, dtype=dtype), randn(64, hidden, dtype=dtype)
        w, wx = (randn(hidden) * 0.3).to(dtype), (randn(hidden) * 0.3).to(dtype)
        note("gemma rms_norm (1 + w)", dtype, _rel(triton_norm.rms_norm(x, w, 1e-6, True), torch_ops.rms_norm(x, w, 1e-6, True)))
        ours = triton_norm.add_rms_norm(x, r, w, 1e-6, True, x_norm=wx)
        ref = torch_ops.add_rms_norm(x, r, w, 1e-6, True, x_norm=wx)
        note("gemma post-norm add_rms_norm", dtype, max(_rel(a, b) for a, b in zip(ours, ref)))
        # steering on Gemma 2/3's residual update: half the rows steered, decode (row = token) and prefill maps
        slot = torch.where(torch.arange(64, device=dev) % 2 == 0, torch.arange(64, device=dev) % 5, -1).int()
        for token_rows in (None, torch.arange(64, device=dev).flip(0)):
            steer = SteerLayer(randn(5, hidden, dtype=dtype), slot, randn(64), token_rows)
            ours = triton_norm.add_steer_rms_norm(x, r, w, 1e-6, steer, True, wx)
            ref = torch_ops.add_steer_rms_norm(x, r, w, 1e-6, steer, True, wx)
            note("gemma post-norm add_steer_rms_norm", dtype, max(_rel(a, b) for a, b in zip(ours, ref)))
        embed, tokens = randn(1000, hidden, dtype=dtype), torch.randint(0, 1000, (48,), generator=g, device=dev)
        scale = torch.tensor(hidden**0.5, dtype=dtype).item()
        ours = triton_norm.embed_rms_norm(tokens, embed, w, 1e-6, scale, True)
        ref = torch_ops.embed_rms_norm(tokens, embed, w, 1e-6, scale, True)
        note("gemma embed_rms_norm (scaled)", dtype, max(_rel(a, b) for a, b in zip(ours, ref)))
        gu = randn(64, 2 * hidden, dtype=dtype) * 3
        note("gelu_tanh_mul", dtype, _rel(triton_norm.gelu_tanh_mul(gu), torch_ops.gelu_tanh_mul(gu)))
        if dtype not in attention_dtypes:  # tl.dot: bf16 only on the device
            continue
        n, k = (64, 96) if ctx.quick else (2048, 4096)
        weight = randn(n, k, dtype=dtype) * 0.05
        for rows in (1, 16, 64):
            a = randn(rows, 2 * k, dtype=dtype)
            ref = (torch_ops.gelu_tanh_mul(a).float() @ weight.float().T).to(dtype)
            out = skinny_linear(a, weight, SkinnyConfig(32, 64, 4), swiglu=True, activation="gelu_tanh")
            note("skinny_gemm geglu down", dtype, _rel(out, ref))
            h = randn(rows, k, dtype=dtype)
            gate_up = randn(2 * n, k, dtype=dtype) * 0.05
            ref = torch_ops.gelu_tanh_mul((h.float() @ gate_up.float().T).to(dtype))
            out = skinny_linear(h, gate_up, SkinnyConfig(32, 64, 1), gated=True, activation="gelu_tanh")
            note("skinny_gemm geglu gated", dtype, _rel(out, ref))
        # (name, rows, heads, kv_heads, head_dim, max_len, window, softcap, (1 + w) q/k norms)
        shapes = [("gemma-2b", 64, 8, 1, 256, 1100, 0, None, False), ("gemma2", 16, 8, 4, 256, 1100, 300, 50.0, False),
                  ("gemma3", 16, 4, 1, 256, 2048, 512, None, True)]  # fmt: skip
        if ctx.quick:
            shapes = [("gemma2", 3, 4, 2, 32, 70, 20, 2.0, False), ("gemma3", 2, 4, 1, 32, 70, 12, None, True)]
        for name, rows, heads, kv_heads, head_dim, max_len, window, softcap, offset in shapes:
            tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, max_len, dev)
            caches = [randn(rows + 2, kv_heads, max_len, head_dim, dtype=dtype) for _ in range(2)]
            ref_caches = [c.clone() for c in caches]
            qkv = randn(rows, (heads + 2 * kv_heads) * head_dim, dtype=dtype)
            norms = [(randn(head_dim) * 0.3).to(dtype) if offset else None for _ in range(2)]
            slots = torch.randperm(rows + 2, generator=g, device=dev)[:rows]
            positions = torch.randint(0, max_len, (rows,), generator=g, device=dev)
            positions[0], positions[-1] = 0, max_len - 1
            args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
            gemma = dict(window=window, softcap=softcap, qk_norm_offset=offset)
            counters = torch.zeros((rows + 2) * kv_heads, dtype=torch.int32, device=dev)
            ref = decode_rope_attention_torch(*args, *ref_caches, slots, heads, 256**-0.5, **gemma)
            for splits in (None, 1, 5):
                out = triton_attention.decode_rope_attention(
                    *args, *caches, slots, heads, 256**-0.5, counters, splits=splits, **gemma
                )
                cache_err = max(_rel(c, r) for c, r in zip(caches, ref_caches))
                note(f"decode attention {name}", dtype, max(_rel(out, ref), cache_err))
                note("decode attention counters reset (0 = yes)", dtype, float(counters.any()))
