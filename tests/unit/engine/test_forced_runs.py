"""Forced tokens in bulk (engine/forced_runs.py) on the CPU: constrained conformer requests on the reference
model (a trained model: its pressures are far from 1, so where their max falls is decided) give the tokens
and the constraint pressure that one token per step gives, in fewer decode steps, greedy and sampled, with
more rows than the step's budget of booked positions; the packing's layout itself on a hand-made batch."""

from __future__ import annotations

import pytest
import torch

from inferlab.engine import Engine, EngineConfig
from inferlab.engine import forced_runs
from inferlab.engine.forced_runs import ForcedRuns, extra_positions
from inferlab.errors import ConfigError
from inferlab.workloads.conformers.reference_model import reference_model_dir
from tests.unit.engine.test_engine_constrained import _assert_valid, _conformer_request, small_nci_molecules

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
REFERENCE = str(reference_model_dir())


def _run(checkpoint: str, forced: int, sampling: dict, molecules, slots: int = 4):
    config = EngineConfig(model=checkpoint, max_slots=slots, max_seq_len=1024, decode_steps_per_sync=8,
                          dtype="float32", forced_run_tokens=forced)
    with Engine(config) as engine:
        pairs = [_conformer_request(engine, f"m{i}", smiles, **sampling) for i, smiles in enumerate(molecules)]
        results = engine.generate([request for request, _ in pairs])
        for result, (_, template), smiles in zip(results, pairs, molecules):
            _assert_valid(engine, result, template, smiles)
        return results, engine.stats.decode_steps


@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=1.0, seed=3)], ids=["greedy", "t1"])
def test_forced_runs_give_the_same_conformers_in_fewer_steps(sampling):
    molecules = small_nci_molecules(8, 6)  # 6 requests over 4 rows: admissions while runs are booked
    single, single_steps = _run(REFERENCE, 0, sampling, molecules)
    bulk, bulk_steps = _run(REFERENCE, 4, sampling, molecules)
    for one, many in zip(single, bulk):
        assert many.token_ids == one.token_ids
        assert many.constraint_pressure.steps == one.constraint_pressure.steps == len(one.token_ids)
        assert many.constraint_pressure.mean == pytest.approx(one.constraint_pressure.mean, rel=1e-4, abs=1e-6)
        assert many.constraint_pressure.max == pytest.approx(one.constraint_pressure.max, rel=1e-4, abs=1e-6)
        assert many.constraint_pressure.max_step == one.constraint_pressure.max_step
    assert bulk_steps < 0.95 * single_steps, (bulk_steps, single_steps)


def test_a_budget_of_one_run_still_gives_every_token():
    """One row at a time: a budget of exactly one run (F positions), long runs split over several steps."""
    molecules = small_nci_molecules(8, 2)
    single, _ = _run(REFERENCE, 0, dict(temperature=0.0), molecules, slots=1)
    bulk, _ = _run(REFERENCE, 2, dict(temperature=0.0), molecules, slots=1)
    assert [r.token_ids for r in bulk] == [r.token_ids for r in single]


class _Runtime:
    """A constraint runtime's forced_run / skip / ptr / active, for the packing alone."""

    def __init__(self, runs: list[list[int]]) -> None:
        width = max(len(r) for r in runs) or 1
        self.tokens = torch.tensor([(r + [0] * width)[:width] for r in runs])
        self.run = torch.tensor([len(r) for r in runs])
        self.ptr = torch.zeros(len(runs), dtype=torch.int64)
        self.active = torch.ones(len(runs), dtype=torch.bool)
        self.skipped = None

    def forced_run(self, batch, width, live):
        tokens = torch.zeros(batch, width, dtype=torch.int64)
        tokens[:, : self.tokens.shape[1]] = self.tokens[:, :width]
        return tokens, torch.where(live, self.run.clamp(max=width), 0)

    def skip(self, batch, counts):
        self.skipped = counts.clone()
        self.ptr += counts


def test_the_packing_lays_rows_out_within_the_budget(monkeypatch):
    from inferlab.engine.rows import RowState

    rows = RowState.allocate(6, 2, 64, torch.device("cpu"))
    rows.active[:5] = True
    rows.max_new[:] = 50
    rows.tokens[:] = torch.arange(100, 106)
    rows.positions[:] = torch.tensor([10, 20, 30, 40, 50, 0])
    rows.n_out[:] = 3
    rows.n_stop[:] = 1
    rows.stop_ids[:] = 99  # a stop id inside row 3's run cuts it
    runtime = _Runtime([[7, 8, 9], [], [5], [6, 99, 6], [1, 2, 3], [4]])
    monkeypatch.setattr(forced_runs, "extra_positions", lambda rows, width, share: 3)  # a budget that binds
    step = ForcedRuns(3, scratch_slot=6).pack(rows, torch.arange(6), runtime, measure=True)
    # row 0 books 3 (the whole budget), rows 2-4 wait; row 5 is idle
    assert runtime.skipped.tolist() == [3, 0, 0, 0, 0, 0]
    assert step.tokens.tolist() == [100, 7, 8, 9, 101, 102, 103, 104, 105]
    assert step.positions.tolist() == [10, 11, 12, 13, 20, 30, 40, 50, 0]
    assert step.slots.tolist() == [0, 0, 0, 0, 1, 2, 3, 4, 5]
    assert step.last.tolist() == [3, 4, 5, 6, 7, 8]
    assert step.bulk.tolist() == [0, 1, 2]
    assert rows.n_out.tolist() == [6, 3, 3, 3, 3, 3]
    assert rows.positions.tolist() == [13, 20, 30, 40, 50, 0]
    assert rows.out[0, 3:6].tolist() == [7, 8, 9]

    rows.positions[0] = 20
    runtime = _Runtime([[], [], [5], [6, 99, 6], [1, 2, 3], []])
    step = ForcedRuns(3, scratch_slot=6).pack(rows, torch.arange(6), runtime, measure=False)
    assert runtime.skipped.tolist() == [0, 0, 1, 1, 1, 0]  # row 3 stops before the stop id; row 4 gets what is left
    assert step.tokens.tolist() == [100, 101, 102, 5, 103, 6, 104, 1, 105]
    assert step.slots.tolist() == [0, 1, 2, 2, 3, 3, 4, 4, 5]
    assert step.bulk is None


def test_forced_run_tokens_and_budget_are_bounded():
    with pytest.raises(ConfigError, match="forced_run_tokens"):
        EngineConfig(model="x", forced_run_tokens=8)
    with pytest.raises(ConfigError, match="forced_run_budget"):
        EngineConfig(model="x", forced_run_tokens=4, forced_run_budget=0)
    assert extra_positions(256, 4) == 32 and extra_positions(256, 4, 0.25) == 64 and extra_positions(64, 4) == 16
    assert extra_positions(3, 4) == 12 and extra_positions(1, 4) == 4


def test_a_packed_steps_rows_take_the_gemm_choice_of_the_bucket_above():
    from inferlab.engine.gemm_plan import GemmPlan

    plan = GemmPlan(act_mul=None, choices={("o", 16): "triton 16", ("mlp", 8): "triton 8"}, buckets=(1, 2, 4, 8, 16, 24))
    assert [plan.choice("o", rows) for rows in (16, 12, 9, 20, 24, 30, 80)] == [
        "triton 16", "triton 16", "triton 16", None, None, None, None]  # fmt: skip
    assert plan.choice("mlp", 5) == "triton 8" and plan.choice("mlp", 4) is None  # a timed bucket keeps its own
