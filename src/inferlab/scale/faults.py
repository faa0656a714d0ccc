"""A test hook that kills a worker mid-run, to prove that nothing is lost or written twice.

Set INFERLAB_SCALE_FAULT="shard=1,after_rows=3[,attempts=1]" in the coordinator's environment: the worker
of shard 1 ends its own process abruptly (os._exit, no clean-up, like a crash or an OOM kill) once it
has finished 3 rows, on its first `attempts` attempts. The coordinator reads the variable when it
builds tasks, so the hook reaches local, Ray and Slurm workers alike. Not for production use.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from inferlab.errors import ConfigError

log = logging.getLogger(__name__)

FAULT_ENV = "INFERLAB_SCALE_FAULT"
FAULT_EXIT_CODE = 97


@dataclass(frozen=True)
class FaultPlan:
    shard: int
    after_rows: int
    attempts: int = 1

    @staticmethod
    def from_env() -> FaultPlan | None:
        text = os.environ.get(FAULT_ENV, "").strip()
        return FaultPlan.parse(text) if text else None

    @staticmethod
    def parse(text: str) -> FaultPlan:
        try:
            fields = dict(part.split("=", 1) for part in text.split(","))
            return FaultPlan(**{k.strip(): int(v) for k, v in fields.items()})
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{FAULT_ENV}={text!r} is not 'shard=N,after_rows=K[,attempts=A]': {e}") from None

    def applies(self, shard: int, attempt: int) -> bool:
        return shard == self.shard and attempt <= self.attempts


def row_counter(after_rows: int | None) -> Callable[[int], None]:
    """A progress callback that counts finished rows and, with `after_rows`, ends the process there."""
    done = 0

    def progress(rows: int) -> None:
        nonlocal done
        done += rows
        if after_rows is not None and done >= after_rows:
            log.error("fault hook: ending this worker after %d rows (%s)", done, FAULT_ENV)
            logging.shutdown()
            os._exit(FAULT_EXIT_CODE)

    return progress
