"""RDKit's own reason for a failed parse, captured instead of printed.

RDKit explains a bad SMILES or an unreadable SDF record only in its log ("SMILES Parse Error: unclosed ring
for input: 'C1CC'", "Can't kekulize mol.  Unkekulized atoms: 0 1 2 3 4"), which it prints to the terminal
while the call returns None. `rdkit_log()` collects those messages for the duration of a block, printing
nothing, and `reason()` condenses them into the words an InputError carries ("unclosed ring", "extra open
parentheses near character 2").

RDKit >= 2026.03 has `rdBase.CaptureErrorLog` (inside BlockLogs, which silences its warnings). Older
builds route their log to Python's `rdkit` logger (`rdBase.LogToPythonLogger`, installed once, on the
first capture) where a filter hands the records of a thread inside a capture to that capture and lets
every other record through as before; each thread has its own capture (the preparation pool's workers are
processes, each parsing in one thread).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rdkit import rdBase

_TIMESTAMP = re.compile(r"^\[\d\d:\d\d:\d\d\]\s*")
_POSITION = re.compile(r"check for mistakes around position (\d+)")
_ECHO_TAILS = (" for input: ", " while parsing: ")


class RdkitLog:
    """The messages RDKit logged inside one `rdkit_log()` block, one per line, timestamps removed."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, text: str) -> None:
        for line in text.splitlines():
            line = _TIMESTAMP.sub("", line).strip()
            if line:
                self.lines.append(line)

    def reason(self) -> str | None:
        """RDKit's reason in a few words ("unclosed ring", "extra open parentheses near character 2"), or
        None when it logged nothing."""
        reasons: list[str] = []
        position, skip = None, 0
        for line in self.lines:
            if skip:  # the input echoed and the "~~^" marker under it
                skip -= 1
                continue
            found = _POSITION.search(line)
            if found:
                position, skip = int(found.group(1)), 2
                continue
            if line.startswith("SMILES Parse Error: Failed parsing SMILES"):
                continue  # a summary that repeats the input
            text = line.removeprefix("SMILES Parse Error: ")
            for tail in _ECHO_TAILS:
                text = text.split(tail)[0]
            text = " ".join(text.split())  # RDKit's double spaces
            if text and text not in reasons:
                reasons.append(text)
        if not reasons:
            return None
        where = f" near character {position}" if position is not None else ""
        return reasons[0] + where + "".join(f"; {r}" for r in reasons[1:])


@contextmanager
def rdkit_log() -> Iterator[RdkitLog]:
    """Collect what RDKit logs inside the block (printing none of it)."""
    log = RdkitLog()
    capture_class = getattr(rdBase, "CaptureErrorLog", None)
    if capture_class is not None:
        blocker = rdBase.BlockLogs()  # warnings and info: silenced; errors: captured below
        try:
            with capture_class() as capture:
                yield log
            log.add(capture.messages)
        finally:
            del blocker
        return
    sink = _python_logger_sink()
    sink.local.capture = log
    try:
        yield log
    finally:
        sink.local.capture = None


class _PythonLoggerSink(logging.Filter):
    """Filter on the `rdkit` logger: a record logged by a thread inside rdkit_log() goes to its RdkitLog
    and no further; any other record passes unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        capture = getattr(self.local, "capture", None)
        if capture is None:
            return True
        capture.add(record.getMessage())
        return False


_SINK_LOCK = threading.Lock()


def _python_logger_sink() -> _PythonLoggerSink:
    """The filter on the `rdkit` logger, installed (with RDKit's routing to it) on first use."""
    logger = logging.getLogger("rdkit")
    with _SINK_LOCK:
        for existing in logger.filters:
            if isinstance(existing, _PythonLoggerSink):
                return existing
        rdBase.LogToPythonLogger()
        sink = _PythonLoggerSink()
        logger.addFilter(sink)
        return sink
