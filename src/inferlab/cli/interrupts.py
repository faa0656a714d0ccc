"""Ctrl-C and SIGTERM end a command the same way: the exception unwinds the command (its writers close,
every finished row is already flushed, pools and engines shut down, a bench cell's process tree is
killed), then one line says what to do, with no traceback, and the exit code is 128 + the signal's
number (130 for SIGINT, 143 for SIGTERM), as a shell reports a process the signal ended. A second signal
while the command ends is ignored.

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


def _interrupt(signum: int, frame: object) -> None:
    """The first Ctrl-C or SIGTERM: every later one is ignored while the command ends (a second Ctrl-C once
    broke into that end, inside a progress bar's close, with a traceback), then the exception is raised."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted(signum)


@contextmanager
def interrupts_end_the_command() -> Iterator[None]:
    """While inside, SIGTERM raises Interrupted in the main thread and Ctrl-C KeyboardInterrupt (unless the
    caller ignores SIGINT, as a shell's background job does), once: from the first signal on both are
    ignored until the block ends, so the command's end (finished rows written, pools shut down) and its
    closing line are never cut short. Ctrl-\\ (SIGQUIT) or SIGKILL still end a process at once. The caller's
    handlers come back after."""
    if threading.current_thread() is not threading.main_thread():  # handlers belong to the main thread
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _interrupt)
    if previous[signal.SIGINT] is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)
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
