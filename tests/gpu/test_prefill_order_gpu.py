"""Prefill batches by prompt length (EngineConfig.prefill_by_length, the default) against queue order, on
one engine and one set of long prompts of varied lengths (the steering job's shape): by length computes
no more padded prefill tokens than queue order (on CUDA the batches are also padded to the prefill
graphs' buckets), and every request finishes with its tokens. Quick: tiny, 24 prompts of 20-60 tokens on
16 rows; full: gemma-2b, 512 prompts of 400-1,200 tokens on 256 rows, 8,192 prefill tokens per batch. The
job's speed: the lab's steering preset (docs/lab.md).
"""

from __future__ import annotations

import dataclasses
import random

from gpu_testkit import CPU_AND_CUDA


def long_requests(n: int, vocab: int, lo: int, hi: int, new: int) -> list:
    from inferlab.types import Request, SamplingParams

    rng = random.Random(0)
    return [Request(id=f"L{i}", prompt_ids=tuple(rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))),
                    sampling=SamplingParams(temperature=0.0, max_new_tokens=new, min_new_tokens=new))
            for i in range(n)]  # fmt: skip


@CPU_AND_CUDA
def test_prefill_by_length_pads_no_more_than_queue_order(device, size, checkpoint):
    from inferlab.engine import Engine, EngineConfig

    full = size.on(device).full
    preset, n, lo, hi, new, slots, max_tokens = ("gemma-2b", 512, 400, 1200, 32, 256, 8192) if full else (
        "tiny", 24, 20, 60, 4, 16, 128)
    config = EngineConfig(model=checkpoint(preset, device), device=device, max_slots=slots, max_seq_len=hi + new + 18,
                          max_prefill_tokens=max_tokens)
    padded = {}
    with Engine(config) as engine:
        requests = long_requests(n, engine.spec.vocab_size, lo, hi, new)
        for by_length in (False, True):
            engine.config = dataclasses.replace(engine.config, prefill_by_length=by_length)  # read per call
            before = engine.stats.prefill_padded_tokens
            results = engine.generate(requests)
            padded[by_length] = engine.stats.prefill_padded_tokens - before
            assert all(r.ok and len(r.token_ids) == new for r in results)
    assert padded[True] <= padded[False]
