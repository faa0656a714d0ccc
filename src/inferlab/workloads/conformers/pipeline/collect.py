"""The engine's results -> the job's rows, with as little as possible on the engine's path.

`ResultCollector.take(result)` is all the consumer loop does per result: it reads the result's
ConformerTask (its metadata, task.py), builds a plain JudgeTask and hands it to the judge pool
(judge_pool.py) in batches of the pool's `batch_size` (a partial batch once its first result has waited
BATCH_WAIT_S, and at `drain`), then takes whatever verdicts are ready, oldest first. The RowWriter writes rows in input
order (input_order.py): a row that finished before an earlier one waits for it. A verdict becomes:
- an ok row: its SDF record (made in the worker) appended and flushed, then its JSONL row;
- an error row (the engine refused the request, or the output is not a valid conformer);
- a retry (its geometry contradicts the input's stereo and attempts are left): the next attempt goes
  back into the RequestFeed, the row is written when its last attempt is judged.
At most `window` results are in the pool: a full window waits for the oldest (backpressure: memory stays
bounded, and a pool that cannot keep up slows the engine rather than hoarding results). `drain()` waits
for everything. All writing happens here, in the calling thread, so the writer needs no locks; a crash
loses only rows not written yet (an interrupt loses no finished row: RowWriter.flush), and a rerun generates
them again.

Not here: judging (judge.py), the requests (feed.py).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any

from inferlab.input_order import InputOrder
from inferlab.types import Result
from inferlab.workloads.conformers.chemistry.sdf import row_id
from inferlab.workloads.conformers.pipeline.feed import RequestFeed
from inferlab.workloads.conformers.pipeline.judge import JudgeTask, Verdict
from inferlab.workloads.conformers.pipeline.judge_pool import JudgePool
from inferlab.workloads.conformers.pipeline.output import ConformerResultWriter
from inferlab.workloads.conformers.pipeline.plan import MoleculeJob
from inferlab.workloads.conformers.pipeline.pressure import NO_FIELDS, row_pressure, whole_conformer_pressure
from inferlab.workloads.conformers.pipeline.stats import PipelineSummary
from inferlab.workloads.conformers.pipeline.task import ConformerTask

BATCH_WAIT_S = 0.05  # the longest a finished conformer waits for its batch to fill (about one decode chunk)

RowCallback = Callable[[dict[str, Any]], None]


class RowWriter:
    """Writes rows through the ConformerResultWriter in the order of `jobs` (every record with rows to write,
    in input order, read as a stream), keeps the summary's counts and tells `on_row` ({"id", "input_id",
    "conformer_index", "status", "generated", "output_tokens", "tokens_bound"}) as each finishes; `generated`
    is False for rows of molecules that never reached the engine, `output_tokens` counts every attempt,
    `tokens_bound` their programs' bound (a progress bar's estimate of what the rows still running will take).
    The rows of a record that cannot be used are written when the order reaches it (nothing waits for them).
    `flush()` writes the finished rows still waiting for an earlier one (the run is ending)."""

    def __init__(self, writer: ConformerResultWriter, summary: PipelineSummary, on_row: RowCallback | None,
                 jobs: Iterable[MoleculeJob]) -> None:
        self.writer, self.summary, self.on_row = writer, summary, on_row
        self._order = InputOrder(self._row_order(jobs), lambda write: write())

    def _row_order(self, jobs: Iterable[MoleculeJob]) -> Iterator[str]:
        """The ids of the rows to wait for; an unusable record's rows are written here, in their turn (the
        next id is asked for once every row before it is written)."""
        for job in jobs:
            record = job.record
            if record.ok:
                yield from (row_id(record.id, k) for k in job.todo)
                continue
            message = record.error or "unusable input"
            for k in job.todo:
                self.writer.write_error(record.id, record.smiles, k, message, None)
                self._count_error(job, k, message, None, 0)

    def error(self, job: MoleculeJob, message: str, indices=None, fields: dict | None = None, bound: int = 0) -> None:
        record = job.record
        for k in job.todo if indices is None else indices:
            self._order.put(row_id(record.id, k), lambda k=k: self.writer.write_error(
                record.id, record.smiles, k, message, fields))
            self._count_error(job, k, message, fields, bound)

    def _count_error(self, job: MoleculeJob, k: int, message: str, fields: dict | None, bound: int) -> None:
        self.summary.conformers_error += 1
        self.summary.errors.add(row_id(job.record.id, k), message)
        self._tell(job, k, "error", fields, bound)

    def ok(self, job: MoleculeJob, k: int, canonical: str, record: str, fields: dict, bound: int = 0) -> None:
        # the row's `smiles` is the input's, as in error rows (the writer would put the canonical form there)
        row = {"smiles": job.record.smiles, **fields}
        self._order.put(row_id(job.record.id, k), lambda: self.writer.write_ok_record(
            job.record.id, canonical, k, record, row))
        self.summary.conformers_ok += 1
        self._tell(job, k, "ok", fields, bound)

    def flush(self, to_end: bool = False) -> None:
        """`to_end`: the run is complete: the rows the order writes itself after the last one put too."""
        self._order.flush(to_end)

    def _tell(self, job: MoleculeJob, k: int, status: str, fields: dict | None, bound: int) -> None:
        if self.on_row is not None:
            fields = fields or {}
            self.on_row({"id": f"{job.record.id}#{k}", "input_id": job.record.id, "conformer_index": k,
                         "status": status, "generated": "finish_reason" in fields,
                         "output_tokens": fields.get("generated_tokens", 0), "tokens_bound": bound})


class ResultCollector:
    def __init__(self, judges: JudgePool, feed: RequestFeed, rows: RowWriter, summary: PipelineSummary,
                 profile: str, stereo_retries: int, stereo_mirror: bool, window: int, model_dir: str) -> None:
        self.judges, self.feed, self.rows, self.summary = judges, feed, rows, summary
        self.model_dir = model_dir
        self.profile, self.stereo_retries, self.stereo_mirror, self.window = (profile, stereo_retries, stereo_mirror,
                                                                              window)
        # sent to the judges, oldest first: (task, its batch's future, its place in the batch, the whole
        # conformer's token ids)
        self._pending: deque[tuple[ConformerTask, Future[list[Verdict]], int, tuple[int, ...]]] = deque()
        self._unsent: list[tuple[ConformerTask, JudgeTask]] = []  # the batch being filled
        self._unsent_since = 0.0
        self.wait_s = 0.0  # time take() waited for a full window (counted in the consumer's time)
        self.write_s = 0.0

    def take(self, result: Result) -> None:
        task: ConformerTask = result.metadata  # feed.conformer_request put it there; the engine hands it back
        s = self.summary
        s.prompt_tokens += result.prompt_tokens
        s.output_tokens += len(result.token_ids)
        s.conformers_generated += result.ok
        s.retry_output_tokens += len(result.token_ids) if task.attempt else 0
        token_ids = task.prefix + tuple(result.token_ids)  # the whole conformer (a retry's kept tokens first)
        pressure = row_pressure(whole_conformer_pressure(result.constraint_pressure, task), task.molecule, token_ids)
        s.pressure.add(task.request_id, pressure)
        judge_task = JudgeTask(input_id=task.job.record.id, conformer_index=task.k, attempt=task.attempt,
                               may_retry=task.attempt < self.stereo_retries, stereo_mirror=self.stereo_mirror,
                               template=task.molecule.template,
                               profile=self.profile, model_dir=self.model_dir, token_ids=token_ids,
                               finish_reason=result.finish_reason, engine_error=result.error,
                               prompt_tokens=result.prompt_tokens, output_tokens=len(result.token_ids),
                               pressure=pressure.fields() if pressure is not None else NO_FIELDS)
        now = time.perf_counter()
        if not self._unsent:
            self._unsent_since = now
        self._unsent.append((task, judge_task))
        # a partial batch goes once it has waited BATCH_WAIT_S: the last rows of a stream, slow tails
        if len(self._unsent) >= self.judges.batch_size or now - self._unsent_since >= BATCH_WAIT_S:
            self._send()
        if len(self._pending) > self.window:
            t = time.perf_counter()
            self._pending[0][1].result()
            self.wait_s += time.perf_counter() - t
        self._write_ready()

    def drain(self) -> None:
        """Wait for every verdict and write it (retries are queued in the feed)."""
        self._send()
        while self._pending:
            self._pending[0][1].result()
            self._write_ready()

    def _send(self) -> None:
        if not self._unsent:
            return
        future = self.judges.submit([judge_task for _, judge_task in self._unsent])
        self._pending.extend((task, future, i, judge_task.token_ids)
                             for i, (task, judge_task) in enumerate(self._unsent))
        self._unsent = []

    def _write_ready(self) -> None:
        t = time.perf_counter()
        while self._pending and self._pending[0][1].done():
            task, future, i, token_ids = self._pending.popleft()
            self._handle(task, future.result()[i], token_ids)
        self.write_s += time.perf_counter() - t

    def _handle(self, task: ConformerTask, verdict: Verdict, token_ids: tuple[int, ...]) -> None:
        s, fields = self.summary, verdict.fields
        s.decode_s += verdict.seconds
        s.conformers_rejected += fields["finish_reason"] != "error" and not verdict.ok
        if verdict.retry:
            s.stereo_retries += 1
            self.feed.retry(task, fields["output_tokens"], token_ids, verdict.retry_from_atom)
            return
        fields = {**fields, "attempts": task.attempt + 1,
                  "generated_tokens": task.earlier_tokens + fields["output_tokens"]}
        bound = task.molecule.program.max_new_tokens * (task.attempt + 1)  # every attempt's, as generated_tokens
        if not verdict.ok:
            self.rows.error(task.job, verdict.error, [task.k], fields, bound)
            return
        s.graph_matches += bool(fields["graph_match"])
        if fields["stereo_ok"] is not None:
            s.stereo_checked += 1
            s.stereo_matches += fields["stereo_ok"]
            s.stereo_mirrored += fields["mirrored"]
        assert verdict.sdf_record is not None
        self.rows.ok(task.job, task.k, task.molecule.template.canonical_smiles, verdict.sdf_record, fields, bound)
