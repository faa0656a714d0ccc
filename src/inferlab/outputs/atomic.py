"""Whole-file writes that never leave a half-written file: the content goes to a temporary file in the
same folder, is flushed to disk, and replaces the target in one rename (os.replace). A crash leaves the
old file or the new one, and at worst a stray `.<name>.<pid>.tmp` beside it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def replace_atomically(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Call `write(f)` on a temporary file beside `path`, then rename it onto `path`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    return replace_atomically(path, lambda f: f.write(data))


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | Path, data: Any) -> Path:
    text = json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n"
    try:
        return write_text_atomic(path, text)
    except UnicodeEncodeError:  # a lone surrogate in a string: written escaped, read back the same
        return write_text_atomic(path, json.dumps(data, indent=1, default=str) + "\n")
