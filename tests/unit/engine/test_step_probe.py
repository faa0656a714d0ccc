"""DecodeStepProbe: the engine's decode step at a fixed batch and context (set-up, frozen rows, graph replays,
labelled eager steps, release) and its refusals."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

import inferlab.engine.engine as engine_module
import inferlab.engine.runner as runner_module
from inferlab.engine import DecodeStepProbe, Engine, EngineConfig, SamplingParams
from inferlab.errors import ConfigError, EngineClosedError
from tests.unit.engine.eager_capturer import EagerCapturer

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
TOP_P = SamplingParams(temperature=1.0, top_p=0.9)


def _engine(path, **extra) -> Engine:
    config = dict(model=str(path), device="cpu", max_slots=3, max_seq_len=16, decode_text=False, load_tokenizer=False)
    return Engine(EngineConfig(**{**config, **extra}))


def test_steps_read_the_same_context_each_time_and_close_gives_the_rows_back(tiny_checkpoint):
    with _engine(tiny_checkpoint()) as engine:
        runner, context = engine.runner, 7
        with DecodeStepProbe(engine, rows=3, context=context, sampling=TOP_P, seed=5) as probe:
            assert (probe.bucket, probe.filter_level, probe.cuda_graphs) == (3, 2, False)  # sampler.FILTER_TOP_P
            assert probe.stop_ids_width == engine.config.max_stop_ids
            k = runner.cache.k  # [layers, slots, kv heads, max_len, head dim]
            prompt_k = k[:, :3, :, : context - 1]
            assert prompt_k.abs().sum() > 0 and torch.equal(prompt_k[:, 1], prompt_k[:, 0])  # one prompt, copied
            assert k[:, :3, :, context - 1].abs().sum() == 0
            probe.step()
            written = k[:, :3, :, context - 1].clone()
            assert written.abs().sum() > 0  # the step wrote its position's K
            probe.eager_step()
            assert torch.equal(k[:, :3, :, context - 1], written)  # the same rows at the same position
            assert runner.rows.positions[:3].tolist() == [context - 1] * 3 and not runner.rows.active.any()
        assert runner.rows.positions[:3].tolist() == [0] * 3 and not runner.rows.active.any()  # released
        with pytest.raises(EngineClosedError, match="new DecodeStepProbe"):
            probe.step()


def test_a_probe_with_fewer_rows_steps_over_the_engines_bucket(tiny_checkpoint, monkeypatch):
    with _engine(tiny_checkpoint(), max_slots=8) as engine, \
            DecodeStepProbe(engine, rows=3, context=5, sampling=SamplingParams(temperature=0.0)) as probe:
        assert (probe.rows, probe.bucket, probe.filter_level) == (3, 4, 0)  # buckets 1, 2, 4, 8
        steps = []
        monkeypatch.setattr(engine.runner, "decode_step", lambda b, variant, hint: steps.append(b))
        probe.step()
        assert steps == [4]


def test_a_constrained_probe_steps_the_constrained_variant_with_its_rows_frozen(tiny_checkpoint):
    """Rows alternate between a program that starts with a hole and one that starts with a copy; the steps
    run the constrained variant (its pressure measured) and leave the programs' state and the rows'
    accumulated pressure as the prefill left them."""
    from inferlab.constraints.program import compile_program
    from inferlab.constraints.segments import Copy, EndOfSequence, Hole

    with _engine(tiny_checkpoint(), load_tokenizer=True, max_slots=4) as engine:
        programs = [compile_program(segments, engine.tokenizer) for segments in (
            [Hole("coord3-fixed4"), Copy(">"), EndOfSequence()], [Copy("[CONFORMER][C]<"), Hole("coord3-fixed4"),
                                                                  Copy(">"), EndOfSequence()])]  # fmt: skip
        with DecodeStepProbe(engine, rows=4, context=5, sampling=SamplingParams(temperature=1.0),
                             constraints=programs) as probe:
            runtime, pressure = engine.runner.constraints, engine.runner.features.pressure.buffers
            assert probe._variant.constrained and runtime.op_kind[:4, 0].tolist() == [2, 1, 2, 1]  # HOLE, COPY
            before = (runtime.ptr.clone(), runtime.state.clone(), pressure.acc.clone())
            pressure.now.zero_()
            for _ in range(3):
                probe.step()
            assert torch.equal(runtime.ptr, before[0]) and torch.equal(runtime.state, before[1])
            assert torch.equal(pressure.acc, before[2]) and pressure.acc[:4, 1].tolist() == [1.0] * 4  # the prefill's
            assert bool((pressure.now[:4] > 0).all())  # measured by the steps, added to nothing


def test_the_seed_fixes_the_prompt(tiny_checkpoint):
    with _engine(tiny_checkpoint()) as engine:
        k = engine.runner.cache.k
        runs = []
        for seed in (1, 1, 2):
            with DecodeStepProbe(engine, rows=1, context=6, sampling=TOP_P, seed=seed):
                runs.append(k[:, 0, :, :5].clone())
        assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


@pytest.mark.parametrize(("rows", "context", "message"), [
    (4, 8, r"rows=4 must be in \[1, 3\].*max_slots >= 4"), (0, 8, r"rows=0"),
    (3, 16, r"context=16 must be in \[2, 15\].*max_seq_len > 16"), (3, 1, r"context=1"),
])  # fmt: skip
def test_rows_and_context_beyond_the_engines_plan_are_refused(tiny_checkpoint, rows, context, message):
    with _engine(tiny_checkpoint()) as engine:
        with pytest.raises(ConfigError, match=message):
            DecodeStepProbe(engine, rows=rows, context=context, sampling=TOP_P)
        assert not engine.runner.rows.active.any()


def test_a_closed_engines_probe_refuses_steps_and_closes_quietly(tiny_checkpoint):
    engine = _engine(tiny_checkpoint())
    probe = DecodeStepProbe(engine, rows=2, context=4, sampling=TOP_P)
    engine.close()
    with pytest.raises(EngineClosedError):
        probe.step()
    probe.close()
    with pytest.raises(EngineClosedError):
        DecodeStepProbe(engine, rows=2, context=4, sampling=TOP_P)


def test_labelled_eager_steps_range_every_operation_and_give_the_engine_its_ops_back(tiny_checkpoint):
    opened: list[str] = []

    @contextmanager
    def recording(family: str):
        opened.append(family)
        yield

    with _engine(tiny_checkpoint()) as engine, DecodeStepProbe(engine, rows=2, context=6, sampling=TOP_P) as probe:
        runner = engine.runner
        ops, gemm = runner.ops, runner.model.gemm
        with probe.labelled(recording):
            assert runner.ops is not ops and runner.model.ops is runner.ops
            probe.eager_step()
        assert runner.ops is ops and runner.model.ops is ops and runner.model.gemm is gemm
        assert "_logits" not in vars(runner.model)
        n = len(opened)
        probe.eager_step()
        assert len(opened) == n  # outside the block, no ranges
    assert set(opened) <= set(DecodeStepProbe.FAMILIES)
    layers = engine.spec.num_layers
    assert opened.count("gemm qkv") == opened.count("gemm o") == layers and opened.count("gemm mlp") >= layers
    assert opened.count("gemm lm_head") == 1 and opened.count("attention") >= layers
    assert {"norm", "sampling", "bookkeeping"} <= set(opened)


def test_labelled_packed_steps_range_the_constraint_and_the_forced_runs_and_put_them_back(tiny_checkpoint):
    """A constrained probe on an engine with forced runs: its step is the packed one (T = 3 rows + 12 positions
    of room, none booked by the frozen rows); labelled, the constraint's hooks, the booking and the booked
    tokens' pressure run in their families' ranges, and on the way out the features and the ForcedRuns get
    their own methods back."""
    from inferlab.constraints.program import compile_program
    from inferlab.constraints.segments import Copy, EndOfSequence, Hole

    opened: list[str] = []

    @contextmanager
    def recording(family: str):
        opened.append(family)
        yield

    with _engine(tiny_checkpoint(), load_tokenizer=True, forced_run_tokens=4) as engine:
        programs = [compile_program(segments, engine.tokenizer) for segments in (
            [Hole("coord3-fixed4"), Copy(">"), EndOfSequence()], [Copy("[CONFORMER][C]<"), Hole("coord3-fixed4"),
                                                                  Copy(">"), EndOfSequence()])]  # fmt: skip
        runner = engine.runner
        with DecodeStepProbe(engine, rows=3, context=5, sampling=SamplingParams(temperature=1.0),
                             constraints=programs) as probe:
            assert probe.packed_positions == 3 + 12 and probe.booked_per_step() == 0  # extra_positions(3, 4)
            with probe.labelled(recording):
                assert "pack" in vars(runner.forced_runs) and "logits_hooks" in vars(runner.features)
                probe.eager_step()
            assert not {"pack", "measure"} & set(vars(runner.forced_runs)) and "logits_hooks" not in vars(runner.features)
            n = len(opened)
            probe.eager_step()
            assert len(opened) == n  # outside the block, no ranges
    assert set(opened) <= set(DecodeStepProbe.FAMILIES)
    assert opened.count("forced runs") == opened.count("forced pressure") == 1
    assert opened.count("constraint") == 3  # mask_logits, forced_rows, emit (the torch path: no fused race)
    assert {"attention", "sampling", "bookkeeping", "gemm lm_head"} <= set(opened)


def test_an_unconstrained_step_is_not_packed_on_an_engine_with_forced_runs(tiny_checkpoint):
    with _engine(tiny_checkpoint(), forced_run_tokens=4) as engine, \
            DecodeStepProbe(engine, rows=2, context=4, sampling=TOP_P) as probe:
        assert probe.packed_positions is None and probe.booked_per_step() == 0


def test_on_the_graph_path_a_step_replays_the_captured_variant(tiny_checkpoint, monkeypatch):
    monkeypatch.setattr(engine_module, "graphs_wanted", lambda cuda_graphs, device: bool(cuda_graphs))
    monkeypatch.setattr(runner_module, "Capturer", EagerCapturer)
    with _engine(tiny_checkpoint(), cuda_graphs=True) as engine:
        graphs = engine.runner.graphs
        with DecodeStepProbe(engine, rows=3, context=6, sampling=TOP_P) as probe:
            assert probe.cuda_graphs and (3, (probe.filter_level, False, False, False)) in graphs.graphs
            captures = graphs.capturer.count
            replayed = []
            monkeypatch.setattr(graphs, "replay", lambda size, variant: replayed.append((size, variant.level)))
            probe.step()
            assert replayed == [(3, probe.filter_level)] and graphs.capturer.count == captures


def test_every_operation_of_the_op_set_has_a_family():
    """A profile of any step (the packed one of forced runs included) names every Ops operation's kernels."""
    import dataclasses

    from inferlab.engine.op_labels import OP_FAMILIES
    from inferlab.engine.ops import Ops

    callables = {f.name for f in dataclasses.fields(Ops) if f.name not in ("name", "needs_len_hint")}
    assert callables == set(OP_FAMILIES), f"without a family: {sorted(callables - set(OP_FAMILIES))}"
