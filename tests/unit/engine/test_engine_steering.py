"""Steering and collection on a tiny checkpoint (CPU): intake refusals as error Results, named vector sets,
the device table's sharing and eviction, the variants the decode chunks run, compaction."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from safetensors.torch import save_file

from inferlab.engine import Engine, EngineConfig, SteeringVectors
from inferlab.engine.forwards.registry import forward_class
from inferlab.engine.steering import SteeringTable, resolve_steering
from inferlab.errors import ConfigError, InputError
from inferlab.models.registry import ARCHITECTURES
from inferlab.types import Collect, Request, SamplingParams, Steer

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=6)
HIDDEN = 64  # the tiny preset


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=2, max_seq_len=48, decode_steps_per_sync=2,
                               max_steered_layers=2))


def _req(rid, steering=(), collect=None, prompt=(5, 6, 7)):
    return Request(id=rid, prompt_ids=prompt, sampling=GREEDY, steering=steering, collect=collect)


def test_bad_steering_and_collection_become_error_results(engine):
    v = torch.randn(HIDDEN)
    nan = v.clone()
    nan[3] = math.nan
    cases = {
        "layer": ([Steer(2, v, 1.0)], None, "steering layer 2 is out of range: the model has decoder layers 0..1"),
        "neg-layer": ([Steer(-3, v, 1.0)], None, "out of range"),
        "length": ([Steer(0, torch.randn(32), 1.0)], None, "needs [64] (its hidden size)"),
        "nan": ([Steer(0, nan, 1.0)], None, "NaN or inf at index 3"),
        "int": ([Steer(0, torch.arange(HIDDEN), 1.0)], None, "dtype is torch.int64; give floating-point values"),
        "twice": ([Steer(0, v, 1.0), Steer(-2, v, 2.0)], None, "two steering entries for layer 0"),
        "many": ([Steer(0, v), Steer(1, v), (0, v, 1.0)], None, "exceed max_steered_layers=2"),
        "scale": ([Steer(0, v, math.inf)], None, "must be a finite number"),
        "overflow": ([Steer(0, v * 1e37, 1e3)], None, "overflows torch.float32; use a smaller scale"),
        "name": ([Steer(0, "nope", 1.0)], None, "no registered steering vector is named 'nope'"),
        "bare": (Steer(0, v, 1.0), None, "must be a sequence of Steer"),
        "junk": (["x"], None, "steering entry 0 is a str"),
        "collect-type": ((), ("mean",), "Request.collect must be a Collect"),
        "collect-layer": ((), Collect((5,)), "collect layer 5 is out of range"),
    }
    requests = [_req("ok1", [Steer(0, v, 0.5)])]
    requests += [_req(rid, steering, collect) for rid, (steering, collect, _) in cases.items()]
    requests += [_req("ok2", collect=Collect((1,), "last"))]
    results = {r.id: r for r in engine.generate(requests)}
    assert results["ok1"].ok and results["ok2"].ok and results["ok2"].activations[1].shape == (HIDDEN,)
    for rid, (_, _, message) in cases.items():
        assert results[rid].finish_reason == "error" and message in results[rid].error, (rid, results[rid].error)


def test_collect_and_vector_sets_refuse_bad_input_with_the_fix(engine, tmp_path):
    with pytest.raises(ConfigError, match="names a layer twice"):
        Collect((1, 1))
    with pytest.raises(ConfigError, match="not one of last, mean, all"):
        Collect((1,), "max")
    with pytest.raises(ConfigError, match="applies to pool='all' only"):
        Collect((1,), "mean", max_tokens=4)
    with pytest.raises(InputError, match="does not exist"):
        SteeringVectors.load(tmp_path / "missing.safetensors")
    save_file({"ints": torch.arange(4)}, str(tmp_path / "ints.safetensors"))
    with pytest.raises(InputError, match="store a floating-point tensor"):
        SteeringVectors.load(tmp_path / "ints.safetensors")
    with pytest.raises(InputError, match="shape"):
        SteeringVectors({"cube": torch.zeros(2, 2, 2)})
    with pytest.raises(InputError, match="different hidden sizes"):
        SteeringVectors({"a": torch.zeros(4), "b": torch.zeros(5)})
    with pytest.raises(ConfigError, match="hidden size is 64"):
        engine.add_steering_vectors(SteeringVectors({"small": torch.zeros(8)}))
    engine.add_steering_vectors(SteeringVectors({"dup": torch.ones(HIDDEN)}))
    engine.add_steering_vectors(SteeringVectors({"dup": torch.ones(HIDDEN)}))  # the same values: fine
    with pytest.raises(ConfigError, match="already registered"):
        engine.add_steering_vectors(SteeringVectors({"dup": torch.zeros(HIDDEN)}))
    layered = SteeringVectors({"per_layer": torch.zeros(3, HIDDEN)}, source="x.safetensors")
    engine.add_steering_vectors(layered)
    [result] = engine.generate([_req("rows", [Steer(0, "per_layer", 1.0)])])
    assert "has 3 rows (one per layer) but the model has 2 decoder layers" in result.error


def test_equal_vectors_share_a_slot_and_unused_ones_are_evicted_least_recent_first():
    def entries(*values):
        found = resolve_steering([Steer(i, torch.full((4,), float(v)), 1.0) for i, v in enumerate(values)], {}, 2, 4,
                                 torch.float32, 2)
        assert not isinstance(found, str)
        return found

    table = SteeringTable(rows=2, num_layers=2, capacity=3, hidden=4, dtype=torch.float32, device=torch.device("cpu"))
    table.assign([0, 1], [entries(1.0), entries(1.0, 2.0)])  # 1.0 shared by both rows
    assert table.index.tolist() == [[0, -1], [0, 1]]
    table.release([0, 1])
    table.assign([0], [entries(3.0)])  # a fresh slot first; cached vectors stay
    assert table.index[0].tolist() == [2, -1]
    # 4.0 evicts the least recently released vector (1.0 in slot 0), then 1.0 comes back by evicting 2.0
    table.assign([1], [entries(4.0, 1.0)])
    assert table.index[1].tolist() == [0, 1]
    assert torch.equal(table.vectors[0], torch.full((4,), 4.0)) and torch.equal(table.vectors[1], torch.ones(4))
    assert torch.equal(table.vectors[2], torch.full((4,), 3.0))  # row 0's vector is referenced: untouched


def test_batches_without_steered_rows_run_the_plain_variant(engine, monkeypatch):
    seen = []
    decode = engine.runner.decode
    monkeypatch.setattr(engine.runner, "decode", lambda plan: (seen.append(plan.variant), decode(plan)))
    v = torch.randn(HIDDEN)
    engine.generate([_req("plain", prompt=(9,))])
    assert {(x.steered, x.collecting) for x in seen} == {(False, False)}
    seen.clear()
    engine.generate([_req("s", [Steer(1, v, 0.5)]), _req("c", collect=Collect((0,)))])
    assert (True, True) in {(x.steered, x.collecting) for x in seen}


def test_compaction_moves_steering_and_collection_with_the_row(tiny_checkpoint):
    """A long steered row in row 1 moves to row 0 when row 0's request ends: its tokens and activations
    equal the same request run alone (up to the rounding of a two-prompt prefill)."""
    engine = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=2, max_seq_len=48, decode_steps_per_sync=2))
    v = torch.randn(HIDDEN, generator=torch.Generator().manual_seed(4))
    long = Request(id="long", prompt_ids=(11, 12), sampling=SamplingParams(temperature=0.0, max_new_tokens=16),
                   steering=(Steer(0, v, 0.7),), collect=Collect((0, 1), "all"))
    # the short request's prompt is the longer one: prefill batches by length put it in row 0
    short = Request(id="short", prompt_ids=(3, 4, 5), sampling=SamplingParams(temperature=0.0, max_new_tokens=2))
    moves = engine.stats.row_moves
    crowded = engine.generate([short, long])[1]
    assert engine.stats.row_moves > moves
    alone = engine.generate([long])[0]
    assert crowded.token_ids == alone.token_ids
    for layer in (0, 1):
        torch.testing.assert_close(crowded.activations[layer], alone.activations[layer], atol=1e-4, rtol=0)


def test_every_engine_forward_has_the_steering_point():
    """Each model class the registry names takes `residual_hooks` in prefill and decode (the runner always passes it),
    and `out` in prefill (the prefill graphs' static logits buffer, prefill_graphs.py)."""
    for model_class in {forward_class(architecture) for architecture in ARCHITECTURES}:
        for entry in (model_class.prefill, model_class.decode):
            assert "residual_hooks" in inspect.signature(entry).parameters, (model_class.__name__, entry.__name__)
        assert "out" in inspect.signature(model_class.prefill).parameters, model_class.__name__
