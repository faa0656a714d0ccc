"""Engines made and ended in turn in one process give their device memory back.

Each engine is planned as the card allows (slots up to 512 at max_seq_len 512 (the tiny model's limit): the plan's budget is a
fraction of the free memory, so anything an earlier engine kept shows in the next one's budget), used
(a short generate; every other one also a constrained request, so the constraint runtime and its graphs
exist), then ended three ways: close(); `del` + empty_cache() with the garbage collector off from the
engine's start (a reference cycle cannot hide behind it); a stream left after its first result, then
dropped, or closed while the stream is still referenced. After each: its KV cache tensor is freed and
torch.cuda.memory_reserved() is back within 1 GiB of before; the last closed engine's budget is within
1 GiB of the first's. Quick: tiny, 4 closed engines; full: qwen3-0.6b, 8. On CPU (no memory figures):
tests/unit/engine/test_engine_close.py.
"""

from __future__ import annotations

import gc
import weakref

import torch
from gpu_conformers import conformer_cases, invalid_outputs, nci_molecules
from gpu_testkit import CUDA_ONLY

pytestmark = CUDA_ONLY
GIB = 1024**3


def reserved() -> int:
    torch.cuda.synchronize()
    return torch.cuda.memory_reserved()


def use(engine, molecules: list[str]) -> None:
    """A short generate of 8 free requests (+ one constrained request per molecule), every result valid."""
    from inferlab.types import Request, SamplingParams

    vocab = engine.spec.vocab_size
    free = [Request(id=f"f{i}", prompt_ids=tuple((7 * i + j) % vocab for j in range(1, 9)),
                    sampling=SamplingParams(temperature=1.0, max_new_tokens=16, seed=i)) for i in range(8)]  # fmt: skip
    cases = conformer_cases(engine.tokenizer, molecules, 1, [dict(temperature=1.0)])
    results = engine.generate(free + [c.request for c in cases])
    assert all(r.ok for r in results[: len(free)]), [r.error for r in results if not r.ok]
    assert invalid_outputs(results, cases) == []


def abandoned_stream(engine):
    """A stream of longer requests, left after its first result."""
    from inferlab.types import Request, SamplingParams

    room = engine.plan.max_seq_len - 16
    stream = engine.stream([Request(id=f"s{i}", prompt_ids=tuple(range(3, 11)),
                                    sampling=SamplingParams(max_new_tokens=min(room, 16 + 64 * i), seed=i))
                            for i in range(8)])  # fmt: skip
    next(stream)
    return stream


def make_use_and_end(path, how: str, molecules: list[str]) -> dict:
    from inferlab.engine import Engine, EngineConfig

    before = reserved()
    collector_was_on = gc.isenabled()
    if how != "close":
        gc.disable()  # from the engine's start: a cycle made at any point must not be collected for us
    try:
        engine = Engine(EngineConfig(model=path, max_slots=None, slot_cap=512, max_seq_len=512))
        budget, cache = engine.plan.budget_bytes, weakref.ref(engine.runner.cache.k)
        stream = abandoned_stream(engine) if how.startswith("abandon") else None
        if stream is None:
            use(engine, molecules)
        if how in ("close", "abandon-close"):
            engine.close()  # the engine object (and the stream, if any) still referenced here
        del engine, stream
        torch.cuda.empty_cache()
        freed, after = cache() is None, reserved()
    finally:
        if collector_was_on:
            gc.enable()
    return {"budget": budget, "freed": freed, "growth": after - before}


def test_engines_made_and_ended_in_turn_give_their_memory_back(size, checkpoint):
    path = checkpoint(size.pick("tiny", "qwen3-0.6b"))
    molecules = nci_molecules(1, 8)
    engines = size.pick(4, 8)
    plan = ["close"] * engines + ["del", "del", "abandon-del", "abandon-close"]
    cells = [make_use_and_end(path, how, molecules if i % 2 == 0 else []) for i, how in enumerate(plan)]
    for how, cell in zip(plan, cells):
        assert cell["freed"], f"{how}: the KV cache outlived the engine"
        assert cell["growth"] <= GIB, f"{how}: memory_reserved grew by {cell['growth'] / GIB:.2f} GiB"
    assert abs(cells[0]["budget"] - cells[engines - 1]["budget"]) <= GIB
