"""How the pipeline sizes the engine for a job (pipeline/engine_sizing.py): `--max-num-seqs auto`'s cap (the
saturating rows per device, never more than the job's requests), when the row length waits for the largest
molecules' compiled programs (in-process preparation, or memory short of the rows wanted at the character
bound) and then fits exactly their longest row, values given kept, and the summary's words for the rows."""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future

import pytest

from inferlab.constraints.token_automaton import grammar_set_for
from inferlab.engine import EngineConfig, plan_without_loading
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
from inferlab.models.config import read_model_spec
from inferlab.workloads.conformers.chemistry.inputs import MoleculeFile
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.pipeline.engine_sizing import (
    SATURATING_ROWS,
    RowCap,
    auto_row_cap,
    describe_rows,
    size_engine,
    wait_for_exact_length,
)
from inferlab.workloads.conformers.pipeline.plan import (
    LENGTH_STEP,
    auto_max_seq_len,
    NothingDone,
    length_sample,
    molecule_jobs,
    row_length,
)
from inferlab.workloads.conformers.pipeline.prepare import _PreparerState, prepare_with

PROFILE = get_profile("v3-fixed4")
MOLECULES = ["CCO a", "c1ccccc1O phenol", "CC(=O)Nc1ccc(O)cc1 paracetamol", "CCCCCCCCCC decane"]


def test_the_auto_cap_is_the_saturating_rows_or_the_jobs_requests():
    assert auto_row_cap("cuda", 6464) == RowCap(1024, auto_row_cap("cuda", 6464).why)
    assert auto_row_cap("cuda", 1024).rows == 1024 and auto_row_cap("cuda", 100).rows == 100
    assert auto_row_cap("cpu", 6464).rows == SATURATING_ROWS["cpu"] == 16
    assert auto_row_cap("cpu", 2).rows == 2 and "the job's 2 requests" in auto_row_cap("cpu", 2).why
    assert auto_row_cap("cuda", 0).rows == 1  # a job of retries only still gets a row


def test_a_tune_files_max_slots_is_a_ceiling_in_place_of_the_saturating_rows():
    assert auto_row_cap("cuda", 6464, ceiling=1169) == RowCap(1169, "the tune's max_slots (--config)")
    assert auto_row_cap("cuda", 500, ceiling=1169).rows == 500  # never more than the job's requests


def test_the_exact_length_is_waited_for_only_where_it_buys_something():
    assert wait_for_exact_length(inline=True, rows_at_character_bound=16, rows_wanted=16)
    assert wait_for_exact_length(inline=False, rows_at_character_bound=700, rows_wanted=1024)
    assert not wait_for_exact_length(inline=False, rows_at_character_bound=1024, rows_wanted=1024)
    # the H200's 989 rows at the character bound against 1024 wanted: 0.5% of a step's throughput, not worth
    # the pool's start-up; on a CPU 15 of 16 rows cost ~3%
    assert not wait_for_exact_length(inline=False, rows_at_character_bound=989, rows_wanted=1024)
    assert wait_for_exact_length(inline=False, rows_at_character_bound=15, rows_wanted=16, device_type="cpu")


def test_the_rows_are_described_by_what_bound_them():
    cap = auto_row_cap("cuda", 6464)
    assert describe_rows(cap, 1024, 1792).startswith("1024 slots: auto, a GPU step's fixed cost")
    assert "as many as memory holds at 1792 positions" in describe_rows(cap, 700, 1792)
    assert describe_rows(None, 64, 512) == "64 slots: --max-num-seqs"


class Preparer:
    """MoleculePreparer's surface for size_engine, preparing with the built-in tokenizer and counting waits."""

    def __init__(self, inline: bool) -> None:
        tokenizer = build_builtin_tokenizer()
        self.state = _PreparerState(tokenizer, grammar_set_for(tokenizer), PROFILE.name)
        self.inline, self.submitted = inline, []

    def submit(self, smiles: str) -> Future:
        self.submitted.append(smiles)
        done: Future = Future()
        done.set_result(prepare_with(self.state, smiles))
        return done


@pytest.fixture(scope="module")
def job(tiny_checkpoint, tmp_path_factory):
    path = tmp_path_factory.mktemp("sizing") / "in.smi"
    path.write_text("\n".join(MOLECULES) + "\n")
    jobs = list(molecule_jobs(MoleculeFile.open(path).records(), NothingDone(), 4))
    model = tiny_checkpoint("tiny")
    return model, jobs, read_model_spec(model).max_position_embeddings


def _size(job, preparer, row_ceiling=None, **engine):
    model, jobs, positions = job
    config = EngineConfig(model=model, device="cpu", **engine)
    return size_engine(config, sum(len(j.todo) for j in jobs), length_sample(jobs), preparer, PROFILE, positions,
                       row_ceiling)


def test_in_process_preparation_sizes_the_rows_to_the_longest_row_exactly(job):
    preparer = Preparer(inline=True)
    sizing = _size(job, preparer)
    needs = [prepare_with(preparer.state, line.split()[0]).tokens_needed for line in MOLECULES]
    length = sizing.config.max_seq_len
    assert length == row_length(needs, job[2]) and length % LENGTH_STEP == 0 and max(needs) <= length
    assert length < auto_max_seq_len(job[1], PROFILE, job[2])  # tighter than the character bound
    assert f"({max(needs)} positions" in sizing.length_reason
    assert sizing.config.max_slots is None and sizing.config.slot_cap == 16  # 4 molecules x 4 conformers
    assert sizing.config.kv_dtype == "model" and "CPU" in sizing.kv.reason


def test_a_pool_keeps_the_character_bound_while_memory_holds_the_rows_at_it(job):
    preparer = Preparer(inline=False)
    sizing = _size(job, preparer)
    assert sizing.config.max_seq_len == auto_max_seq_len(job[1], PROFILE, job[2])
    assert preparer.submitted == [] and sizing.length_wait_s == 0.0 and "memory holds" in sizing.length_reason


def test_a_pool_waits_for_the_exact_length_when_memory_holds_fewer_rows_than_wanted(job):
    model, jobs, positions = job
    character = auto_max_seq_len(jobs, PROFILE, positions)
    budget = plan_without_loading(EngineConfig(model=model, device="cpu", max_slots=15, max_seq_len=character,
                                               memory_budget_bytes=1 << 40)).total_bytes  # 15 of the 16 rows
    preparer = Preparer(inline=False)
    sizing = _size(job, preparer, memory_budget_bytes=budget)
    assert sorted(preparer.submitted) == sorted(j.record.smiles for j in length_sample(jobs))
    assert sizing.config.max_seq_len < character and "longest row" in sizing.length_reason
    assert plan_without_loading(dataclasses.replace(sizing.config, max_slots=None)).slots == 16  # now they fit


def test_values_given_are_kept(job):
    sizing = _size(job, Preparer(inline=True), max_slots=3, max_seq_len=1024, kv_dtype="fp8")
    assert (sizing.config.max_slots, sizing.config.max_seq_len, sizing.config.kv_dtype) == (3, 1024, "fp8")
    assert sizing.rows is None and sizing.length_reason == "--max-seq-len" and sizing.kv.reason == "--kv-dtype fp8"
    assert sizing.config.slot_cap == EngineConfig(model="m").slot_cap


def test_a_tuned_ceiling_the_memory_cannot_hold_gives_the_rows_it_can(job):
    """A tune file measured on short rows asks more rows than a job of longer rows fits: the job runs with as
    many as memory holds (the user's own --max-num-seqs would be refused instead)."""
    model, jobs, positions = job
    character = auto_max_seq_len(jobs, PROFILE, positions)
    budget = plan_without_loading(EngineConfig(model=model, device="cpu", max_slots=10, max_seq_len=character,
                                               memory_budget_bytes=1 << 40)).total_bytes
    sizing = _size(job, Preparer(inline=True), row_ceiling=12, memory_budget_bytes=budget)
    assert sizing.config.max_slots is None and sizing.config.slot_cap == 12
    assert sizing.rows.why == "the tune's max_slots (--config)"
    held = plan_without_loading(sizing.config).slots
    assert 10 <= held < 12 and describe_rows(sizing.rows, held, sizing.config.max_seq_len).startswith(
        f"{held} slots: auto, as many as memory holds")
