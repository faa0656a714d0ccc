"""What every launcher does: start shard tasks, say when each has ended and how, cancel, clean up.

Only "how a shard runs" differs between launchers; planning, retries, resume and merging are the
coordinator's. A launcher also says how many workers `--gpus all` means where it runs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from inferlab.scale.worker import ShardTask

LOG_TAIL_LINES = 25


@dataclass(frozen=True)
class Outcome:
    ok: bool
    message: str = ""  # why it failed, in one line
    log_tail: str = ""  # the last lines the worker wrote


class Launcher(Protocol):
    workers: int  # the number of workers (resolved from "all" where needed)
    capacity: int | None  # tasks that may run at once; None: all (the cluster queues them)

    def start(self, tasks: list[ShardTask]) -> list[Any]:
        """Start `tasks`; returns one handle per task."""

    def poll(self, handle: Any) -> Outcome | None:
        """The outcome of a finished task, or None while it runs."""

    def cancel(self, handle: Any) -> None: ...

    def close(self) -> None: ...


def log_tail(path: str | Path, lines: int = LOG_TAIL_LINES) -> str:
    p = Path(path)
    if not p.exists():
        return ""
    with p.open(encoding="utf-8", errors="replace") as f:
        return "".join(deque(f, maxlen=lines)).rstrip()
