"""engine_check parts on speed: attention options, end-to-end throughput, batching modes, profile, compile.

Throughput protocol: start-up (load, warm-up, graph capture) is reported apart; each cell runs a short
warm-up generate first, then one timed generate of exactly `new_tokens` tokens per row (ignore_eos,
min = max), synchronised before and after. tok/s = tokens returned / wall time of generate (prefill and
host work included). ms/step and achieved GB/s come from the engine's device-clock decode time:
GB/s = (weights + each row's live KV) bytes read per step, summed / decode seconds.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

PROMPT_LEN = 48


def _requests(n: int, new_tokens: int | list[int], vocab: int, seed: int = 0, **sampling):
    from inferlab.types import Request, SamplingParams

    g = torch.Generator().manual_seed(seed)
    lengths = new_tokens if isinstance(new_tokens, list) else [new_tokens] * n
    return [
        Request(id=f"r{i}", prompt_ids=tuple(torch.randint(10, min(vocab, 1000), (PROMPT_LEN,), generator=g).tolist()),
                sampling=SamplingParams(max_new_tokens=lengths[i], min_new_tokens=lengths[i], ignore_eos=True,
                                        seed=seed * 100_000 + i, **sampling))
        for i in range(n)
    ]


def _timed(ctx, engine, requests) -> dict[str, Any]:
    before = dataclasses.replace(engine.stats)
    ctx.sync()
    t0 = time.perf_counter()
    results = engine.generate(requests)
    ctx.sync()
    wall = time.perf_counter() - t0
    after = engine.stats
    tokens = sum(len(r.token_ids) for r in results)
    decode_s = after.decode_s - before.decode_s
    steps = after.decode_steps - before.decode_steps
    decode_bytes = after.decode_bytes - before.decode_bytes
    expected = sum(r.sampling.max_new_tokens for r in requests)
    return {
        "requests": len(requests), "tokens": tokens, "tokens_expected": expected, "wall_s": wall,
        "tok_per_s": tokens / wall, "decode_steps": steps, "decode_s": decode_s,
        "ms_per_step": 1e3 * decode_s / max(steps, 1), "prefill_s": after.prefill_s - before.prefill_s,
        "row_steps": after.row_steps - before.row_steps, "syncs": after.syncs - before.syncs,
        "gb_per_s": decode_bytes / decode_s / 1e9 if decode_s > 0 else 0.0,
        "errors": sum(not r.ok for r in results),
    }


def _engine(ctx, preset: str, slots: int, new_tokens: int, **options):
    from inferlab.engine import Engine, EngineConfig

    config = EngineConfig(model=ctx.checkpoint(preset), device=str(ctx.device), max_slots=slots,
                          max_seq_len=PROMPT_LEN + new_tokens + 8, decode_text=False, **options)
    return Engine(config)


def _startup_row(ctx, part: str, name: str, engine) -> dict[str, Any]:
    s = engine.stats
    ctx.row(part, f"{name} start-up: load / warm-up / capture (s), graphs",
            f"{s.load_s:.1f} / {s.warmup_s:.1f} / {s.capture_s:.1f}, {s.graphs}")
    return s.as_dict()


def _speed_verdict(ctx, cell: dict[str, Any]) -> str:
    pct = 100 * cell["gb_per_s"] / ctx.copy_gb_per_s if ctx.copy_gb_per_s else 0.0
    cell["pct_of_copy_bandwidth"] = pct
    bad = cell["errors"] or cell["tokens"] != cell["tokens_expected"]
    return ("FAIL: wrong token count " if bad else "") + f"{cell['ms_per_step']:.3f} ms/step, {cell['gb_per_s']:.0f} GB/s ({pct:.0f}%)"


def part_speed(ctx) -> dict[str, Any]:
    res: dict[str, Any] = {}
    new_tokens = 24 if ctx.quick else 1000
    batches = [2, 4, 8] if ctx.quick else [16, 64, 256]
    preset = "tiny" if ctx.quick else "llama-380m"
    engine = _engine(ctx, preset, max(batches), new_tokens)
    res["startup"] = _startup_row(ctx, "speed", preset, engine)
    modes = {"top_p0.9_t1": dict(temperature=1.0, top_p=0.9), "t1": dict(temperature=1.0)}
    for mode, sampling in modes.items():
        for batch in batches:
            vocab = engine.spec.vocab_size
            _timed(ctx, engine, _requests(batch, 16, vocab, seed=7, **sampling))  # warm-up
            cell = _timed(ctx, engine, _requests(batch, new_tokens, vocab, **sampling))
            res[f"{preset} B={batch} {mode}"] = cell
            ctx.row("speed", f"{preset} B={batch} {mode} tok/s", cell["tok_per_s"], _speed_verdict(ctx, cell))
    del engine
    ctx.free()
    preset = "tiny-qwen3" if ctx.quick else "qwen3-0.6b"
    batch = 4 if ctx.quick else 256
    engine = _engine(ctx, preset, batch, new_tokens)
    res["qwen3_startup"] = _startup_row(ctx, "speed", preset, engine)
    sampling = modes["top_p0.9_t1"]
    _timed(ctx, engine, _requests(batch, 16, engine.spec.vocab_size, seed=7, **sampling))
    cell = _timed(ctx, engine, _requests(batch, new_tokens, engine.spec.vocab_size, **sampling))
    res[f"{preset} B={batch} top_p0.9_t1"] = cell
    ctx.row("speed", f"{preset} B={batch} top_p0.9_t1 tok/s", cell["tok_per_s"], _speed_verdict(ctx, cell))
    return res


def part_batching(ctx) -> dict[str, Any]:
    res: dict[str, Any] = {}
    n, slots, low, high = (24, 6, 4, 24) if ctx.quick else (512, 128, 200, 1000)
    preset = "tiny" if ctx.quick else "llama-380m"
    g = torch.Generator().manual_seed(11)
    lengths = torch.randint(low, high + 1, (n,), generator=g).tolist()
    for mode in ("static", "continuous"):
        # outputs of 4-24 tokens in the quick run need finer sync points than 200-1000 on the device
        engine = _engine(ctx, preset, slots, high, batching=mode, decode_steps_per_sync=4 if ctx.quick else 16)
        vocab = engine.spec.vocab_size
        _timed(ctx, engine, _requests(slots, 8, vocab, seed=7, temperature=1.0))
        cell = _timed(ctx, engine, _requests(n, lengths, vocab, temperature=1.0))
        cell["row_utilisation"] = cell["tokens"] / max(cell["row_steps"], 1)
        res[mode] = cell
        ctx.row("batching", f"{preset} {n} requests, {slots} slots, {mode}: tok/s", cell["tok_per_s"],
                f"{cell['decode_steps']} steps, rows busy {100 * cell['row_utilisation']:.0f}%")
        del engine
        ctx.free()
    gain = res["continuous"]["tok_per_s"] / res["static"]["tok_per_s"]
    res["continuous_over_static"] = gain
    steps = f"decode steps {res['static']['decode_steps']} -> {res['continuous']['decode_steps']}"
    ctx.row("batching", "continuous / static throughput", gain, ("ok, " if gain > 1 else "FAIL: not faster, ") + steps)
    return res


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
    out = torch.nn.functional.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=mask[:, None, None], scale=scale)
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
            "triton n32": dict(block_n=32), "triton n128": dict(block_n=128), "triton w8": dict(num_warps=8),
            "triton w2": dict(num_warps=2), "triton stages3": dict(num_stages=3), "triton stages1": dict(num_stages=1),
            "triton n128 w8 s3": dict(block_n=128, num_warps=8, num_stages=3),
        }
    iters = 3 if ctx.quick else 20
    for rows in ([4, 16] if ctx.quick else [16, 64, 256]):
        low, high = (8, 200) if ctx.quick else (PROMPT_LEN, PROMPT_LEN + 1000)
        lengths = torch.randint(low, high + 1, (rows,), generator=g, device=ctx.device)
        slots = torch.randperm(slots_total, generator=g, device=ctx.device)[:rows]
        q = torch.randn(rows, heads, head_dim, generator=g, device=ctx.device).to(dtype)
        scale = head_dim**-0.5
        kv_bytes = int(lengths.sum()) * 2 * kv_heads * head_dim * k_cache.element_size()
        ref = decode_attention_torch(q, k_cache, v_cache, slots, lengths, scale)
        variants = {name: (lambda kw=kw: triton_attention.decode_attention(q, k_cache, v_cache, slots, lengths, scale, **kw))
                    for name, kw in configs.items()}
        hint = int(lengths.max())
        variants["torch masked, whole cache"] = lambda: decode_attention_torch(q, k_cache, v_cache, slots, lengths, scale)
        variants["torch, live length"] = lambda: decode_attention_torch(q, k_cache, v_cache, slots, lengths, scale, hint)
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
        ctx.row("attention", f"rows={rows} triton auto: us/layer, GB/s", f"{auto.get('us', float('nan')):.1f}, "
                f"{auto.get('gb_per_s', float('nan')):.0f}", f"best: {best} {timed[best]['us']:.1f} us")
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
    ops = select_ops("auto" if ctx.cuda else "triton", ctx.device, torch.bfloat16)
    g = torch.Generator(device=ctx.device).manual_seed(1)
    for rows in ([4] if ctx.quick else [16, 64, 256]):
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
            "top-p threshold, torch sort (us)": _time_us(ctx, lambda: filter_threshold(logits, t, k, p, m, FILTER_SORT), iters),
            "top-p threshold, radix kernel (us)": _time_us(ctx, lambda: ops.filter_threshold(logits, t, k, p, m, FILTER_SORT),
                                                            iters),
            "min-p threshold (us)": _time_us(ctx, lambda: ops.filter_threshold(logits, t, k, p, p / 10, FILTER_MIN_P), iters),
            "race, no threshold (us)": _time_us(ctx, lambda: ops.race_argmax(logits, t, None, seeds, seeds, greedy), iters),
            "race with threshold (us)": _time_us(ctx, lambda: ops.race_argmax(logits, t, tau, seeds, seeds, greedy), iters),
            "logits bf16->fp32 copy (us)": _time_us(ctx, lambda: logits.to(torch.bfloat16).float(), iters),
        }
        if ctx.cuda:  # a small sweep of the radix kernel's shape, to pick its defaults from
            from inferlab.engine.kernels.triton_filter import filter_threshold as radix

            sweep = {}
            for block, warps, digits in [(512, 4, 4), (2048, 4, 4), (1024, 8, 4), (2048, 8, 4), (512, 8, 8)]:
                fn = (lambda b=block, w=warps, d=digits: radix(logits, t, k, p, m, FILTER_SORT, key_bits=16, block=b,
                                                               num_warps=w, digit_bits=d))
                try:
                    sweep[f"block={block} warps={warps} digit_bits={digits}"] = _time_us(ctx, fn, iters)
                except Exception as e:  # a shape the compiler rejects must not hide the others
                    sweep[f"block={block} warps={warps} digit_bits={digits}"] = repr(e)
            cell["radix sweep (us)"] = sweep
        res[f"rows={rows}"] = cell
        ctx.row("sampling", f"rows={rows} top-p threshold: sort vs radix kernel (us)",
                f"{cell['top-p threshold, torch sort (us)']:.0f} vs {cell['top-p threshold, radix kernel (us)']:.0f}",
                f"race {cell['race with threshold (us)']:.0f} us")
    return res


def _kernel_table(prof, steps: int, top: int = 15) -> list[dict[str, Any]]:
    from torch.autograd import DeviceType

    table = []
    for evt in prof.key_averages():
        if getattr(evt, "device_type", None) != DeviceType.CUDA:  # kernels only: CPU ops would count twice
            continue
        device_us = getattr(evt, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(evt, "self_cuda_time_total", 0.0)
        if device_us and device_us > 0:
            table.append({"kernel": evt.key[:90], "us_per_step": device_us / steps, "calls_per_step": evt.count / steps})
    table.sort(key=lambda r: -r["us_per_step"])
    return table[:top] + [{"kernel": "(all)", "us_per_step": sum(r["us_per_step"] for r in table),
                           "calls_per_step": sum(r["calls_per_step"] for r in table)}]


def part_profile(ctx) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    from inferlab.engine.intake import Prepared
    from inferlab.engine.sampler import FILTER_NONE, FILTER_SORT
    from inferlab.types import Request, SamplingParams, Timings

    res: dict[str, Any] = {}
    preset = "tiny" if ctx.quick else "llama-380m"
    cells = [(4, FILTER_SORT)] if ctx.quick else [(16, FILTER_SORT), (256, FILTER_SORT), (256, FILTER_NONE)]
    engine = _engine(ctx, preset, max(b for b, _ in cells), 24 if ctx.quick else 1000)
    runner = engine.runner
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.cuda else [])
    for batch, level in cells:
        sampling = SamplingParams(temperature=1.0, top_p=0.9 if level == FILTER_SORT else 1.0, max_new_tokens=900 if
                                  not ctx.quick else 20, ignore_eos=True)
        items = [Prepared(i, Request(id=f"p{i}", prompt_ids=(1,)), list(range(10, 10 + PROMPT_LEN)), sampling, i, [], 0,
                          Timings()) for i in range(batch)]
        with torch.inference_mode():
            runner.admit(range(batch), items)
            runner.prefill(range(batch), items)
            runner.decode(batch, level, 4, PROMPT_LEN + 1)
            name = f"B={batch} level={level}"
            graph_us = _time_us(ctx, lambda: runner.decode(batch, level, 1, None), 10 if ctx.quick else 50) \
                if runner.graphs is not None else None
            steps = 3 if ctx.quick else 5
            with profile(activities=activities) as prof:
                for _ in range(steps):
                    runner.decode_step(batch, level, None)
                ctx.sync()
            runner.release(range(batch))
        table = _kernel_table(prof, steps) if ctx.cuda else []
        res[name] = {"graph_step_us": graph_us, "kernels": table}
        if ctx.cuda:
            total = table[-1]
            ctx.row("profile", f"{preset} {name}: graph step us | kernel us (calls)",
                    f"{graph_us:.0f} | {total['us_per_step']:.0f} ({total['calls_per_step']:.0f})")
            for r in table[:3]:
                ctx.row("profile", f"  {r['kernel'][:54]}", f"{r['us_per_step']:.1f} us x{r['calls_per_step']:.0f}")
        else:
            ctx.row("profile", f"{preset} {name}", "cpu: profiled (no device kernels)")
    return res


def part_compile(ctx) -> dict[str, Any]:
    if not ctx.cuda:
        ctx.row("compile", "torch.compile knob", "skipped (CPU run)")
        return {"skipped": "CPU run"}
    if ctx.elapsed() > ctx.budget_s - 150:
        ctx.row("compile", "torch.compile knob", f"skipped: {ctx.elapsed():.0f} s used of the {ctx.budget_s:.0f} s budget")
        return {"skipped": "time budget"}
    res: dict[str, Any] = {}
    for compiled in (False, True):
        t0 = time.perf_counter()
        engine = _engine(ctx, "llama-380m", 16, 1000, compile=compiled)
        res[f"compile={compiled} startup_s"] = time.perf_counter() - t0
        res[f"compile={compiled} stats"] = engine.stats.as_dict()
        sampling = dict(temperature=1.0, top_p=0.9)
        _timed(ctx, engine, _requests(16, 16, engine.spec.vocab_size, seed=7, **sampling))
        cell = _timed(ctx, engine, _requests(16, 1000, engine.spec.vocab_size, **sampling))
        res[f"compile={compiled}"] = cell
        ctx.row("compile", f"llama-380m B=16 compile={compiled}: tok/s", cell["tok_per_s"],
                f"{cell['ms_per_step']:.3f} ms/step; warm-up {engine.stats.warmup_s:.1f} s")
        del engine
        ctx.free()
    return res
