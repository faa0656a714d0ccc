"""Ctrl-C and SIGTERM end a command the same way: the exception unwinds the command (its writers close,
every finished row is already flushed, pools and engines shut down, a bench cell's process group is
killed), then one line says what to do, with no traceback, and the exit code is 128 + the signal's
number (130 for SIGINT, 143 for SIGTERM), as a shell reports a process the signal ended.

A command whose output resumes sets `resumes=True` in its parser's defaults; the line then says that a
rerun of the same command resumes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM (SIGINT raises a plain KeyboardInterrupt)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM raises Interrupted in the main thread (as SIGINT raises KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():  # handlers belong to the main thread
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """While inside, Ctrl-C and SIGTERM are ignored (a second Ctrl-C cannot cut the closing line short with a
    traceback); the caller's handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interrupted_exit(error: KeyboardInterrupt, resumes: bool) -> tuple[int, str]:
    """(exit code, the line to print) for a command ended by `error`."""
    signum = error.signum if isinstance(error, Interrupted) else signal.SIGINT
    what = ("the rows finished so far are saved; rerun the same command to resume" if resumes
            else "nothing more was done; rerun the command to start again")
    return 128 + signum, f"interrupted ({signal.Signals(signum).name}): {what}"
