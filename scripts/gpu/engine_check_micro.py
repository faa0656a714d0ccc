"""engine_check microbenchmarks: decode attention options and the sampler's pieces, one kernel at a time.

Timings are CUDA-event medians over repeated calls after a warm-up (wall clock on CPU); achieved GB/s for
attention counts the K/V bytes of each row's live length.
"""

from __future__ import annotations

import time
from typing import Any

import torch

PROMPT_LEN = 48


def _time_us(ctx, fn, iters: int) -> float:
    for _ in range(3):
        fn()
    ctx.sync()
    if ctx.cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        ctx.sync()
        return 1e3 * start.elapsed_time(end) / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return 1e6 * (time.perf_counter() - t0) / iters


def _sdpa_bucketed(q, k_cache, v_cache, slots, lengths, scale, bucket: int):
    """SDPA over the live length rounded up to `bucket`: gather the rows' slots, mask past each length."""
    span = min(k_cache.shape[2], -(-int(lengths.max()) // bucket) * bucket)
    group = q.shape[1] // k_cache.shape[1]
    k = k_cache[slots, :, :span].repeat_interleave(group, dim=1)  # [rows, heads, span, D]
    v = v_cache[slots, :, :span].repeat_interleave(group, dim=1)
    mask = torch.arange(span, device=q.device)[None, :] < lengths[:, None]  # [rows, span]
    out = torch.nn.functional.scaled_dot_product_attention(
        q[:, :, None], k, v, attn_mask=mask[:, None, None], scale=scale
    )
    return out[:, :, 0]


def part_attention(ctx) -> dict[str, Any]:
    from inferlab.engine.attention import decode_attention_torch
    from inferlab.engine.kernels import triton_attention

    res: dict[str, Any] = {}
    kv_heads, heads, head_dim, max_len, slots_total = (2, 4, 16, 256, 16) if ctx.quick else (8, 16, 64, 2048, 256)
    dtype = torch.bfloat16 if ctx.cuda else torch.float32
    g = torch.Generator(device=ctx.device).manual_seed(0)
    k_cache = torch.randn(slots_total, kv_heads, max_len, head_dim, generator=g, device=ctx.device).to(dtype)
    v_cache = torch.randn(slots_total, kv_heads, max_len, head_dim, generator=g, device=ctx.device).to(dtype)
    configs = {"triton auto": {}, "triton 1 split": dict(splits=1)}
    if not ctx.quick:
        configs |= {
            "triton n32": dict(block_n=32),
            "triton n128": dict(block_n=128),
            "triton w8": dict(num_warps=8),
            "triton w2": dict(num_warps=2),
            "triton stages3": dict(num_stages=3),
            "triton stages1": dict(num_stages=1),
            "triton n128 w8 s3": dict(block_n=128, num_warps=8, num_stages=3),
        }
    iters = 3 if ctx.quick else 20
    for rows in [4, 16] if ctx.quick else [16, 64, 256]:
        low, high = (8, 200) if ctx.quick else (PROMPT_LEN, PROMPT_LEN + 1000)
        lengths = torch.randint(low, high + 1, (rows,), generator=g, device=ctx.device)
        slots = torch.randperm(slots_total, generator=g, device=ctx.device)[:rows]
        q = torch.randn(rows, heads, head_dim, generator=g, device=ctx.device).to(dtype)
        scale = head_dim**-0.5
        kv_bytes = int(lengths.sum()) * 2 * kv_heads * head_dim * k_cache.element_size()
        ref = decode_attention_torch(q, k_cache, v_cache, slots, lengths, scale)
        variants = {
            name: (lambda kw=kw: triton_attention.decode_attention(q, k_cache, v_cache, slots, lengths, scale, **kw))
            for name, kw in configs.items()
        }
        hint = int(lengths.max())
        variants["torch masked, whole cache"] = lambda: decode_attention_torch(
            q, k_cache, v_cache, slots, lengths, scale
        )
        variants["torch, live length"] = lambda: decode_attention_torch(
            q, k_cache, v_cache, slots, lengths, scale, hint
        )
        variants["sdpa, length bucket 256"] = lambda: _sdpa_bucketed(q, k_cache, v_cache, slots, lengths, scale, 256)
        cells = {}
        for name, fn in variants.items():
            try:
                error = (fn().float() - ref.float()).abs().max().item()
                us = _time_us(ctx, fn, iters)
                cells[name] = {"us": us, "gb_per_s": kv_bytes / us / 1e3, "max_abs_err": error}
            except Exception as e:  # one variant failing (e.g. out of memory) must not hide the others
                cells[name] = {"error": repr(e)}
        res[f"rows={rows}"] = cells
        timed = {k: v for k, v in cells.items() if "us" in v}
        best = min(timed, key=lambda k: timed[k]["us"])
        auto = cells.get("triton auto", {})
        ctx.row(
            "attention",
            f"rows={rows} triton auto: us/layer, GB/s",
            f"{auto.get('us', float('nan')):.1f}, {auto.get('gb_per_s', float('nan')):.0f}",
            f"best: {best} {timed[best]['us']:.1f} us",
        )
        for name in ("torch masked, whole cache", "sdpa, length bucket 256"):
            if name in timed:
                ctx.row("attention", f"rows={rows} {name}: us/layer", timed[name]["us"])
    return res


def part_sampling(ctx) -> dict[str, Any]:
    """Per-step cost of the sampler pieces at llama-380m's vocabulary: sort-based vs radix thresholds."""
    from inferlab.engine.ops import select_ops
    from inferlab.engine.sampler import FILTER_MIN_P, FILTER_SORT, filter_threshold

    res: dict[str, Any] = {}
    vocab = 5000 if ctx.quick else 128256
    ops = select_ops("auto" if ctx.cuda else "triton", ctx.device)
    g = torch.Generator(device=ctx.device).manual_seed(1)
    for rows in [4] if ctx.quick else [16, 64, 256]:
        logits = (torch.randn(rows, vocab, generator=g, device=ctx.device) * 2).to(torch.bfloat16).float()
        t = torch.ones(rows, device=ctx.device)
        k = torch.zeros(rows, dtype=torch.int64, device=ctx.device)
        p = torch.full((rows,), 0.9, device=ctx.device)
        m = torch.zeros(rows, device=ctx.device)
        seeds = torch.arange(rows, device=ctx.device)
        greedy = torch.zeros(rows, dtype=torch.bool, device=ctx.device)
        tau = ops.filter_threshold(logits, t, k, p, m, FILTER_SORT)
        iters = 2 if ctx.quick else 20
        cell = {
            "top-p threshold, torch sort (us)": _time_us(
                ctx, lambda: filter_threshold(logits, t, k, p, m, FILTER_SORT), iters
            ),
            "top-p threshold, radix kernel (us)": _time_us(
                ctx, lambda: ops.filter_threshold(logits, t, k, p, m, FILTER_SORT), iters
            ),
            "min-p threshold (us)": _time_us(
                ctx, lambda: ops.filter_threshold(logits, t, k, p, p / 10, FILTER_MIN_P), iters
            ),
            "race, no threshold (us)": _time_us(
                ctx, lambda: ops.race_argmax(logits, t, None, seeds, seeds, greedy), iters
            ),
            "race with threshold (us)": _time_us(
                ctx, lambda: ops.race_argmax(logits, t, tau, seeds, seeds, greedy), iters
            ),
            "logits bf16->fp32 copy (us)": _time_us(ctx, lambda: logits.to(torch.bfloat16).float(), iters),
        }
        if ctx.cuda:  # a small sweep of the radix kernel's shape, to pick its defaults from
            from inferlab.engine.kernels.triton_filter import filter_threshold as radix

            sweep = {}
            for block, warps, digits in [(512, 4, 4), (2048, 4, 4), (1024, 8, 4), (2048, 8, 4), (512, 8, 8)]:

                def fn(b=block, w=warps, d=digits):
                    return radix(logits, t, k, p, m, FILTER_SORT, key_bits=16, block=b, num_warps=w, digit_bits=d)

                try:
                    sweep[f"block={block} warps={warps} digit_bits={digits}"] = _time_us(ctx, fn, iters)
                except Exception as e:  # a shape the compiler rejects must not hide the others
                    sweep[f"block={block} warps={warps} digit_bits={digits}"] = repr(e)
            cell["radix sweep (us)"] = sweep
        res[f"rows={rows}"] = cell
        ctx.row(
            "sampling",
            f"rows={rows} top-p threshold: sort vs radix kernel (us)",
            f"{cell['top-p threshold, torch sort (us)']:.0f} vs {cell['top-p threshold, radix kernel (us)']:.0f}",
            f"race {cell['race with threshold (us)']:.0f} us",
        )
    return res
