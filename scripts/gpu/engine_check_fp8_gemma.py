"""engine_check part `fp8_kv`, step `gemma`: the FP8 KV cache with the Gemma family, in two halves (each
in its own try: a failure is recorded and the other runs).

  kernel    the fp8 decode attention kernel against the torch reference (which dequantizes what it reads)
            at the Gemma shapes of engine_check_gemma_kernels.py: gemma-2b (8 query heads on 1 kv head,
            head_dim 256, no window, 64 rows), a Gemma 2 layer (8 on 4, window 300 of 1100 positions,
            soft-cap 50) and a Gemma 3 layer (4 on 1, window 512 of 2048, (1 + w) q/k norms); splits from
            the config, 1 and 5; bf16 queries on CUDA (--quick: small shapes, fp32, the Triton
            interpreter). Tolerance as the fp8 kernel step's: max |err| <= 2% of max |out| (the kernel
            rounds p x v_scale to bf16 for its dot, the reference does not); whether the new position's K/V
            and scales are stored bit-identically is reported (bf16 rope rounding may differ).
  accuracy  tiny-gemma2 and tiny-gemma3 (windows 8 / 12 shorter than the rows, soft-caps, (1 + w) q/k
            norms, the two ropes), teacher-forced as the accuracy step of engine_check_fp8.py: fp8 vs bf16
            cache vs fp32 (bound: max |logit diff| <= 10% of max |logit|; prefill logits identical).
About 20 s on an H100 (six tiny-engine start-ups and the kernel at three shapes).
"""

from __future__ import annotations

import traceback
from typing import Any

import torch


def _kernel_case(ctx, g: torch.Generator, shape: tuple) -> dict[str, Any]:
    from inferlab.engine.attention import decode_rope_attention_torch
    from inferlab.engine.kernels import triton_attention
    from inferlab.engine.kv_quant import quantize
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    name, rows, heads, kv_heads, head_dim, max_len, window, softcap, offset = shape
    dev, dtype = ctx.device, torch.bfloat16 if ctx.cuda else torch.float32  # the interpreter's bf16 dot is broken

    def randn(*size):
        return torch.randn(*size, generator=g, device=dev).to(dtype)

    tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, max_len, dev)
    stored = [t for _ in range(2) for t in quantize(randn(rows + 2, kv_heads, max_len, head_dim))]  # k8, ks, v8, vs
    qkv = randn(rows, (heads + 2 * kv_heads) * head_dim)
    norms = [randn(head_dim) * 0.3 if offset else None for _ in range(2)]
    slots = torch.randperm(rows + 2, generator=g, device=dev)[:rows]
    positions = torch.randint(0, max_len, (rows,), generator=g, device=dev)
    positions[0], positions[-1] = 0, max_len - 1
    args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
    variant = dict(window=window, softcap=softcap, qk_norm_offset=offset)
    scale = head_dim**-0.5
    ref = [t.clone() for t in stored]
    want = decode_rope_attention_torch(*args, ref[0], ref[2], slots, heads, scale, k_scale=ref[1], v_scale=ref[3],
                                       **variant).float()  # fmt: skip
    worst, identical = 0.0, True
    counters = torch.zeros((rows + 2) * kv_heads, dtype=torch.int32, device=dev)
    for splits in (None, 1, 5):
        mine = [t.clone() for t in stored]
        got = triton_attention.decode_rope_attention(*args, mine[0], mine[2], slots, heads, scale, counters,
                                                     splits=splits, k_scale=mine[1], v_scale=mine[3],
                                                     **variant).float()  # fmt: skip
        worst = max(worst, (got - want).abs().max().item())
        identical &= all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) if a.dtype == torch.float8_e4m3fn
                         else torch.equal(a, b) for a, b in zip(mine, ref))  # fmt: skip
    top = want.abs().max().item()
    ok = worst <= 0.02 * max(top, 1e-6) and not counters.any()
    ctx.row("fp8_kv", f"gemma {name} fp8 attention vs torch reference: max |err| (of max |out|)",
            f"{worst:.4f} ({top:.3f})", ("ok" if ok else "FAIL > 2% or counters not reset") +
            f"; new K/V + scales stored bit-identically: {identical}")  # fmt: skip
    return {"max_abs_err": worst, "max_abs": top, "ok": ok, "cache_identical": identical}


def step_gemma(ctx) -> dict[str, Any]:
    from engine_check_fp8 import step_accuracy  # beside this file

    # (name, rows, heads, kv_heads, head_dim, max_len, window, softcap, (1 + w) q/k norms)
    shapes = [("gemma-2b", 64, 8, 1, 256, 1100, 0, None, False), ("gemma2", 16, 8, 4, 256, 1100, 300, 50.0, False),
              ("gemma3", 16, 4, 1, 256, 2048, 512, None, True)]  # fmt: skip
    if ctx.quick:
        shapes = [("gemma2", 3, 4, 2, 32, 70, 20, 2.0, False), ("gemma3", 2, 4, 1, 32, 70, 12, None, True)]
    g = torch.Generator(device=ctx.device).manual_seed(11)
    res: dict[str, Any] = {}
    halves = [(f"kernel {s[0]}", lambda s=s: _kernel_case(ctx, g, s)) for s in shapes]
    halves += [(preset, lambda p=preset: step_accuracy(ctx, p)) for preset in ("tiny-gemma2", "tiny-gemma3")]
    for name, run in halves:
        try:
            res[name] = run()
        except Exception:
            res[name] = {"error": traceback.format_exc()}
            traceback.print_exc()
            ctx.row("fp8_kv", f"gemma {name}: ERROR", res[name]["error"].strip().splitlines()[-1][:100], "FAIL")
        ctx.free()
    return res
