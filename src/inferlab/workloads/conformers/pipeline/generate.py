"""Conformer generation, end to end: molecules in (.smi/.csv/.tsv), K conformers each out as an SDF of the
valid ones plus one JSONL row per conformer. The library side of `inferlab conformers generate`.

The wiring, in input order:
  inputs (chemistry/inputs.py: bad lines become error rows) -> what is left to do (plan.py: resume), one
     pass that keeps counts and the largest molecules; the work then reads the input again as streams
     (the feed's pass below, and the order's, which lags at the oldest row not written and writes the
     rows of unusable lines itself when it reaches them): no list of the input's lines is ever held
  -> per unique molecule, in a process pool running ahead: template + prompt ids + ConstraintProgram
     (prepare.py), started before the engine so it overlaps the engine's start-up; this process
     imports torch (the engine) only after the pools started, and never transformers: the engine runs
     without a tokenizer (load_tokenizer=False), on one preparing process's GrammarSet, and the judges
     decode the token ids (transformers' import beside torch's slows both: docs/decisions.md)
  -> ONE generator of requests for the whole job (feed.py: K per molecule, conformer
     `<id>#<k>` with a seed derived from the run's seed and that id; stereo retries fed back into it)
     handed to one Engine.stream call, which pulls requests as rows free up: no waves, no drains
  -> each result handed at once to the judge processes (judge.py, judge_pool.py:
     text from the token ids, strict check, plain decoding, stereo agreement, the SDF record), so the engine's path holds only
     the hand-off; the verdicts written here in input order (collect.py, output.py; a verdict
     waits for the rows before it), each flushed, so a rerun skips every (molecule, conformer) already
     written.
A molecule that cannot be prepared, or whose prompt + program bound exceeds the engine's max_seq_len,
becomes error rows; so does anything the engine refuses. A stereo retry given after the generator ended
(the last rows' retries) goes to a further Engine.stream call. However the call ends (an interrupt
included), every finished row is written before the files close. `on_phase` tells the caller what the
run is doing before its first row (reading, starting the pools, starting the engine, generating);
`on_tokens(tokens, requests, bound)`, at each of the engine's sync points from its first decode chunk on,
the output tokens generated so far in this run (running rows' included, every attempt's), the requests
handed to the engine so far and their programs' token bound together (a progress bar's rate and ETA).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path

from inferlab.engine import EngineConfig
from inferlab.errors import UnsupportedError
from inferlab.inputs.record_ids import RecordIds
from inferlab.workloads.conformers.chemistry.inputs import MoleculeFile
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.pipeline.collect import ResultCollector, RowCallback, RowWriter
from inferlab.workloads.conformers.pipeline.config import PipelineConfig
from inferlab.workloads.conformers.pipeline.feed import MoleculeFeed, RequestFeed
from inferlab.workloads.conformers.pipeline.judge_pool import JudgePool
from inferlab.workloads.conformers.pipeline.output import ConformerResultWriter
from inferlab.workloads.conformers.pipeline.engine_sizing import describe_rows, size_engine
from inferlab.workloads.conformers.pipeline.plan import MoleculeJob, MoleculePlan, molecule_jobs, plan_molecules
from inferlab.workloads.conformers.pipeline.prepare import MoleculePreparer
from inferlab.workloads.conformers.pipeline.pressure import PressureTally
from inferlab.workloads.conformers.pipeline.stats import PipelineSummary
from inferlab.workloads.conformers.pipeline.tail_order import TAIL_ROWS_PER_SLOT, TailOrder

log = logging.getLogger(__name__)

# the fix of an UnsupportedError about the checkpoint: there is no other backend to run the constraint
ENGINE_ONLY = ("conformer generation runs on the inferlab engine alone (the constraint is applied inside its decode "
               "step): use a checkpoint of an architecture and configuration the engine runs")
TokenCallback = Callable[[int, int, int], None]  # (output tokens so far, requests given, their token bound)

JUDGE_WINDOW = 1024  # results being judged at once, at most (~3 KB of text each); more waits for the oldest


def generate_conformers(
    engine: EngineConfig,  # the checkpoint and the engine's knobs; its seed and tokenizer are the pipeline's
    input_path: str | Path,
    output_path: str | Path,
    config: PipelineConfig,
    on_start: Callable[[int, int], None] | None = None,  # (rows to write now, rows written by earlier runs)
    on_row: RowCallback | None = None,  # as each row finishes
    on_phase: Callable[[str], None] | None = None,  # what the run is doing now, in a few words
    on_tokens: TokenCallback | None = None,  # the engine's progress at each sync point
) -> PipelineSummary:
    """The engine runs with config.seed and no tokenizer (the preparing processes' GrammarSet constrains, the
    judges decode); its rows (max_slots None: auto), row length (max_seq_len None) and KV cache (kv_dtype
    "auto": the quality gate) are sized for the job by engine_sizing.py."""
    started = time.perf_counter()
    profile = get_profile(config.profile)
    phase = on_phase or (lambda what: None)
    phase("reading the molecules")
    inputs = MoleculeFile.open(input_path, config.smiles_column, config.id_column, config.input_bounds)
    marks = _Marks(started)
    summary = PipelineSummary(pressure=PressureTally(profile.name))
    k = config.num_conformers
    with ConformerResultWriter(output_path, config.rows_output, profile.name, config.retry_errors, k) as writer:
        summary.conformers_retried = writer.retried
        ids = RecordIds()  # this pass claims them; the later passes (the feed's, the order's) replay its claims
        plan = plan_molecules(inputs.records(ids), writer, k)
        known = ids.known()
        del ids  # the fingerprints of every id go now

        def jobs() -> Iterator[MoleculeJob]:
            """Every record with rows to write, in input order: one more pass over the input."""
            return molecule_jobs(inputs.records(known.replay()), writer, k)

        summary.molecules = plan.molecules_total
        summary.conformers_skipped = plan.rows_done
        marks.passed("inputs")
        log.info("%s: %d records (%d unusable), K=%d: %d rows to write, %d written before", inputs.description,
                 plan.molecules_total, plan.unusable, k, plan.rows_todo, plan.rows_done)
        if on_start is not None:
            on_start(plan.rows_todo, plan.rows_done)
        rows = RowWriter(writer, summary, on_row, jobs())
        completed = False
        try:
            if plan.usable_todo:
                usable = (job for job in jobs() if job.record.ok)
                _generate(engine, usable, plan, config, rows, summary, marks, phase, on_tokens)
            completed = True
        finally:
            rows.flush(to_end=completed)  # an interrupted run leaves the rows after its last one to the rerun
    summary.wall_s = time.perf_counter() - started
    return summary


def _generate(engine_config: EngineConfig, jobs: Iterable[MoleculeJob], plan: MoleculePlan, config: PipelineConfig,
              rows: RowWriter, summary: PipelineSummary, marks: _Marks, phase: Callable[[str], None],
              on_tokens: TokenCallback | None) -> None:
    """`jobs`: the usable ones, as a stream; `plan`: how many there are, and the largest."""
    model = engine_config.model
    profile = get_profile(config.profile)
    summary.judge_workers = config.judge_pool_workers(plan.usable_todo)
    phase("starting the worker processes")
    with MoleculePreparer(model, profile.name, config.pool_workers(plan.usable_todo)) as preparer, \
            JudgePool(summary.judge_workers, str(model)) as judges, ExitStack() as life:
        grammar_set = preparer.grammar_set()  # the engine's GrammarSet, the pool's first task
        sample = plan.largest
        for job in sample:  # the largest molecules' programs next: the row length may wait for them
            preparer.submit(job.record.smiles)
        ordered = TailOrder(jobs, plan.usable_rows_todo)  # its last molecules largest first (tail_order.py)
        molecules = MoleculeFeed(ordered, preparer, lookahead=config.lookahead_molecules(None))
        molecules.top_up()  # the pool starts on the first molecules while the engine starts
        marks.passed("pools")
        # torch (the engine's import) after the pools started, so that their processes start up beside it (a
        # caller may have it importing already: the CLI starts it in a thread, cli/background_import.py)
        from inferlab.engine import Engine
        from inferlab.models.config import read_model_spec

        marks.passed("torch")

        try:
            model_positions = read_model_spec(model).max_position_embeddings
            phase("sizing the engine")
            sizing = size_engine(engine_config, plan.usable_rows_todo, sample, preparer, profile, model_positions,
                                 config.row_ceiling)
            t0 = marks.passed("sizing")
            summary.before_engine_s, summary.length_wait_s = t0 - marks.started, sizing.length_wait_s
            summary.before_engine_parts = marks.parts
            phase("starting the engine")
            # no tokenizer in this process: the preparing processes' GrammarSet constrains, the judges decode
            engine_config = dataclasses.replace(sizing.config, seed=config.seed, load_tokenizer=False)
            engine = life.enter_context(Engine(engine_config, grammar_set=grammar_set))
        except UnsupportedError as e:
            raise UnsupportedError(f"{e}; {ENGINE_ONLY}") from None
        summary.engine_start_s = time.perf_counter() - t0
        summary.slots, summary.max_seq_len, summary.device = engine.plan.slots, engine.plan.max_seq_len, str(engine.device)
        summary.sizing = {"slots": describe_rows(sizing.rows, engine.plan.slots, engine.plan.max_seq_len),
                          "max_seq_len": f"{engine.plan.max_seq_len} positions: {sizing.length_reason}",
                          "kv_cache": f"{engine.stats.kv_dtype}: {sizing.kv.reason}"}
        molecules.lookahead = config.lookahead_molecules(engine.plan.slots)
        ordered.window_rows = TAIL_ROWS_PER_SLOT * engine.plan.slots
        log.info("engine ready in %.1f s: %s; %s; kv cache %s; %s; %d judge processes", summary.engine_start_s,
                 summary.sizing["slots"], summary.sizing["max_seq_len"], summary.sizing["kv_cache"],
                 config.sampling.describe(), summary.judge_workers)
        phase("generating")
        feed = RequestFeed(molecules, engine.plan.max_seq_len, model_positions, config.sampling.params(), rows,
                           preset_checkpoint=(Path(model) / "inferlab_preset.json").is_file())  # model init's
        collector = ResultCollector(judges, feed, rows, summary, profile.name, config.stereo_retries,
                                    config.stereo_mirror, JUDGE_WINDOW, str(model))
        told = _token_counter(feed, on_tokens)
        while feed.has_work:  # one call for the job; more only for retries of its last rows
            _stream(engine, feed, collector, summary, told)
        summary.molecules_run = feed.molecules_run
        summary.template_wait_s, summary.template_cpu_s = molecules.wait_s, molecules.cpu_s
        summary.judge_wait_s, summary.write_s = collector.wait_s, collector.write_s
        summary.engine = {k: v for k, v in engine.stats.as_dict().items() if k != "gemm_choices"}
        finished = time.perf_counter()
    summary.teardown_s = time.perf_counter() - finished


class _Marks:
    """The seconds each stage before the engine took, in order (PipelineSummary.before_engine_parts)."""

    def __init__(self, started: float) -> None:
        self.started = self._last = started
        self.parts: dict[str, float] = {}

    def passed(self, stage: str) -> float:
        """The stage that just ended; returns now."""
        now = time.perf_counter()
        self.parts[stage] = round(now - self._last, 3)
        self._last = now
        return now


def _token_counter(feed: RequestFeed, on_tokens: TokenCallback | None) -> Callable[[int], None] | None:
    """The engine's on_tokens (n new tokens) as the caller's running totals, across every stream call."""
    if on_tokens is None:
        return None
    total = 0

    def told(n: int) -> None:
        nonlocal total
        total += n
        on_tokens(total, feed.requests_given, feed.tokens_bound)

    return told


def _stream(engine, feed: RequestFeed, collector: ResultCollector, summary: PipelineSummary,
            on_tokens: Callable[[int], None] | None) -> None:
    """One Engine.stream call over the feed's generator; the loop body is the engine's only wait on us."""
    summary.stream_calls += 1
    started, consumer = time.perf_counter(), 0.0
    for result in engine.stream(feed.requests(), on_tokens=on_tokens):
        t = time.perf_counter()
        collector.take(result)
        consumer += time.perf_counter() - t
    t = time.perf_counter()
    summary.generate_s += t - started - consumer
    summary.consumer_s += consumer
    collector.drain()  # verdicts still out may queue retries for the next call
    summary.drain_s += time.perf_counter() - t
