"""engine_check micro-benchmarks, one operation at a time, each timed inside a CUDA graph (device time,
no Python launch overhead; wall clock on CPU): the sampler's pieces and the decode GEMMs.

  sampling  V = 128,256, rows 16 / 64 / 256, bf16 logits as the LM head writes them: top-p 0.9 threshold
            by the torch sort (the reference) vs the parallel radix kernels (default slicing, and a sweep
            of slices per row and warps); min-p; top-k 50 + top-p; the race (bf16 input, the engine's
            path) and the old fp32 path (the [B, V] cast + race on fp32) for comparison. Targets (issue):
            top-p <= 60 us at 16 rows and <= 300 us at 256; race + cast <= 80 us at 256.
  gemm      llama-380m and qwen3-0.6b projection shapes at 16 / 32 / 64 rows: cuBLAS vs the skinny Triton
            kernel's candidates, with the engine's own timing (engine/gemm_plan.py: cold L2, graphs).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

VOCAB = 128256


def time_us(ctx, fn: Callable[[], Any], iters: int = 20, graph: bool = True) -> float:
    """Device microseconds per call: `iters` calls captured in one CUDA graph and replayed (graph=False: fn
    already replays graphs; timed with events); on CPU, wall clock."""
    fn()  # compile / warm up
    ctx.sync()
    if not ctx.cuda:
        t0 = time.perf_counter()
        for _ in range(max(1, iters // 10)):
            fn()
        return 1e6 * (time.perf_counter() - t0) / max(1, iters // 10)
    if not graph:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return 1e3 * start.elapsed_time(end) / iters
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured):
        for _ in range(iters):
            fn()
    captured.replay()
    ctx.sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        captured.replay()
    end.record()
    end.synchronize()
    del captured
    return 1e3 * start.elapsed_time(end) / (3 * iters)


def part_sampling(ctx) -> dict[str, Any]:
    from inferlab.engine.kernels import triton_filter, triton_sampling, triton_top_p
    from inferlab.engine.sampler import FILTER_MIN_P, FILTER_TOP_K, FILTER_TOP_P, filter_threshold

    res: dict[str, Any] = {}
    vocab = 5000 if ctx.quick else VOCAB
    g = torch.Generator(device=ctx.device).manual_seed(1)
    iters = 2 if ctx.quick else 20
    for rows in [4] if ctx.quick else [16, 64, 256]:
        logits = (torch.randn(rows, vocab, generator=g, device=ctx.device) * 2).to(torch.bfloat16)
        t = torch.ones(rows, device=ctx.device)
        none = torch.zeros(rows, dtype=torch.int64, device=ctx.device)
        k50 = torch.full((rows,), 50, dtype=torch.int64, device=ctx.device)
        p = torch.full((rows,), 0.9, device=ctx.device)
        m = torch.zeros(rows, device=ctx.device)
        seeds = torch.arange(rows, device=ctx.device)
        tau = triton_filter.filter_threshold(logits, t, none, p, m, FILTER_TOP_P)
        fp32 = logits.float()
        cell: dict[str, Any] = {
            "top-p threshold, torch sort (us)": time_us(
                ctx, lambda: filter_threshold(logits.float(), t, none, p, m, FILTER_TOP_P), max(2, iters // 4)
            ),
            "top-p threshold, radix (us)": time_us(
                ctx, lambda: triton_filter.filter_threshold(logits, t, none, p, m, FILTER_TOP_P), iters
            ),
            "min-p threshold (us)": time_us(
                ctx, lambda: triton_filter.filter_threshold(logits, t, none, p, p / 10, FILTER_MIN_P), iters
            ),
            "top-k 50 + top-p threshold (us)": time_us(
                ctx, lambda: triton_filter.filter_threshold(logits, t, k50, p, m, FILTER_TOP_K), iters
            ),
            "top-p by rejection, whole draw (us)": time_us(
                ctx, lambda: triton_top_p.top_p_by_rejection(logits, t, p, m, seeds, seeds), iters
            ),
            "threshold + race, whole draw (us)": time_us(
                ctx,
                lambda: triton_sampling.race_argmax(
                    logits, t, triton_filter.filter_threshold(logits, t, none, p, m, FILTER_TOP_P), seeds, seeds
                ),
                iters,
            ),
            "race bf16, no threshold (us)": time_us(
                ctx, lambda: triton_sampling.race_argmax(logits, t, None, seeds, seeds), iters
            ),
            "race bf16 with threshold (us)": time_us(
                ctx, lambda: triton_sampling.race_argmax(logits, t, tau, seeds, seeds), iters
            ),
            "old path: cast to fp32 + race (us)": time_us(
                ctx, lambda: triton_sampling.race_argmax(logits.float(), t, tau, seeds, seeds), iters
            ),
            "race fp32 input (us)": time_us(
                ctx, lambda: triton_sampling.race_argmax(fp32, t, tau, seeds, seeds), iters
            ),
        }
        if ctx.cuda:  # how the radix chain scales with its slicing and tile: to set the defaults from
            sweep = {}
            for block, warps in ((256, 8), (128, 4), (512, 8), (1024, 16)):
                for chunks in (4, 16, 32, 64):

                    def fn(c=chunks, b=block, w=warps):
                        return triton_filter.filter_threshold(
                            logits, t, none, p, m, FILTER_TOP_P, block=b, chunks=c, num_warps=w
                        )

                    label = f"block={block} warps={warps} slices={chunks}"
                    try:
                        sweep[label] = time_us(ctx, fn, iters)
                    except Exception as e:  # a shape the compiler rejects must not hide the others
                        sweep[label] = repr(e)[:200]
            cell["radix top-p sweep (us)"] = sweep
            cell["default slices"] = triton_filter.choose_chunks(rows, vocab, 256, triton_filter._sm_count(ctx.device))
            timed = {k: v for k, v in sweep.items() if isinstance(v, float)}
            if timed:
                cell["sweep best"] = f"{min(timed, key=timed.get)}: {min(timed.values()):.0f} us"
        res[f"rows={rows}"] = cell
        target = 60 if rows <= 16 else 300
        radix = cell["top-p threshold, radix (us)"]
        ctx.row(
            "sampling",
            f"rows={rows} top-p threshold: sort vs radix (us)",
            f"{cell['top-p threshold, torch sort (us)']:.0f} vs {radix:.0f}",
            ("ok" if radix <= target else f"over {target}")
            + f"; top-k+top-p {cell['top-k 50 + top-p threshold (us)']:.0f}; sweep best {cell.get('sweep best')}",
        )
        race = cell["race bf16 with threshold (us)"]
        ctx.row(
            "sampling",
            f"rows={rows} top-p draw (us): by rejection vs threshold + race",
            f"{cell['top-p by rejection, whole draw (us)']:.0f} vs {cell['threshold + race, whole draw (us)']:.0f}",
            "",
        )
        ctx.row(
            "sampling",
            f"rows={rows} race bf16 (us) vs old cast+race fp32",
            f"{race:.0f} vs {cell['old path: cast to fp32 + race (us)']:.0f}",
            "ok" if rows < 256 or race <= 80 else "over 80",
        )
    return res


def part_gemm(ctx) -> dict[str, Any]:
    """The engine's GEMM timing on random weights of two model shapes (no checkpoint needed)."""
    from types import SimpleNamespace

    from inferlab.engine.gemm_plan import tune_gemm_plan
    from inferlab.engine.kernels.triton_norm import silu_mul

    if not ctx.cuda:
        ctx.row("gemm", "cuBLAS vs skinny Triton GEMM", "skipped (needs CUDA)")
        return {"skipped": "needs CUDA"}
    res: dict[str, Any] = {}
    shapes = {  # hidden, q + 2 kv width, q width (the o projection's input), intermediate; 16 layers timed
        "llama-380m": (1024, 2048, 1024, 4096),
        "qwen3-0.6b": (1024, 4096, 2048, 3072),
    }
    layers = 16
    for name, (hidden, qkv, q_width, inter) in shapes.items():

        def layer():
            def w(n, k):
                return (torch.randn(n, k, device=ctx.device) * 0.02).to(torch.bfloat16)

            return SimpleNamespace(
                qkv=w(qkv, hidden),
                qkv_bias=None,
                o=w(hidden, q_width),
                gate_up=w(2 * inter, hidden),
                down=w(hidden, inter),
            )

        weights = SimpleNamespace(layers=[layer() for _ in range(layers)])
        t0 = time.perf_counter()
        plan, timings = tune_gemm_plan(weights, [16, 32, 64], silu_mul, ctx.device)
        res[name] = {"timings_us": timings, "choices": plan.describe([16, 32, 64]), "tune_s": time.perf_counter() - t0}
        for key, cell in timings.items():
            best = min(cell, key=cell.get)
            gain = cell["cublas"] / cell[best] if cell[best] > 0 else float("nan")
            ctx.row(
                "gemm",
                f"{name} {key}: cublas us | best",
                f"{cell['cublas']:.1f} | {cell[best]:.1f}",
                f"{best} ({gain:.2f}x)",
            )
        del weights
        ctx.free()
    return res
