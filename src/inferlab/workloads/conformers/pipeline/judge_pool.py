"""Where finished conformers are judged (judge.judge): a pool of worker processes, or this process.

The engine's stream hands back a result right after it launched the next decode chunk, so whatever the
pipeline does before asking for the next result is time the GPU may stand idle. Judging costs CPU time
per conformer (docs/decisions.md) and holds the GIL throughout (RDKit's parsing, stereo perception and
SDF writing do not release it: two threads judge no faster than one), so threads would only slow the
engine's own host loop: judging runs in `workers` spawn processes (spawn: the parent holds CUDA state)
that import RDKit and the conformer modules only, never torch, and end with this process however it ends
(child_processes.py). `workers=0` judges inline (tests, small jobs); a task then is judged at `submit`,
and its future is already done.

The conformers go to the processes in batches (`batch_size`, BATCH per pool task): each ProcessPoolExecutor
task costs this process CPU in the executor's own threads (pickling the call, a feeder and a result thread),
which take the GIL from the engine's decode loop; a batch pays it once for BATCH conformers
(docs/decisions.md, "Conformers go to the judges in batches").

Not here: what to do with a verdict (collect.py).
"""

from __future__ import annotations

from concurrent.futures import Future

from inferlab.child_processes import spawn_pool
from inferlab.workloads.conformers.pipeline.judge import JudgeTask, Verdict, judge_all, tokenizer_for
from inferlab.workloads.conformers.pipeline.worker_pool import OptionalWorkerPool


def _ready(model_dir: str) -> None:
    """A task that makes a worker process start (importing this module, RDKit with it) and load the
    checkpoint's tokenizer, before the first result arrives."""
    tokenizer_for(model_dir)


BATCH = 8  # conformers per pool task (the collector sends a partial batch after BATCH_WAIT_S)


class JudgePool(OptionalWorkerPool):
    def __init__(self, workers: int, model_dir: str) -> None:
        self.workers = workers
        self.batch_size = BATCH if workers > 0 else 1  # inline, a batch would only delay the rows
        if workers > 0:
            self._pool = spawn_pool(workers)  # they end with this process, however it ends
            for _ in range(workers):  # start every process now (imports, tokenizer), while the engine starts up
                self._pool.submit(_ready, model_dir)

    def submit(self, tasks: list[JudgeTask]) -> Future[list[Verdict]]:
        """The verdicts of `tasks`, in their order, as one future."""
        if self._pool is not None:
            return self._pool.submit(judge_all, tasks)
        future: Future[list[Verdict]] = Future()
        future.set_result(judge_all(tasks))
        return future
