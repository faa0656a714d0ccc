"""Triton compiles in worker processes, for the start-up precompile's compile threads.

On an H200 with Triton 3.6 the precompile's 32 compiles took 13.5 s of wall in 15 threads against 12.1 s one
after another (decisions.md, "The precompile compiles in processes"): Triton's front end and parts of its
passes hold the GIL, so threads only take turns. A process holds its own. CompileProcesses starts its
workers (compile_worker.py) at once, so their imports overlap what the parent does meanwhile; a compile
thread borrows an idle worker for one job (compile_jobs.CompileJob), waits for it, and then lets the JIT
compile as usual, which finds the kernel in Triton's disk cache and only loads it. Whatever a worker cannot
do (a kernel it cannot import, an unpicklable constant, a compile error, a worker that died) the thread's own
compile does, as without processes: the processes can only save time.
"""

from __future__ import annotations

import logging
import os
import queue
import subprocess
import sys
import threading
import time
from typing import IO, Any

from inferlab.engine.compile_jobs import CompileJob, frame, read_frame

log = logging.getLogger(__name__)


class CompileProcesses:
    def __init__(self, count: int, cache_dir: str) -> None:
        self.count = count
        # the parent's import path, so a worker imports the kernels' modules from where the parent did
        env = dict(os.environ, TRITON_CACHE_DIR=cache_dir, PYTHONPATH=os.pathsep.join(p or "." for p in sys.path))
        self._workers = [subprocess.Popen([sys.executable, "-m", "inferlab.engine.compile_worker"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
                         for _ in range(count)]  # fmt: skip
        self._idle: queue.Queue[subprocess.Popen] = queue.Queue()
        for worker in self._workers:
            self._idle.put(worker)
        self._lock = threading.Lock()
        self._alive = count
        self.compiled = 0  # jobs a worker compiled (or found in the cache)
        self.declined: list[str] = []  # why a job was left to the thread (first few kept)
        self.worker_s = 0.0  # the workers' compile time, summed
        self.wait_s = 0.0  # the compile threads' time waiting for a free worker, summed
        self._imports_s: dict[int, float] = {}  # worker pid -> its start-up (its first "ready" answer)

    def compile(self, job: CompileJob) -> bool:
        """Compile `job` into Triton's disk cache in a worker; False when it did not (the caller compiles)."""
        try:
            data = frame(job)
        except Exception as e:  # a constant pickle cannot carry
            return self._declined(f"not picklable ({type(e).__name__}: {e})")
        waiting = time.perf_counter()
        worker = self._borrow()
        with self._lock:
            self.wait_s += time.perf_counter() - waiting
        if worker is None:
            return self._declined("no compile worker left")
        try:
            if worker.pid not in self._imports_s:  # its first frame says it is ready (and how long it took)
                ready = read_frame(worker.stdout)
                if ready is None:
                    raise OSError("no ready answer")
                self._imports_s[worker.pid] = ready[1]
            answer = _exchange(worker, data)
        except OSError as e:
            answer = None
            log.debug("compile worker %d: %s", worker.pid, e)
        if answer is None:  # it died (its stderr says why); the others carry on
            with self._lock:
                self._alive -= 1
            return self._declined(f"compile worker exited (code {worker.poll()})")
        self._idle.put(worker)
        status, detail = answer
        if status != "ok":
            return self._declined(f"{status}: {detail}")
        with self._lock:
            self.compiled += 1
            self.worker_s += detail
        return True

    def phases(self) -> dict[str, float]:
        """Seconds: waiting for a worker (summed over the threads), the workers' compiles (summed), the slowest
        worker's start-up."""
        return {"worker_wait_s": self.wait_s, "worker_compile_s": self.worker_s,
                "worker_start_s": max(self._imports_s.values(), default=0.0)}

    def _borrow(self) -> subprocess.Popen | None:
        while True:
            try:
                return self._idle.get(timeout=0.2)
            except queue.Empty:
                with self._lock:
                    if self._alive <= 0:
                        return None

    def _declined(self, why: str) -> bool:
        with self._lock:
            if len(self.declined) < 8:
                self.declined.append(why)
        return False

    def close(self) -> None:
        """End every worker (EOF on its stdin); one that does not exit within 5 s is killed."""
        for worker in self._workers:
            try:
                worker.stdin.close()
            except OSError:
                pass
        for worker in self._workers:
            try:
                worker.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            worker.stdout.close()


def _exchange(worker: subprocess.Popen, data: bytes) -> Any:
    stdin: IO[bytes] = worker.stdin
    stdin.write(data)
    stdin.flush()
    return read_frame(worker.stdout)
