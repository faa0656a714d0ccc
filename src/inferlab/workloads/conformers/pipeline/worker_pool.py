"""The optional worker pool of the pipeline's CPU stages (judging, preparing molecules).

A stage with `_pool` None does its work inline in this process; `close` (or leaving a `with` block) shuts
the pool down, waiting for running tasks and cancelling queued ones.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import TypeVar

PoolT = TypeVar("PoolT", bound="OptionalWorkerPool")


class OptionalWorkerPool:
    _pool: Executor | None = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self: PoolT) -> PoolT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
