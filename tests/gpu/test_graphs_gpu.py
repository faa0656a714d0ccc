"""CUDA-graph replay against eager steps: the very same kernels, so the very same tokens.

Both engines use cuBLAS for every projection (the GEMM plan is timed per engine and two engines may choose
differently, which changes rounding, not the graphs). Sixteen requests (greedy, top-p, min-p, plain
sampling) of 64-token prompts on 16 rows: one prefill of 16 lanes x 64 on both engines, so any difference
is the graphs'; the graph engine's prefill must come from a prefill graph captured for these requests
(Gemma 2/3: the windowed / soft-capped attention inside the capture, windows cutting into the prompt).
Quick: tiny, tiny-gemma2, tiny-gemma3; full: + llama-380m.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from gpu_testkit import CUDA_ONLY, free_device_memory, random_requests, rel_err

pytestmark = CUDA_ONLY
SAMPLINGS = [dict(temperature=0.0), dict(temperature=1.0, top_p=0.9), dict(temperature=0.8, min_p=0.1),
             dict(temperature=1.0)]


@pytest.mark.parametrize("preset", ["tiny", "tiny-gemma2", "tiny-gemma3", "llama-380m"])
def test_graph_replay_gives_the_eager_tokens(preset, size, checkpoint):
    from inferlab.engine import Engine, EngineConfig

    if preset == "llama-380m" and not size.full:
        pytest.skip("full size only (--gpu-size full)")
    tokens, new_prefill_graphs = {}, 0
    for graphs in (True, False):
        config = EngineConfig(model=checkpoint(preset), max_slots=16, max_seq_len=192, cuda_graphs=graphs,
                              gemm="cublas")
        with Engine(config) as engine:
            vocab = engine.spec.vocab_size
            requests = [r for seed, sampling in enumerate(SAMPLINGS)
                        for r in random_requests(4, 64, vocab, prompt_len=64, seed=seed, **sampling)]  # fmt: skip
            at_startup = engine.stats.prefill_graphs
            tokens[graphs] = [r.token_ids for r in engine.generate(requests)]
            if graphs:
                new_prefill_graphs = engine.stats.prefill_graphs - at_startup
        free_device_memory()
    assert new_prefill_graphs > 0, "the requests' prefills ran eagerly"
    differing = [i for i, (a, b) in enumerate(zip(tokens[True], tokens[False])) if a != b]
    assert differing == []


def test_steered_and_collecting_graphs_equal_eager_with_a_capture_between_chunks(checkpoint):
    """Steered / collecting variants captured on first use, here while a just-admitted row is live (one slot
    per request wave), give the eager engine's tokens and activations."""
    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Collect, Steer

    path = checkpoint("tiny")
    vector = torch.randn(64, generator=torch.Generator().manual_seed(5))
    steer_collect = [dict(), dict(steering=(Steer(1, vector, 4.0),)), dict(collect=Collect((0, -1), "mean")),
                     dict(steering=(Steer(-1, vector, -2.0),), collect=Collect((1,), "all"))]
    outputs = []
    for graphs in (True, False):
        with Engine(EngineConfig(model=path, max_slots=2, max_seq_len=256, cuda_graphs=graphs, gemm="cublas")) as engine:
            assert engine.spec.hidden_size == vector.numel()
            plain = random_requests(4, 40, engine.spec.vocab_size, prompt_len=12, temperature=1.0)
            outputs.append(engine.generate([dataclasses.replace(r, **t) for r, t in zip(plain, steer_collect)]))
        free_device_memory()
    for ours, eager in zip(*outputs):
        assert ours.ok and ours.token_ids == eager.token_ids, ours.id
        assert (ours.activations is None) == (eager.activations is None)
        for layer, value in (ours.activations or {}).items():
            assert rel_err(value, eager.activations[layer]) < 1e-3, (ours.id, layer)
