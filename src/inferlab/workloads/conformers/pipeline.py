"""Conformer generation, end to end: molecules in (.smi/.csv/.tsv), K conformers each out as an SDF of the
valid ones plus one JSONL row per conformer. The library side of `inferlab conformers generate`.

The wiring, in input order:
  inputs (inputs.py: bad lines become error rows) -> what is left to do (pipeline_plan.py: resume)
  -> per unique molecule, in a process pool running ahead: template + prompt ids + ConstraintProgram
     (pipeline_prepare.py), started before the engine so it overlaps the engine's start-up
  -> K requests per molecule (conformer `<id>#<k>`, its seed derived from the run's seed and that id)
  -> Engine.stream, one wave of requests at a time (the engine takes a call's requests up front; the pool
     prepares the next waves meanwhile)
  -> each finished output decoded strictly and plainly (pipeline_judge.py) -> SDF + JSONL, flushed
     (output.py), so a rerun skips every (molecule, conformer) already written.
A molecule that cannot be prepared, or whose prompt + program bound exceeds the engine's max_seq_len,
becomes error rows; so does anything the engine refuses. Rows are written as they finish (the scale-out
merge puts shards in input order).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError
from inferlab.types import Request
from inferlab.workloads.conformers.inputs import read_molecule_inputs
from inferlab.workloads.conformers.output import ConformerResultWriter
from inferlab.workloads.conformers.pipeline_config import PipelineConfig
from inferlab.workloads.conformers.pipeline_judge import judge
from inferlab.workloads.conformers.pipeline_plan import MoleculeJob, auto_max_seq_len, plan_molecules
from inferlab.workloads.conformers.pipeline_prepare import MoleculePreparer, PreparedMolecule
from inferlab.workloads.conformers.pipeline_stats import PipelineSummary
from inferlab.workloads.conformers.profiles import get_profile

log = logging.getLogger(__name__)

RowCallback = Callable[[dict[str, Any]], None]


class _Rows:
    """Writes rows through the ConformerResultWriter, keeps the summary's counts and tells `on_row`
    ({"id", "input_id", "conformer_index", "status", "generated", "output_tokens"}) after each; `generated`
    is False for rows of molecules that never reached the engine."""

    def __init__(self, writer: ConformerResultWriter, summary: PipelineSummary, on_row: RowCallback | None) -> None:
        self.writer, self.summary, self.on_row = writer, summary, on_row

    def error(self, job: MoleculeJob, message: str, indices=None, fields: dict | None = None) -> None:
        for k in job.todo if indices is None else indices:
            self.writer.write_error(job.record.id, job.record.smiles, k, message, fields)
            self.summary.conformers_error += 1
            self._tell(job, k, "error", fields)

    def ok(self, job: MoleculeJob, k: int, canonical: str, mol, fields: dict) -> None:
        # the row's `smiles` is the input's, as in error rows (the writer would put the canonical form there)
        self.writer.write_ok(job.record.id, canonical, k, mol, {"smiles": job.record.smiles, **fields})
        self.summary.conformers_ok += 1
        self._tell(job, k, "ok", fields)

    def _tell(self, job: MoleculeJob, k: int, status: str, fields: dict | None) -> None:
        if self.on_row is not None:
            fields = fields or {}
            self.on_row({"id": f"{job.record.id}#{k}", "input_id": job.record.id, "conformer_index": k,
                         "status": status, "generated": "finish_reason" in fields,
                         "output_tokens": fields.get("output_tokens", 0)})


def generate_conformers(
    model: str | Path,
    input_path: str | Path,
    output_path: str | Path,
    config: PipelineConfig,
    engine_options: Mapping[str, Any] | None = None,  # EngineConfig fields: device, dtype, max_slots, ...
    on_start: Callable[[int, int], None] | None = None,  # (rows to write now, rows written by earlier runs)
    on_row: RowCallback | None = None,  # after each row is written
) -> PipelineSummary:
    started = time.perf_counter()
    options = dict(engine_options or {})
    if "model" in options or "seed" in options:
        raise ConfigError("engine_options must not hold model or seed; pass them as the model and config.seed")
    profile = get_profile(config.profile)
    inputs = read_molecule_inputs(input_path, config.smiles_column, config.id_column)
    summary = PipelineSummary(molecules=len(inputs.records))
    with ConformerResultWriter(output_path, config.rows_output, profile=profile.name) as writer:
        plan = plan_molecules(inputs, writer.is_done, config.num_conformers)
        summary.conformers_skipped = plan.rows_done
        todo_rows = sum(len(job.todo) for job in plan.jobs + plan.unusable)
        log.info("%s: %d records (%d unusable), K=%d: %d rows to write, %d written before",
                 inputs.description, len(inputs.records), len(inputs.errors), config.num_conformers, todo_rows,
                 plan.rows_done)
        if on_start is not None:
            on_start(todo_rows, plan.rows_done)
        rows = _Rows(writer, summary, on_row)
        for job in plan.unusable:
            rows.error(job, job.record.error or "unusable input")
        if plan.jobs:
            _generate(model, plan.jobs, config, options, rows, summary)
    summary.wall_s = time.perf_counter() - started
    return summary


def _generate(model, jobs: list[MoleculeJob], config: PipelineConfig, options: dict[str, Any], rows: _Rows,
              summary: PipelineSummary) -> None:
    from inferlab.engine import Engine, EngineConfig
    from inferlab.models.config import read_model_spec

    profile = get_profile(config.profile)
    with MoleculePreparer(model, profile.name, config.pool_workers(len(jobs))) as preparer, ExitStack() as life:
        feed = _MoleculeFeed(jobs, preparer, lookahead=config.lookahead_molecules(config.wave_size(None)))
        feed.top_up(0)  # the pool starts on the first molecules while the engine starts
        if options.get("max_seq_len") is None:
            options["max_seq_len"] = auto_max_seq_len(jobs, profile, read_model_spec(model).max_position_embeddings)
        t0 = time.perf_counter()
        engine = life.enter_context(Engine(EngineConfig(model=model, seed=config.seed, **options)))
        summary.engine_start_s = time.perf_counter() - t0
        summary.slots, summary.max_seq_len, summary.device = engine.plan.slots, engine.plan.max_seq_len, str(engine.device)
        wave_size = config.wave_size(engine.plan.slots)
        feed.lookahead = config.lookahead_molecules(wave_size)
        log.info("engine ready in %.1f s: %d slots x %d tokens; waves of %d requests, %s",
                 summary.engine_start_s, summary.slots, summary.max_seq_len, wave_size, config.sampling.describe())
        sampling = config.sampling.params()
        for wave in _waves(feed, wave_size, engine.plan.max_seq_len, sampling, rows):
            summary.waves += 1
            summary.molecules_run += len({id(r.metadata["job"]) for r in wave})
            stream_start, handling = time.perf_counter(), 0.0
            for result in engine.stream(wave):
                t = time.perf_counter()
                job, molecule, index = result.metadata["job"], result.metadata["molecule"], result.metadata["k"]
                verdict = judge(result, molecule, profile)
                summary.prompt_tokens += result.prompt_tokens
                summary.output_tokens += len(result.token_ids)
                summary.conformers_generated += result.ok
                summary.conformers_rejected += result.ok and not verdict.ok
                if verdict.ok:
                    summary.graph_matches += bool(verdict.fields["graph_match"])
                    rows.ok(job, index, molecule.template.canonical_smiles, verdict.mol, verdict.fields)
                else:
                    rows.error(job, verdict.error, [index], verdict.fields)
                handling += time.perf_counter() - t
            summary.decode_s += handling
            summary.generate_s += time.perf_counter() - stream_start - handling
        summary.template_wait_s, summary.template_cpu_s = feed.wait_s, feed.cpu_s


class _MoleculeFeed:
    """The jobs' prepared molecules in input order, keeping the pool `lookahead` molecules ahead."""

    def __init__(self, jobs: list[MoleculeJob], preparer: MoleculePreparer, lookahead: int) -> None:
        self.jobs, self.preparer, self.lookahead = jobs, preparer, lookahead
        self._submitted = 0
        self._uses = Counter(job.record.smiles for job in jobs)
        self.wait_s = 0.0
        self.cpu_s = 0.0

    def top_up(self, position: int) -> None:
        while self._submitted < min(len(self.jobs), position + self.lookahead):
            self.preparer.submit(self.jobs[self._submitted].record.smiles)
            self._submitted += 1

    def __iter__(self) -> Iterator[tuple[MoleculeJob, PreparedMolecule]]:
        for position, job in enumerate(self.jobs):
            self.top_up(position + 1)
            t = time.perf_counter()
            prepared = self.preparer.result(job.record.smiles)
            self.wait_s += time.perf_counter() - t
            self.cpu_s += prepared.seconds
            self._uses[job.record.smiles] -= 1
            if self._uses[job.record.smiles] == 0:
                self.preparer.forget(job.record.smiles)
            yield job, prepared


def _waves(feed: _MoleculeFeed, wave_size: int, max_seq_len: int, sampling, rows: _Rows) -> Iterator[list[Request]]:
    """Lists of about `wave_size` requests (whole molecules); molecules that cannot run become error rows."""
    wave: list[Request] = []
    for job, molecule in feed:
        if not molecule.ok:
            rows.error(job, molecule.error)
            continue
        if molecule.tokens_needed > max_seq_len:
            rows.error(job, f"the prompt ({len(molecule.prompt_ids)} tokens) and the longest conformer of this "
                            f"molecule ({molecule.program.max_new_tokens} tokens, {molecule.template.num_atoms} atoms) "
                            f"need {molecule.tokens_needed} positions, over max_seq_len={max_seq_len}; rerun with "
                            f"--max-seq-len {molecule.tokens_needed} or more (memory allowing)")
            continue
        for k in job.todo:
            wave.append(Request(id=f"{job.record.id}#{k}", prompt_ids=molecule.prompt_ids, sampling=sampling,
                                constraint=molecule.program, metadata={"job": job, "molecule": molecule, "k": k}))
        if len(wave) >= wave_size:
            yield wave
            wave = []
    if wave:
        yield wave
