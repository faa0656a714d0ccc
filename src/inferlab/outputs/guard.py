"""The guard every command that writes runs under, from before its first write to its end.

On entry, in order:
1. No output is an input or another output: paths compared after resolving links (and by inode where
   both exist), so `--summary-json mols.smi` or `--collect-output prompts.jsonl` is refused before a byte
   is written.
2. The lock beside the first output (lock.py): a second run on the same output is refused.
3. Outputs already there: resumed only when the manifest beside the first output (manifest.py) records
   this job (same command, settings, input digests); otherwise refused, naming each setting that differs
   with both values, or that no manifest says who wrote them, and `--overwrite`. With `overwrite`, the
   resumable outputs already there are deleted first.
4. The manifest is written (atomically).
On exit the lock is released, and a manifest whose job wrote nothing is removed again: a command refused
or failed before its first row leaves no file behind.

`resumable` outputs are appended to and resumed (the rows, the activation store's folder); the others are
written whole at the end and replaced (a summary), and only the path checks apply to them.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError
from inferlab.outputs.atomic import write_json_atomic
from inferlab.outputs.lock import OutputLock
from inferlab.outputs.manifest import JobManifest, file_sha256, json_ready


@dataclass(frozen=True)
class GuardedOutput:
    flag: str  # how the user named it: "--output", "--summary-json", "--output's rows"
    path: Path
    resumable: bool = True  # False: written whole at the end, replacing what is there


def manifest_path(output: str | Path) -> Path:
    p = Path(output)
    return p.with_name(p.name + ".manifest.json")


def lock_path(output: str | Path) -> Path:
    p = Path(output)
    return p.with_name(p.name + ".lock")


class OutputGuard:
    def __init__(self, command: str, settings: dict[str, Any], inputs: Mapping[str, str | Path | None],
                 outputs: Sequence[GuardedOutput], overwrite: bool = False) -> None:
        assert outputs and outputs[0].resumable, "the first output is the job's own (its manifest and lock)"
        self.command = command
        self.settings = json_ready(settings)
        self.inputs = {flag: Path(path) for flag, path in inputs.items() if path is not None}
        self.outputs = list(outputs)
        self.overwrite = overwrite
        self.manifest = manifest_path(outputs[0].path)
        self.resuming = False  # set on entry: outputs of this job were there
        self._lock = OutputLock(lock_path(outputs[0].path), str(outputs[0].path))

    def __enter__(self) -> "OutputGuard":
        self._check_paths()
        self._lock.acquire()
        try:
            job = JobManifest(self.command, self.settings,
                              {flag: file_sha256(path) for flag, path in self.inputs.items() if path.is_file()})
            existing = [o for o in self.outputs if o.resumable and _has_content(o.path)]
            if existing and self.overwrite:
                for output in existing:
                    _remove(output.path)
            elif existing:
                self._check_same_job(job, existing[0])
                self.resuming = True
            write_json_atomic(self.manifest, job.to_json())
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if not any(_has_content(o.path) for o in self.outputs if o.resumable):
                self.manifest.unlink(missing_ok=True)
        finally:
            self._lock.release()

    def _check_paths(self) -> None:
        for i, output in enumerate(self.outputs):
            for flag, path in self.inputs.items():
                if _same_path(output.path, path):
                    raise ConfigError(f"{output.flag} {output.path} is the {flag} file: writing it would destroy "
                                      "the input; write the output to a new file")
            for other in self.outputs[:i]:
                if _same_path(output.path, other.path):
                    raise ConfigError(f"{output.flag} {output.path} is also {other.flag}; give each output its "
                                      "own file")

    def _check_same_job(self, job: JobManifest, found: GuardedOutput) -> None:
        start_over = "pass --overwrite to replace it, or write to another --output"
        try:
            recorded = JobManifest.from_json(json.loads(self.manifest.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise ConfigError(f"{found.path} ({found.flag}) exists, and no {self.manifest.name} beside it says "
                              f"which job wrote it, so it cannot be resumed safely; {start_over}") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"{found.path} ({found.flag}) exists, but {self.manifest} cannot be read ({e}); "
                              f"{start_over}") from None
        differences = recorded.differences(job)
        if differences:
            raise ConfigError(f"{found.path} ({found.flag}) holds another job's results: "
                              + "; ".join(differences)
                              + f". Rerun with the settings it was made with to resume it, or {start_over}")


def _same_path(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def _has_content(path: Path) -> bool:
    if path.is_dir():
        return any(path.iterdir())
    return path.is_file() and path.stat().st_size > 0


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
