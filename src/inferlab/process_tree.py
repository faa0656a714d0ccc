"""A child's whole process tree, read from /proc, so that ending a child ends everything it started:
processes that left its process group or session (`setsid`, start_new_session=True) included, which a
group kill misses. No cgroups: the tree is walked from the child's pid while the child lives, and what was
seen is remembered (`ProcessTree.watch`), so a grandchild reparented after its parent's death is still
known. Each process is remembered with its start time, so a pid the system has since reused is never
signalled. Linux only; elsewhere the tree is always empty (the group kill still applies).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after "pid (comm)": state, ppid, pgrp, session, ... (None: gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _start_time(fields: list[str]) -> int:
    return int(fields[19])  # field 22 of stat: the start time in clock ticks after boot


def _children() -> dict[int, list[tuple[int, int]]]:
    """ppid -> [(pid, start time)] of every live process, from one pass over /proc."""
    children: dict[int, list[tuple[int, int]]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for entry in entries:
        if entry.isdigit() and (fields := _stat(int(entry))) is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append((int(entry), _start_time(fields)))
    return children


def _below(roots: list[int], children: dict[int, list[tuple[int, int]]]) -> dict[int, int]:
    found: dict[int, int] = {}
    todo = list(roots)
    while todo:
        for child, started in children.get(todo.pop(), []):
            if child not in found:
                found[child] = started
                todo.append(child)
    return found


def descendants(pid: int) -> dict[int, int]:
    """{pid: start time} of every live process below `pid` now (not `pid` itself)."""
    return _below([pid], _children())


class ProcessTree:
    """The processes seen below one child, remembered across its life."""

    def __init__(self, root: int) -> None:
        """`root`: a child of this process, not yet waited for (its pid cannot have been reused)."""
        fields = _stat(root)
        self.root = (root, _start_time(fields) if fields is not None else -1)
        self.seen: dict[int, int] = {}

    def watch(self) -> None:
        """Remember what runs below the root now, and below every process seen before (reparented ones)."""
        alive = [pid for pid, started in [self.root, *self.seen.items()] if self._same(pid, started)]
        self.seen |= _below(alive, _children())

    def signal(self, sig: int) -> None:
        """Send `sig` to every remembered process still running as the same process."""
        for pid, started in self.seen.items():
            if not self._same(pid, started):
                continue
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    @staticmethod
    def _same(pid: int, started: int) -> bool:
        """`pid` still runs the process seen then (not gone, not a zombie, not a reused pid)."""
        fields = _stat(pid)
        return fields is not None and fields[0] != "Z" and _start_time(fields) == started

    def kill(self) -> None:
        self.watch()
        self.signal(signal.SIGKILL)
