"""The scaled run: plan (or reuse the plan), run every unfinished shard through the launcher, retry failed
shards, count progress from the shard outputs, and merge the outputs in input order once all shards are
done.

Each shard's output is resumable on its own (the workload's writers skip what is there), so a retry or a
rerun continues where the shard stopped and a finished shard is never run again. A shard that fails
past its retries is reported with its log tail; the other shards finish and keep their outputs, and the
merged output is written only when every shard is done (a rerun completes it). Ctrl-C cancels the
running workers and leaves their shards pending.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError
from inferlab.scale.adapter import WorkloadAdapter, get_adapter
from inferlab.scale.config import ScaleConfig, ScaleJob
from inferlab.scale.faults import FaultPlan
from inferlab.scale.launchers import LAUNCHERS
from inferlab.scale.launchers.base import Launcher, Outcome
from inferlab.scale.order import OrderIndex
from inferlab.scale.partition import ShardLoad, imbalance
from inferlab.scale.plan import check_reuse, make_plan
from inferlab.scale.progress import LineCounter, ProgressCounter
from inferlab.scale.report import ScaleReport, ShardReport
from inferlab.outputs.manifest import file_sha256
from inferlab.scale.units import read_units
from inferlab.outputs.atomic import write_json_atomic
from inferlab.scale.workdir import Manifest, ShardState, WorkDir
from inferlab.scale.worker import ShardTask

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (rows done over all shards, rows in total)


def run_scaled(job: ScaleJob, config: ScaleConfig, on_progress: Progress | None = None) -> ScaleReport:
    if config.launcher not in LAUNCHERS:
        raise ConfigError(f"launcher {config.launcher!r} is not known; use one of {', '.join(LAUNCHERS)}")
    adapter = get_adapter(job.workload)
    work = WorkDir(config.work_dir_for(job.output))
    started = time.perf_counter()
    settings = json.loads(json.dumps(adapter.settings(job.params)))  # as the manifest stores them
    with work.locked():
        manifest = work.load_manifest()
        input_sha256 = file_sha256(job.input)
        if manifest is None:
            _refuse_foreign_output(adapter, job, work)
        else:
            check_reuse(manifest, job, work, settings, input_sha256)
        launcher = LAUNCHERS[config.launcher](config, work)
        try:
            reused = manifest is not None
            if manifest is None:
                manifest = make_plan(job, adapter, work, settings, input_sha256, config.num_shards or launcher.workers)
            elif config.num_shards and config.num_shards != len(manifest.shards):
                log.warning("keeping the %d shards planned by the earlier run (--num-shards %d ignored); "
                            "delete %s to plan again", len(manifest.shards), config.num_shards, work.root)
            run = ShardRun(manifest, adapter, job, config, launcher, work)
            run.run(on_progress)
        finally:
            launcher.close()
        merged = None
        if all(s.status == "done" for s in manifest.shards):
            merged = _merge(manifest, adapter, job, work)
        report = run.report(config, launcher.workers, time.perf_counter() - started, reused, merged)
        write_json_atomic(work.report_path, report.to_json())
    return report


class ShardRun:
    """One pass over the unfinished shards of a manifest, with retries."""

    def __init__(self, manifest: Manifest, adapter: WorkloadAdapter, job: ScaleJob, config: ScaleConfig,
                 launcher: Launcher, work: WorkDir) -> None:
        self.manifest, self.adapter, self.job, self.config = manifest, adapter, job, config
        self.launcher, self.work = launcher, work
        self.fault = FaultPlan.from_env()
        self.tries: dict[int, int] = {}  # attempts in this run
        self.failures: dict[int, Outcome] = {}
        self.progress = ProgressCounter([self._progress_file(s) for s in manifest.shards])
        self.rows_before = self.progress.total()

    def _progress_file(self, shard: ShardState) -> Path:
        return self.adapter.progress_file(self.work.path(shard.output))

    def _rows_written(self, shard: ShardState) -> int:
        return LineCounter(self._progress_file(shard)).count()

    def run(self, on_progress: Progress | None) -> None:
        for shard in self.manifest.shards:  # a finished shard whose output was touched since runs again
            if shard.status == "done" and self.adapter.rows_exact and self._rows_written(shard) != shard.rows:
                log.warning("shard %d was done but its output no longer holds its %d rows; running it again",
                            shard.index, shard.rows)
                shard.status = "pending"
        queue = deque(s for s in self.manifest.shards if s.status != "done")
        running: dict[int, tuple[Any, ShardState]] = {}
        total = self.manifest.rows_total
        try:
            while queue or running:
                room = len(queue) if self.launcher.capacity is None else self.launcher.capacity - len(running)
                batch = [queue.popleft() for _ in range(min(room, len(queue)))]
                if batch:
                    tasks = [self._task(s) for s in batch]
                    self.work.save_manifest(self.manifest)
                    for shard, handle in zip(batch, self.launcher.start(tasks)):
                        running[shard.index] = (handle, shard)
                for index, (handle, shard) in list(running.items()):
                    outcome = self.launcher.poll(handle)
                    if outcome is not None:
                        del running[index]
                        self._finish(shard, outcome, queue)
                if on_progress:
                    on_progress(self.progress.total(), total)
                if queue or running:
                    time.sleep(self.config.poll_s)
        except BaseException:
            for handle, shard in running.values():
                self.launcher.cancel(handle)
                shard.status = "pending"
            self.work.save_manifest(self.manifest)
            raise

    def _task(self, shard: ShardState) -> ShardTask:
        shard.attempts += 1
        shard.status = "running"
        self.tries[shard.index] = self.tries.get(shard.index, 0) + 1
        shard.log = self.work.log_file(shard.index, shard.attempts)
        fault = self.fault if self.fault and self.fault.applies(shard.index, self.tries[shard.index]) else None
        return ShardTask(
            workload=self.job.workload,
            shard=shard.index,
            attempt=shard.attempts,
            input=str(self.work.path(shard.input).resolve()),
            output=str(self.work.path(shard.output).resolve()),
            params=self.job.params,
            log=str(self.work.path(shard.log).resolve()),
            stats=str(self.work.path(self.work.stats_file(shard.index)).resolve()),
            device=self.config.device,
            fault_after_rows=fault.after_rows if fault else None,
            launched_at=time.time(),
        )

    def _finish(self, shard: ShardState, outcome: Outcome, queue: deque) -> None:
        if outcome.ok and self.adapter.rows_exact:
            written = self._rows_written(shard)
            if written != shard.rows:
                outcome = Outcome(False, f"the worker ended well but its output holds {written} of {shard.rows} rows",
                                  outcome.log_tail)
        if outcome.ok:
            shard.status, shard.error = "done", None
            self.failures.pop(shard.index, None)
            log.info("shard %d done (attempt %d)", shard.index, shard.attempts)
        elif self.tries[shard.index] <= self.config.retries:
            shard.status, shard.error = "pending", outcome.message
            self.failures[shard.index] = outcome
            queue.append(shard)
            log.warning("shard %d failed (%s); retrying, resuming its output (log: %s)",
                        shard.index, outcome.message, shard.log)
        else:
            shard.status, shard.error = "failed", outcome.message
            self.failures[shard.index] = outcome
            log.error("shard %d failed (%s) after %d attempt(s) in this run; log: %s\n%s", shard.index,
                      outcome.message, self.tries[shard.index], self.work.path(shard.log or ""), outcome.log_tail)
        self.work.save_manifest(self.manifest)

    def report(self, config: ScaleConfig, workers: int, wall_s: float, reused: bool, merged: int | None) -> ScaleReport:
        per_shard = self.progress.per_shard()
        loads = [ShardLoad(s.units, s.rows, s.est_tokens) for s in self.manifest.shards]
        shards = []
        for shard, done in zip(self.manifest.shards, per_shard):
            failure = self.failures.get(shard.index) if shard.status != "done" else None
            stats_path = self.work.path(self.work.stats_file(shard.index))
            shards.append(ShardReport(
                index=shard.index, rows=shard.rows, est_tokens=shard.est_tokens, status=shard.status,
                attempts=shard.attempts, attempts_this_run=self.tries.get(shard.index, 0), rows_done=done,
                log=str(self.work.path(shard.log)) if shard.log else None,
                message=failure.message if failure else shard.error,
                log_tail=failure.log_tail if failure else None,
                stats=json.loads(stats_path.read_text()) if stats_path.exists() and shard.status == "done" else None,
            ))
        return ScaleReport(
            workload=self.job.workload, output=self.job.output, work_dir=str(self.work.root),
            launcher=config.launcher, workers=workers, rows_total=self.manifest.rows_total,
            rows_done=sum(per_shard), rows_before=self.rows_before, wall_s=wall_s, imbalance=imbalance(loads),
            reused_plan=reused, merged_rows=merged, shards=shards,
        )


def _merge(manifest: Manifest, adapter: WorkloadAdapter, job: ScaleJob, work: WorkDir) -> int:
    units, _ = read_units(work.units_path)
    outputs = [work.path(s.output) for s in manifest.shards]
    start = time.perf_counter()
    rows = adapter.merge(outputs, Path(job.output), job.params, OrderIndex(units))
    log.info("merged %d rows of %d shards into %s in %.1f s", rows, len(outputs), job.output,
             time.perf_counter() - start)
    if adapter.rows_exact and rows != manifest.rows_total:
        log.error("the merged output holds %d rows, the plan %d: check %s", rows, manifest.rows_total, work.root)
    return rows


def _refuse_foreign_output(adapter: WorkloadAdapter, job: ScaleJob, work: WorkDir) -> None:
    """An existing output without a plan was written by something else: never overwrite it."""
    for path in adapter.final_outputs(Path(job.output), job.params):
        if path.exists():
            raise ConfigError(
                f"{path} exists but {work.root} holds no scaled run that wrote it; move it away or choose another "
                "--output (a single-process run's output is not resumed by a scaled one)"
            )
