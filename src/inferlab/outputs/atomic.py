"""Whole-file writes that never leave a half-written file: the content goes to a temporary file in the
same folder, is flushed to disk, and replaces the target in one rename (os.replace). A crash leaves the
old file or the new one, and at worst a stray `.<name>.<pid>.tmp` beside it. A target reached through a
symbolic link is replaced where the link leads (the link stays a link)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from inferlab.errors import write_failed
from inferlab.outputs.paths import resolved, temporary_path


def replace_atomically(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Call `write(f)` on a temporary file beside `path`, then rename it onto `path`."""
    target = resolved(path)
    tmp = temporary_path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        _unlink_quietly(tmp)
        raise write_failed(target, e) from None
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return Path(path)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # the folder itself cannot be written: nothing was left there
        pass


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
