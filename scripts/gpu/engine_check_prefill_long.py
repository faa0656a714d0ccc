"""engine_check part prefill_long: long prompts (the steering job's shape), prefill batches in queue order
against batches by prompt length (EngineConfig.prefill_by_length), on one engine.

gemma-2b (random weights), 256 slots, 512 prompts of 400-1,200 random tokens, 32 new tokens (greedy),
max_seq_len 1,250, max_prefill_tokens 8,192. Per order: a warm call (graphs captured, kernels compiled), then
a timed call: prefill_s (device clock) and prefill_host_s per batch, the tokens the forwards computed
(prefill_padded_tokens) against the prompt tokens, the call's wall time and tok/s, and on CUDA whether each
prefill batch's launch kept ahead of the device (engine_check_job.PrefillOverlap), and how many rows got
the same tokens in both orders (greedy: equal up to rounding of other batch shapes). Expected on an H100:
by length pads ~1.03x (queue order ~1.4x) and prefill_s drops about as much. Then one batch alone (host
launch vs total: is a long prefill device-bound?) and, on CUDA with budget left, by length at twice
max_prefill_tokens. --quick: tiny-gemma, 24 prompts of 20-60 tokens, 16 slots.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from engine_check_job import PrefillOverlap, overlap_row, time_admit_prefill, timed_call  # beside this file (engine_check.py puts it on sys.path)


def long_requests(n: int, vocab: int, lo: int, hi: int, new: int) -> list[Any]:
    from inferlab.types import Request, SamplingParams

    rng = random.Random(0)
    return [Request(id=f"L{i}", prompt_ids=tuple(rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))),
                    sampling=SamplingParams(temperature=0.0, max_new_tokens=new, min_new_tokens=new))
            for i in range(n)]  # fmt: skip


def part_prefill_long(ctx) -> dict[str, Any]:
    from inferlab.engine import Engine, EngineConfig

    if ctx.quick:
        preset, n, lo, hi, new, slots, max_tokens = "tiny-gemma", 24, 20, 60, 4, 16, 128
    else:
        preset, n, lo, hi, new, slots, max_tokens = "gemma-2b", 512, 400, 1200, 32, 256, 8192
    engine = Engine(EngineConfig(model=ctx.checkpoint(preset), device=str(ctx.device), max_slots=slots,
                                 max_seq_len=hi + new + 18, max_prefill_tokens=max_tokens))  # fmt: skip
    requests = long_requests(n, engine.spec.vocab_size, lo, hi, new)
    res: dict[str, Any] = {"model": preset, "prompts": n, "new_tokens": new, "slots": slots,
                           "max_prefill_tokens": engine.max_prefill_tokens, "startup": engine.stats.as_dict()}
    tokens: dict[bool, list] = {}
    for by_length in (False, True):
        label = "by_length" if by_length else "queue_order"
        engine.config = dataclasses.replace(engine.config, prefill_by_length=by_length)  # read per call (loop.py)
        timed_call(ctx, engine, requests)  # warm: this order's graph buckets captured
        if ctx.cuda:
            with PrefillOverlap(engine) as overlap:
                cell, results = timed_call(ctx, engine, requests)
            cell["overlap"] = overlap.report()
        else:
            cell, results = timed_call(ctx, engine, requests)
        s = cell["stats"]
        cell["padding"] = s["prefill_padded_tokens"] / max(s["prefill_tokens"], 1)
        tokens[by_length] = [r.token_ids for r in results]
        res[label] = cell
        ctx.row("prefill_long", f"{label}: prefill_s | wall s ({s['prefill_batches']} batches)",
                f"{s['prefill_s']:.2f} | {cell['wall_s']:.2f}", f"{cell['tok_per_s']:,.0f} tok/s")
        ctx.row("prefill_long", f"{label}: per batch device | host ms",
                f"{cell['prefill_device_ms_per_batch']:.1f} | {cell['prefill_host_ms_per_batch']:.1f}",
                f"padded {s['prefill_padded_tokens']:,} for {s['prefill_tokens']:,} prompt tokens "
                f"({cell['padding']:.2f}x)")  # fmt: skip
        if "overlap" in cell:
            overlap_row(ctx, "prefill_long", label, cell["overlap"])
    q, b = res["queue_order"]["stats"], res["by_length"]["stats"]
    # greedy rows are batch-independent up to rounding: another batch shape may pick another GEMM kernel, and
    # a random-weight model's near-ties can then flip a token; informational, not a verdict
    res["same_token_rows"] = sum(x == y for x, y in zip(tokens[False], tokens[True]))
    res["prefill_s_ratio"] = b["prefill_s"] / max(q["prefill_s"], 1e-9)
    ctx.row("prefill_long", "by length vs queue order: prefill_s | padded tokens",
            f"{res['prefill_s_ratio']:.2f}x | {b['prefill_padded_tokens'] / max(q['prefill_padded_tokens'], 1):.2f}x",
            ("ok" if b["prefill_padded_tokens"] <= q["prefill_padded_tokens"] else "FAIL") +
            f" ({res['same_token_rows']} of {n} rows with identical tokens)")  # fmt: skip
    res["isolated"] = isolated_batch(ctx, engine, requests, max_tokens)
    i = res["isolated"]
    ctx.row("prefill_long", f"one batch of {i['prompts']} prompts ({i['tokens']:,} tokens): host launch | total ms",
            f"{i['host_launch_ms']:.1f} | {i['total_ms']:.1f}", "device-bound" if i["host_launch_ms"] < 0.5 *
            i["total_ms"] else "host-bound")  # fmt: skip
    del engine
    ctx.free()
    if ctx.cuda and ctx.elapsed() < 0.8 * ctx.budget_s:  # larger batches: fewer, each as well padded
        big = Engine(EngineConfig(model=ctx.checkpoint(preset), device=str(ctx.device), max_slots=slots,
                                  max_seq_len=hi + new + 18, max_prefill_tokens=2 * max_tokens))  # fmt: skip
        timed_call(ctx, big, requests)
        cell, _ = timed_call(ctx, big, requests)
        s = cell["stats"]
        res[f"by_length_{2 * max_tokens}"] = cell
        ctx.row("prefill_long", f"by_length, max_prefill_tokens {2 * max_tokens}: prefill_s | wall s",
                f"{s['prefill_s']:.2f} | {cell['wall_s']:.2f}",
                f"{s['prefill_batches']} batches, {cell['prefill_host_ms_per_batch']:.1f} ms host each")
        del big
        ctx.free()
    return res


def isolated_batch(ctx, engine, requests, max_tokens: int) -> dict[str, Any]:
    """admit + prefill of the longest prompts that fit one batch, alone on an idle device: the host's launch
    time against the total (last of 3 repeats). Launch << total: the prefill is device-bound."""
    from inferlab.engine.intake import Prepared
    from inferlab.types import Timings

    ordered = sorted(requests, key=lambda r: -len(r.prompt_ids))
    longest = len(ordered[0].prompt_ids)
    picked = ordered[: max(1, min(engine.plan.slots, max_tokens // longest))]
    items = [Prepared(i, r, list(r.prompt_ids), r.sampling, i, [], 0, Timings()) for i, r in enumerate(picked)]
    return {"prompts": len(items), "tokens": sum(len(r.prompt_ids) for r in picked),
            **time_admit_prefill(ctx, engine.runner, items, repeats=3)}
