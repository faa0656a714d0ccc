"""engine_check part `close`: engines made and ended in turn in one process give their memory back.

Issue 14 measured eight qwen3-0.6b engines made one after another (each dropped with `del` and
torch.cuda.empty_cache()) leaving the eighth a budget of 36.8 GiB of the card's 80. Three variants, each
engine planned as the card allows (max_slots up to 512 at max_seq_len 1024: the plan's budget is a fraction
of the free memory, so anything an earlier engine kept shows in the next one's budget and slots):
  close    8 engines, each: a short generate (every other one also a constrained request, so the constraint
           runtime and its graphs exist), then close(). Per engine: the plan's budget and slots,
           torch.cuda.memory_reserved() before the engine, with it, and after close, and whether a weakref
           to its KV cache died. Acceptance: the 8th budget within 1 GiB of the 1st; reserved after close
           within 1 GiB of before, for every engine.
  del      2 engines dropped with `del` + empty_cache() only, with the garbage collector disabled from
           their start to the measurement (a reference cycle cannot hide behind it); then gc.collect()
           and measured again (a difference names a cycle). Acceptance: as close's reserved criterion.
  abandon  2 engines whose stream is left after its first result: one dropped (`del stream, engine`),
           one closed while the stream object is still referenced. Acceptance: as close's.
On CPU (`--device cpu --quick`): the tiny checkpoint and fixed small plans; memory figures are CUDA-only, the
weakref checks hold on both. Budget: the part stops starting engines after DEADLINE_S (~2 min on an H100).
"""

from __future__ import annotations

import gc
import time
import weakref
from typing import Any

GIB = 1024**3
DEADLINE_S = 240.0
ENGINES = 8


def _reserved(ctx) -> int | None:
    import torch

    if not ctx.cuda:
        return None
    torch.cuda.synchronize(ctx.device)
    return torch.cuda.memory_reserved(ctx.device)


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / GIB, 3)


def _config(ctx, path):
    from inferlab.engine import EngineConfig

    if ctx.quick:
        return EngineConfig(model=path, device=str(ctx.device), max_slots=4, max_seq_len=512)
    return EngineConfig(model=path, device=str(ctx.device), max_slots=None, slot_cap=512, max_seq_len=1024)


def _use(engine, constrained: list[str], stream_only: bool = False):
    """A short generate (+ one constrained request per molecule given); returns what went wrong, per result.
    stream_only: start a stream of longer requests and return it after its first result (left unfinished)."""
    from engine_check_constrained import check_output, conformer_requests  # beside this file

    from inferlab.types import Request, SamplingParams

    vocab, room = engine.spec.vocab_size, engine.plan.max_seq_len - 16  # prompts are 8 tokens
    free = [Request(id=f"f{i}", prompt_ids=tuple((7 * i + j) % vocab for j in range(1, 9)),
                    sampling=SamplingParams(temperature=1.0, max_new_tokens=16, seed=i)) for i in range(8)]
    if stream_only:
        longer = [Request(id=r.id, prompt_ids=r.prompt_ids,
                          sampling=SamplingParams(max_new_tokens=min(room, 16 + 64 * i), seed=i))
                  for i, r in enumerate(free)]
        stream = engine.stream(longer)
        next(stream)
        return stream
    cases = conformer_requests(engine, constrained, 1, [dict(temperature=1.0)]) if constrained else []
    results = {r.id: r for r in engine.generate(free + [c[0] for c in cases])}
    problems = [f"{r.id}: {results[r.id].error}" for r in free if not results[r.id].ok]
    for request, template, smiles in cases:
        problem = check_output(results[request.id], template, smiles)
        if problem is not None:
            problems.append(f"{smiles}: {problem}")
    return problems


def _engine_row(ctx, variant: str, i: int, cell: dict[str, Any]) -> None:
    growth = cell.get("reserved_growth_gib")
    ok = cell["cache_freed"] and not cell["problems"] and (growth is None or growth <= 1.0)
    ctx.row("close", f"{variant} #{i + 1}: budget, slots, reserved before>with>after GiB",
            f"{_gib(cell['budget_bytes'])}, {cell['slots']}, {cell['reserved_before_gib']}>"
            f"{cell['reserved_with_gib']}>{cell['reserved_after_gib']}",
            ("ok" if ok else "FAIL") + f" cache freed={cell['cache_freed']}" + "".join(f"; {p}" for p in cell["problems"][:1]))


def _one(ctx, path, variant: str, i: int, molecules: list[str]) -> dict[str, Any]:
    import torch

    from inferlab.engine import Engine

    before = _reserved(ctx)
    t0 = time.perf_counter()
    collector_was_on = gc.isenabled()
    if variant != "close":
        gc.disable()  # from the engine's start: a cycle made at any point must not be collected for us
    try:
        engine = Engine(_config(ctx, path))
        start_s = time.perf_counter() - t0
        cell: dict[str, Any] = {"budget_bytes": engine.plan.budget_bytes, "slots": engine.plan.slots,
                                "max_seq_len": engine.plan.max_seq_len, "start_s": round(start_s, 2)}
        cache = weakref.ref(engine.runner.cache.k)
        stream = None
        if variant == "abandon":
            stream = _use(engine, [], stream_only=True)
            cell["problems"] = []
        else:
            cell["problems"] = _use(engine, molecules if i % 2 == 0 else [])
            cell["constrained"] = bool(molecules) and i % 2 == 0
        with_engine = _reserved(ctx)
        if variant == "close" or (variant == "abandon" and i % 2 == 1):
            engine.close()  # the abandoned stream (if any) is still referenced here
            cell["cache_freed_by_close"] = cache() is None  # the engine object is still referenced too
            cell["ended_by"] = "close" + (" with a live stream" if stream is not None else "")
        else:
            cell["ended_by"] = "del" + (" (stream abandoned)" if stream is not None else "")
        del engine, stream
        if ctx.cuda:
            torch.cuda.empty_cache()
        cell["cache_freed"] = cache() is None
        after = _reserved(ctx)
    finally:
        if collector_was_on:
            gc.enable()
    if variant != "close":
        gc.collect()
        if ctx.cuda:
            torch.cuda.empty_cache()
        cell["cache_freed_after_gc_collect"] = cache() is None
        cell["reserved_after_gc_collect_gib"] = _gib(_reserved(ctx))
    cell |= {"reserved_before_gib": _gib(before), "reserved_with_gib": _gib(with_engine),
             "reserved_after_gib": _gib(after),
             "reserved_growth_gib": None if before is None else _gib(after - before)}
    if ctx.cuda:
        free, total = torch.cuda.mem_get_info(ctx.device)
        cell |= {"free_after_gib": _gib(free), "total_gib": _gib(total)}
    return cell


def part_close(ctx) -> dict[str, Any]:
    from engine_check_constrained import nci_molecules  # beside this file

    started = time.perf_counter()
    preset = "tiny" if ctx.quick else "qwen3-0.6b"  # tiny: the built-in tokenizer's small vocabulary, fast on CPU
    path = ctx.checkpoint(preset)
    molecules = nci_molecules(1, 8)
    res: dict[str, Any] = {"preset": preset, "engines": {}}
    plan = [("close", i) for i in range(ENGINES)] + [("del", i) for i in range(2)] + [("abandon", i) for i in range(2)]
    for variant, i in plan:
        if time.perf_counter() - started > DEADLINE_S:
            res["stopped_early"] = f"deadline of {DEADLINE_S:.0f} s reached before {variant} #{i + 1}"
            ctx.row("close", "stopped early", res["stopped_early"], "FAIL")
            break
        key = f"{variant}-{i + 1}"
        try:
            cell = _one(ctx, path, variant, i, molecules)
        except Exception as e:  # one engine's failure must not lose the others' figures
            res["engines"][key] = {"error": f"{type(e).__name__}: {e}"}
            ctx.row("close", f"{variant} #{i + 1}", f"{type(e).__name__}: {str(e)[:80]}", "FAIL")
            continue
        res["engines"][key] = cell
        _engine_row(ctx, variant, i, cell)
    closes = [res["engines"].get(f"close-{i + 1}", {}) for i in (0, ENGINES - 1)]
    if all("budget_bytes" in c for c in closes):
        drift = (closes[0]["budget_bytes"] - closes[1]["budget_bytes"]) / GIB
        res["budget_drift_gib"] = round(drift, 3)
        verdict = "n/a on CPU (host memory moves)" if not ctx.cuda else ("ok" if abs(drift) <= 1.0 else "FAIL")
        ctx.row("close", f"budget of engine 1 - engine {ENGINES} (GiB, <= 1)", round(drift, 3), verdict)
    res["seconds"] = round(time.perf_counter() - started, 1)
    return res
