"""The engine's CUDA-graph path end to end on CPU: start-up captures, lazy decode variants (constrained,
steered, collecting, every filter level) under live rows, prefill graphs, shared prompts and compaction,
with a capturer that runs each "graph" eagerly. Only a CUDA device runs this path for real, so without
this test a wrong call in it (a merge once left one) shows up first on the GPU. Tokens and activations
must equal the eager engine's."""

from __future__ import annotations

import pytest
import torch

import inferlab.engine.engine as engine_module
import inferlab.engine.runner as runner_module
from inferlab.engine import Engine, EngineConfig
from inferlab.types import Collect, Request, SamplingParams, Steer
from tests.unit.engine.eager_capturer import EagerCapturer
from tests.unit.engine.test_engine_constrained import _conformer_request, small_nci_molecules

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture
def graph_path(monkeypatch):
    """Engines made inside the test take the graph path (cuda_graphs honoured on CPU, eager capturer)."""
    monkeypatch.setattr(engine_module, "graphs_wanted", lambda cuda_graphs, device: bool(cuda_graphs))
    monkeypatch.setattr(runner_module, "Capturer", EagerCapturer)


def _engines(path, **extra):
    config = dict(model=path, max_slots=4, max_seq_len=512, decode_steps_per_sync=4, min_admission=1, **extra)
    return Engine(EngineConfig(**config, cuda_graphs=False)), Engine(EngineConfig(**config, cuda_graphs=True))


def test_mixed_requests_through_the_graph_path_equal_the_eager_engine(tiny_checkpoint, graph_path):
    eager, graphed = _engines(tiny_checkpoint("tiny"))
    assert graphed.stats.cuda_graphs and graphed.runner.graphs is not None  # start-up ran runner.warm_up
    vocab = graphed.spec.vocab_size
    g = torch.Generator().manual_seed(3)
    prompt = tuple(torch.randint(3, vocab, (9,), generator=g).tolist())
    vector = torch.randn(graphed.spec.hidden_size, generator=g) * 0.5
    samplings = [dict(temperature=0.0), dict(temperature=1.0, seed=1), dict(temperature=1.0, top_p=0.8, seed=2),
                 dict(temperature=1.0, top_k=5, seed=3), dict(temperature=0.9, min_p=0.1, seed=4)]
    requests = [Request(id=f"p{i}", prompt_ids=prompt, sampling=SamplingParams(max_new_tokens=5 + i, **s))
                for i, s in enumerate(samplings)]  # one prompt: shared prompt KV
    requests += [Request(id="steer", prompt_ids=prompt[:5], sampling=SamplingParams(max_new_tokens=7, temperature=0.0),
                         steering=[Steer(0, vector, 2.0)], collect=Collect(layers=(0, 1), pool="mean"))]
    for smiles in small_nci_molecules(8, 2):
        requests.append(_conformer_request(graphed, f"c-{smiles}", smiles, temperature=1.0, seed=9)[0])
    ours = {r.id: r for r in graphed.generate(requests)}
    theirs = {r.id: r for r in eager.generate(requests)}
    for rid, result in theirs.items():
        assert result.ok, result.error
        assert ours[rid].token_ids == result.token_ids, rid
    for layer, acts in theirs["steer"].activations.items():
        torch.testing.assert_close(ours["steer"].activations[layer], acts)
    conformers = [r for r in ours.values() if r.id.startswith("c-")]
    assert conformers and all(r.ok and r.finish_reason == "eos" for r in conformers)
    assert graphed.runner.graphs.capturer.count > len(graphed.runner.graphs.graphs) - 1  # lazy captures happened
    graphed.close()
    eager.close()
