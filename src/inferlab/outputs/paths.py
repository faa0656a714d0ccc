"""The names of the files a run writes beside an output, every one of them derived from the output's
resolved path (symbolic links followed), so two names of one file share its lock, manifest and damage file:

  OUTPUT.manifest.json   the job the output belongs to (manifest.py)
  OUTPUT.lock            held while a run writes it (lock.py)
  OUTPUT.damaged         damaged lines a resume set aside (jsonl_io.py), appended to, never replaced
  .OUTPUT.<pid>.tmp      a whole-file rewrite before its rename (atomic.py), of any of them

The guard (guard.py) checks all of them against the inputs before a byte is written.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_TEMPORARY = re.compile(r"^\.(?P<target>.+)\.\d+\.tmp$")


def resolved(path: str | Path) -> Path:
    """`path` with every symbolic link followed (also for a file that does not exist yet)."""
    return Path(os.path.realpath(path))


def manifest_path(output: str | Path) -> Path:
    p = resolved(output)
    return p.with_name(p.name + ".manifest.json")


def lock_path(output: str | Path) -> Path:
    p = resolved(output)
    return p.with_name(p.name + ".lock")


def damaged_path(output: str | Path) -> Path:
    p = resolved(output)
    return p.with_name(p.name + ".damaged")


def temporary_path(target: str | Path) -> Path:
    """Where a whole-file write of `target` goes before its rename: beside the resolved target."""
    p = resolved(target)
    return p.with_name(f".{p.name}.{os.getpid()}.tmp")


def temporary_target(name: str) -> str | None:
    """The file name a temporary file called `name` would replace, or None when it is not one."""
    match = _TEMPORARY.match(name)
    return match.group("target") if match else None


def files_beside(output: str | Path) -> list[Path]:
    """The files a run may create or replace beside `output`, besides the output itself."""
    return [manifest_path(output), lock_path(output), damaged_path(output)]
