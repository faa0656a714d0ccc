"""Child processes that end with their parent, even when the parent is SIGKILLed.

A killed process runs no cleanup, so each child watches its parent itself: `die_with_parent(pid)`, called
first thing in the child, starts a daemon thread that polls getppid() (a child whose parent died is
reparented, to init or a subreaper) and then kills the child; on Linux it also arms the parent-death
signal (prctl PR_SET_PDEATHSIG), which needs no thread and no GIL but fires when the *thread* that started
the child ends, so it is armed only for children started from the parent's main thread. A child that
leads its own session (a bench cell) passes `kill_group=True`: its whole process group is killed, its own
children with it, and no parent-death signal is armed (it would kill the leader alone).

`spawn_pool(workers, ...)`: a spawn-context ProcessPoolExecutor whose processes do that and ignore SIGINT
(Ctrl-C reaches the whole foreground group; the parent handles it and shuts the pool down). Its processes
start at once, from the calling thread, and end at once when the pool shuts them down (`os._exit` from the
first atexit handler: a worker's results are sent before it sees the pool's stop, and it holds nothing to
flush, while finalizing an interpreter that imported torch and transformers takes ~1.2 s, which a pool's
shutdown waited for: the conformer CLI's "closing"). multiprocessing's resource tracker, which the pool starts, exits
by itself once the parent and the pool's processes are gone (its pipe's last writer closed).

A subprocess (not a pool) learns its parent from the environment: `child_environment()` in the parent,
`die_with_parent_from_environment()` in the child, which also removes the variable so that the child's own
children do not take the grandparent for their parent.
"""

from __future__ import annotations

import atexit
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from typing import Any

PARENT_PID_ENV = "INFERLAB_PARENT_PID"
POLL_S = 0.2  # how often a child checks its parent: it outlives a killed parent by about this much
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, kill_group: bool = False, started_from_main_thread: bool = False) -> None:
    """In a child of `parent_pid`: end when it ends (now, if it already has)."""
    if not kill_group and started_from_main_thread:
        _arm_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before we got here
        _end(kill_group)
    threading.Thread(target=_watch, args=(parent_pid, kill_group), name="inferlab-parent-watch", daemon=True).start()


def child_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) naming this process as the parent to die with, and
    whether the child is started from its main thread ("PID:main")."""
    main = ":main" if threading.current_thread() is threading.main_thread() else ""
    return {**(os.environ if base is None else base), PARENT_PID_ENV: f"{os.getpid()}{main}"}


def die_with_parent_from_environment(kill_group: bool = False) -> None:
    """In a subprocess started with child_environment(): die_with_parent of the parent it names (if any)."""
    pid, _, thread = os.environ.pop(PARENT_PID_ENV, "").partition(":")
    if pid.isdigit():
        die_with_parent(int(pid), kill_group=kill_group, started_from_main_thread=thread == "main")


def spawn_pool(workers: int, initializer: Callable[..., None] | None = None,
               initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """`workers` spawn processes that end with this one and leave SIGINT to it, all started now."""
    from_main = threading.current_thread() is threading.main_thread()
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_child,
                               initargs=(os.getpid(), from_main, initializer, initargs))
    # A spawn pool starts a process per submit until it has `workers`: these start every one from this
    # thread, so the parent-death signal armed in them belongs to a thread that lives as long as the pool.
    for _ in range(workers):
        pool.submit(int)
    return pool


def _start_child(parent_pid: int, from_main: bool, initializer: Callable[..., None] | None,
                 initargs: tuple[Any, ...]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent_pid, started_from_main_thread=from_main)
    atexit.register(end_now)  # registered first, so it runs last: after the handlers of later imports
    if initializer is not None:
        initializer(*initargs)


def end_now(code: int = 0) -> None:
    """End this process with `code` now, its output streams flushed, without the interpreter's finalization
    (a pool process's end, and a command's once it has returned: cli.console_main)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed or replaced streams: nothing to flush
            pass
    os._exit(code)


def _arm_parent_death_signal() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the watching thread alone
        pass


def _watch(parent_pid: int, kill_group: bool) -> None:
    while os.getppid() == parent_pid:
        time.sleep(POLL_S)
    _end(kill_group)


def _end(kill_group: bool) -> None:
    if kill_group:
        try:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        except OSError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)
