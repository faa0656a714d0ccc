"""Engine.close(), `with Engine(...)`, and an engine dropped without close (CPU): the big buffers die.

Buffers are watched through weakrefs with the garbage collector disabled, so a reference cycle cannot hide
behind it: a buffer is dead only if plain reference counting freed it. One engine is built first, so the
one-off garbage of first imports (transformers' dependencies keep import-time frames in cycles) is gone
before the collector stops."""

from __future__ import annotations

import gc
import weakref

import pytest

from inferlab.constraints.program import compile_program
from inferlab.engine import Engine, EngineConfig
from inferlab.errors import EngineClosedError, InferlabError
from inferlab.types import Request, SamplingParams
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.template import build_template

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def make_engine(tiny_checkpoint):
    def make(**overrides) -> Engine:
        return Engine(EngineConfig(model=tiny_checkpoint("tiny"), **{"max_slots": 2, "max_seq_len": 160, **overrides}))

    make().close()  # first imports and their garbage, before the collector stops
    return make


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def _plain(rid: str, n: int = 4) -> Request:
    return Request(id=rid, prompt_ids=(5, 6, 7), sampling=SamplingParams(temperature=0, max_new_tokens=n))


def _constrained(engine: Engine) -> Request:
    template = build_template("CCO", get_profile("v3-fixed4"))
    program = compile_program(template.segments, engine.tokenizer)
    return Request(id="c", prompt_ids=tuple(template.prompt_ids(engine.tokenizer)), constraint=program)


def _watch(engine: Engine) -> dict[str, weakref.ref]:
    """Weakrefs to the engine's big buffers: KV cache, weights, row state, snapshot buffers, constraint tables."""
    runner = engine.runner
    assert runner.constraints is not None, "run a constrained request first: the runtime must exist"
    buffers = {
        "kv_k": runner.cache.k,
        "kv_v": runner.cache.v,
        "merge_counters": runner.cache.merge_counters,
        "embed": runner.model.weights.embed,
        "layer0_qkv": runner.model.weights.layers[0].qkv,
        "lm_head": runner.model.weights.lm_head,
        "rope_cos": runner.model.rotary.cos,
        "rows_out": runner.rows.out,
        "snapshot": engine._snapshots.buffers[0],
        "constraint_transitions": runner.constraints.transitions,
        "constraint_state": runner.constraints.state,
    }
    return {name: weakref.ref(tensor) for name, tensor in buffers.items()}


def _alive(refs: dict[str, weakref.ref]) -> list[str]:
    return [name for name, ref in refs.items() if ref() is not None]


def _used(engine: Engine) -> Engine:
    results = engine.generate([_constrained(engine), _plain("a")])
    assert all(r.ok for r in results), [r.error for r in results]
    return engine


def test_close_frees_every_big_buffer_while_the_engine_is_still_referenced(make_engine, no_gc):
    engine = _used(make_engine())
    refs = _watch(engine)
    engine.close()
    assert _alive(refs) == []
    assert engine.closed and engine.stats.max_slots == 2 and engine.plan.slots == 2  # still readable
    engine.close()  # idempotent


def test_an_engine_dropped_without_close_is_freed_by_reference_counting(make_engine, no_gc):
    engine = _used(make_engine())
    refs = {**_watch(engine), "engine": weakref.ref(engine)}
    del engine
    assert _alive(refs) == []


def test_an_abandoned_stream_does_not_keep_the_engine_alive(make_engine, no_gc):
    engine = _used(make_engine())
    refs = {**_watch(engine), "engine": weakref.ref(engine)}
    stream = engine.stream([_plain(f"s{i}", 4 + 8 * i) for i in range(4)])
    assert next(stream).id == "s0"
    del stream, engine
    assert _alive(refs) == []


def test_close_frees_the_buffers_under_a_live_abandoned_stream_which_then_refuses(make_engine, no_gc):
    engine = _used(make_engine())
    refs = _watch(engine)
    stream = engine.stream([_plain(f"s{i}", 4 + 8 * i) for i in range(4)])
    next(stream)
    engine.close()
    assert _alive(refs) == ["snapshot"]  # the stream's own bookkeeping (a few KB of host memory) lives with it
    with pytest.raises(EngineClosedError, match="closed Engine"):  # results already read may come first
        list(stream)


def test_a_closed_engine_refuses_calls_naming_the_fix(make_engine):
    engine = make_engine()
    engine.close()
    with pytest.raises(EngineClosedError, match=r"generate/stream on a closed Engine.*make a new Engine") as caught:
        engine.generate([_plain("a")])
    assert isinstance(caught.value, InferlabError)
    with pytest.raises(EngineClosedError):
        next(engine.stream([_plain("a")]))
    with pytest.raises(EngineClosedError, match="engine.tokenizer"):
        engine.tokenizer
    with pytest.raises(EngineClosedError):
        with engine:
            pass
    with pytest.raises(AttributeError):  # other missing names stay plain AttributeErrors
        engine.no_such_thing


def test_the_context_manager_generates_inside_and_closes_after(make_engine, no_gc):
    with make_engine() as engine:
        results = engine.generate([_plain("a"), _plain("b", 6)])
        refs = _watch(_used(engine))
    assert [len(r.token_ids) for r in results] == [4, 6] and all(r.ok for r in results)
    assert engine.closed and _alive(refs) == []


def test_the_context_manager_closes_on_an_error_inside_the_block(make_engine, no_gc):
    with pytest.raises(ValueError, match="user code failed"):
        with make_engine() as engine:
            refs = _watch(_used(engine))
            raise ValueError("user code failed")
    assert engine.closed and _alive(refs) == []


def test_a_failed_start_up_gives_its_memory_back_though_the_traceback_holds_the_engine(
    make_engine, no_gc, monkeypatch
):
    seen: dict[str, weakref.ref] = {}

    def failing_warm_up(self, use_graphs: bool) -> None:
        seen["kv_k"] = weakref.ref(self.runner.cache.k)
        seen["embed"] = weakref.ref(self.runner.model.weights.embed)
        raise RuntimeError("warm-up failed")

    monkeypatch.setattr(Engine, "_warm_up", failing_warm_up)
    with pytest.raises(RuntimeError, match="warm-up failed") as caught:
        make_engine()
    assert caught.traceback  # the frames (and `self`) are still referenced here
    assert _alive(seen) == []
