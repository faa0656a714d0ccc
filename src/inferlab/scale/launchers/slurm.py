"""Slurm launcher: the shards as one submitit job array with one GPU per task (`AutoExecutor`,
`map_array`): partition, account, time limit, CPUs and memory per task, and `slurm_array_parallelism` to
cap the tasks running at once. Each task runs worker.run_shard; its log goes to the shard's log file and
submitit keeps its own logs in the logs folder (default <work dir>/slurm). Both must be on a shared
filesystem. Retries are submitted by the coordinator as new arrays of the failed shards.

`SlurmOptions.cluster="local"` runs the same path through submitit's LocalExecutor (tests, no Slurm); with
the default (detect) and no Slurm on the machine the launcher refuses, naming the fix, instead of running
there through that local executor.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from inferlab.errors import ConfigError, UnsupportedError
from inferlab.scale.config import ALL_GPUS, ScaleConfig
from inferlab.scale.launchers.base import Outcome, log_tail
from inferlab.scale.workdir import WorkDir
from inferlab.scale.worker import ShardTask, run_shard

log = logging.getLogger(__name__)


@dataclasses.dataclass
class SlurmHandle:
    task: ShardTask
    job: Any  # submitit.Job
    ended_at: float | None = None  # when the job was first seen ended without its result file


class SlurmLauncher:
    def __init__(self, config: ScaleConfig, work: WorkDir) -> None:
        try:
            import submitit
        except ImportError:
            raise UnsupportedError("--launcher slurm needs submitit: pip install 'inferlab[scale]'") from None
        if config.workers == ALL_GPUS:
            raise ConfigError("--launcher slurm needs the number of array tasks: pass --gpus N")
        options = config.slurm
        folder = options.logs or str(work.path("slurm"))
        if options.cluster is None:  # detect: submitit would fall back to its local executor without a word
            try:
                found = submitit.AutoExecutor.which()
            except RuntimeError:
                found = "none"
            if found != "slurm":
                raise UnsupportedError(
                    "--launcher slurm: there is no Slurm here (no sbatch on this machine's PATH); run the command on "
                    "a Slurm login node, or use --launcher local (worker processes on this host) or --launcher ray"
                )
        self._executor = submitit.AutoExecutor(folder=folder, cluster=options.cluster or "slurm")
        self.workers = int(config.workers)
        self.capacity: int | None = None  # Slurm queues the array; array_parallelism caps what runs
        self._threads = options.cpus_per_task
        self._result_wait_s = options.result_wait_s
        parameters: dict[str, Any] = {
            "name": "inferlab-scale",
            "timeout_min": options.time_min,
            "gpus_per_node": 1 if config.device == "cuda" else 0,
            "cpus_per_task": options.cpus_per_task,
            "slurm_array_parallelism": options.array_parallelism or self.workers,
        }
        optional = {"slurm_partition": options.partition, "slurm_account": options.account, "mem_gb": options.mem_gb}
        parameters.update({k: v for k, v in optional.items() if v is not None})
        self._executor.update_parameters(**parameters)
        log.info("submitit %s executor, logs in %s", self._executor.cluster, folder)

    def start(self, tasks: list[ShardTask]) -> list[SlurmHandle]:
        tasks = [dataclasses.replace(task, threads=self._threads) for task in tasks]
        jobs = self._executor.map_array(run_shard, tasks)
        for task, job in zip(tasks, jobs):
            log.info("shard %d attempt %d: job %s", task.shard, task.attempt, job.job_id)
        return [SlurmHandle(task, job) for task, job in zip(tasks, jobs)]

    def poll(self, handle: SlurmHandle) -> Outcome | None:
        job = handle.job
        if not job.done():
            return None
        if not job.paths.result_pickle.exists():
            # A job that died leaves no result file; one that ended well may show it late on a shared
            # filesystem. Wait for it here, between polls, rather than inside submitit's blocking result().
            now = time.monotonic()
            handle.ended_at = handle.ended_at or now
            if now - handle.ended_at < self._result_wait_s:
                return None
            tail = log_tail(handle.task.log) or _job_stderr_tail(job)
            return Outcome(False, f"job {job.job_id} ended without a result (state {job.state})", tail)
        try:
            handle.job.result()
        except Exception as e:  # the shard raised, or the job died / timed out / was cancelled
            text = str(e).strip()
            tail = log_tail(handle.task.log) or _job_stderr_tail(handle.job)
            first = text.splitlines()[0] if text else type(e).__name__
            return Outcome(False, f"job {handle.job.job_id}: {first}", tail)
        return Outcome(True)

    def cancel(self, handle: SlurmHandle) -> None:
        handle.job.cancel(check=False)

    def close(self) -> None:
        pass


def _job_stderr_tail(job: Any) -> str:
    try:
        return log_tail(job.paths.stderr)
    except Exception:  # paths of a job that never started
        return ""
