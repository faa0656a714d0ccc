"""Which processes descend from a pid or belong to a session, and whether they are gone (read from /proc;
a zombie counts as gone: it runs nothing, and whoever adopted it reaps it when it likes). A process
started with start_new_session=True leads a session that its children, grandchildren and processes
reparented after its death stay in, so `session_members(pid)` finds everything it started."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, session, ...


def running(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def descendants(pid: int) -> set[int]:
    """Every running process below `pid` now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def session_members(session: int) -> set[int]:
    """Every running process of session `session` (the pid of its leader)."""
    members = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None and fields[0] != "Z" and int(fields[3]) == session:
            members.add(int(entry))
    return members


def wait_for_descendants(pid: int, count: int, timeout_s: float) -> set[int]:
    """The descendants of `pid` once there are at least `count` (or whatever there is at the timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = descendants(pid)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    return descendants(pid)


def still_running(pids: set[int], timeout_s: float = 5.0) -> set[int]:
    """Those of `pids` still running after up to `timeout_s` (empty as soon as all are gone)."""
    deadline = time.monotonic() + timeout_s
    left = set(pids)
    while left and time.monotonic() < deadline:
        left = {p for p in left if running(p)}
        time.sleep(0.05)
    return left


def kill_all(pids: set[int]) -> None:
    """Clean up after a failed check: SIGKILL whatever of `pids` is left."""
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
