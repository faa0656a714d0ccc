"""Local launcher: one worker subprocess per GPU of this host (`python -m inferlab.scale TASK.json`).

Each worker sees only its own GPU (CUDA_VISIBLE_DEVICES is set to the parent's id for it; everything
else, NCCL_* included, is inherited), gets an equal share of the CPU cores for its threads, and writes
its output to the shard's log file. With `--device cpu` the workers are CPU processes that see no GPU.
Workers end with the coordinator however it ends (child_processes.py), so a killed run leaves no orphan
writing into a shard that a rerun resumes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import inferlab
from inferlab.child_processes import child_environment
from inferlab.errors import ConfigError
from inferlab.scale.config import ALL_GPUS, ScaleConfig
from inferlab.scale.faults import FAULT_ENV, FAULT_EXIT_CODE
from inferlab.scale.launchers.base import Outcome, log_tail
from inferlab.scale.workdir import WorkDir
from inferlab.scale.worker import ShardTask

log = logging.getLogger(__name__)
PACKAGE_ROOT = str(Path(inferlab.__file__).resolve().parents[1])  # workers import this same inferlab


def visible_gpus() -> list[str]:
    """This process's GPUs as CUDA_VISIBLE_DEVICES names them (ids or UUIDs), in order."""
    names = os.environ.get("CUDA_VISIBLE_DEVICES")
    if names is None:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    gpus = []
    for name in (n.strip() for n in names.split(",")):
        if not name or name.startswith("-"):  # CUDA stops enumerating at the first invalid entry
            break
        gpus.append(name)
    return gpus


@dataclass
class LocalWorker:
    task: ShardTask
    slot: int
    process: subprocess.Popen
    log_file: IO


class LocalLauncher:
    def __init__(self, config: ScaleConfig, work: WorkDir) -> None:
        self._work = work
        if config.device == "cuda":
            gpus = visible_gpus()
            if not gpus:
                raise ConfigError("no CUDA device is visible; pass --device cpu to run the workers as CPU processes")
            count = len(gpus) if config.workers == ALL_GPUS else int(config.workers)
            if count > len(gpus):
                raise ConfigError(f"--gpus {count}, but {len(gpus)} GPU(s) are visible ({','.join(gpus)}); "
                                  f"pass --gpus {len(gpus)} or all")
            self._slots: list[str | None] = list(gpus[:count])
        else:
            if config.workers == ALL_GPUS:
                raise ConfigError("--gpus all counts GPUs; with --device cpu give the number of worker processes")
            self._slots = [None] * int(config.workers)
        self.workers = len(self._slots)
        self.capacity: int | None = self.workers
        self._threads = max(1, (os.cpu_count() or 1) // self.workers)
        self._free = list(range(self.workers))
        self._running: dict[int, LocalWorker] = {}

    def start(self, tasks: list[ShardTask]) -> list[LocalWorker]:
        return [self._start_one(task) for task in tasks]

    def _start_one(self, task: ShardTask) -> LocalWorker:
        slot = self._free.pop(0)
        gpu = self._slots[slot]
        task = dataclasses.replace(task, threads=self._threads)
        task_file = self._work.path(self._work.task_file(task.shard, task.attempt))
        task_file.parent.mkdir(parents=True, exist_ok=True)
        task_file.write_text(task.to_json(), encoding="utf-8")
        env = child_environment()  # the worker ends with this process
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env["CUDA_VISIBLE_DEVICES"] = gpu if gpu is not None else ""
        env.setdefault("OMP_NUM_THREADS", str(self._threads))
        env.pop(FAULT_ENV, None)  # the hook travels in the task, where it applies
        Path(task.log).parent.mkdir(parents=True, exist_ok=True)
        log_file = open(task.log, "ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "inferlab.scale", str(task_file)],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        )
        log.info("shard %d attempt %d: pid %d on %s", task.shard, task.attempt, process.pid,
                 f"GPU {gpu}" if gpu is not None else "CPU")
        worker = LocalWorker(task, slot, process, log_file)
        self._running[process.pid] = worker
        return worker

    def poll(self, worker: LocalWorker) -> Outcome | None:
        code = worker.process.poll()
        if code is None:
            return None
        self._release(worker)
        if code == 0:
            return Outcome(True)
        return Outcome(False, _exit_message(code), log_tail(worker.task.log))

    def cancel(self, worker: LocalWorker) -> None:
        if worker.process.poll() is None:
            worker.process.terminate()
            try:
                worker.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
        self._release(worker)

    def close(self) -> None:
        for worker in list(self._running.values()):
            self.cancel(worker)

    def _release(self, worker: LocalWorker) -> None:
        if self._running.pop(worker.process.pid, None) is not None:
            worker.log_file.close()
            self._free.append(worker.slot)


def _exit_message(code: int) -> str:
    if code < 0:
        return f"worker killed by signal {signal.Signals(-code).name}"
    if code == FAULT_EXIT_CODE:
        return f"worker ended by the fault hook ({FAULT_ENV})"
    return f"worker exited with code {code}"
