"""The guard every command that writes runs under, from before its first write to its end.

On entry, in order:
1. Every file the run may create or replace is compared with every input and with the other outputs,
   before a byte is written: each output, the files beside it (paths.py: its manifest, lock, damaged
   lines, the temporary files of rewrites) and whatever lies in an output folder, after following
   symbolic links and by inode (a hard link is the same file). An input folder (the checkpoint) counts
   by its files. So `--summary-json mols.smi`, `--collect-output prompts.jsonl` or an input named
   `out.jsonl.manifest.json` is refused. An output that exists but is no regular file or folder (a
   device, a FIFO, a link that loops) is refused too.
2. A lock per resumable output, beside its resolved path, and one on the output file itself where it
   exists (lock.py): a second run on the same output, under any name (a symbolic or hard link), is refused.
3. Outputs already there: resumed only when the manifest beside the first output records this job (same
   command, settings, input digests, checkpoint identity); otherwise refused, naming each setting that
   differs with both values, or that no manifest says who wrote them, and `--overwrite`. With
   `overwrite`, the resumable outputs already there are deleted, once every check above has passed.
4. The manifest is written (atomically).
On exit the locks are released, and a manifest whose job wrote nothing is removed again: a command refused
or failed before its first row leaves no file behind.

`resumable` outputs are appended to and resumed (the rows, the activation store's folder, a scaled run's
work folder); the others are written whole at the end and replaced (a summary), and only the path checks
apply to them.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError
from inferlab.outputs.atomic import write_json_atomic
from inferlab.outputs.lock import OutputLock
from inferlab.outputs.manifest import JobManifest, file_sha256, json_ready
from inferlab.outputs.paths import (
    damaged_path, lock_path, manifest_path, resolved, temporary_target,
)

log = logging.getLogger(__name__)

__all__ = ["GuardedOutput", "OutputGuard", "lock_path", "manifest_path"]


@dataclass(frozen=True)
class GuardedOutput:
    flag: str  # how the user named it: "--output", "--summary-json", "--output's rows"
    path: Path
    resumable: bool = True  # False: written whole at the end, replacing what is there


@dataclass(frozen=True)
class _File:
    """A file as the checks compare it: its resolved path and, when it exists, its inode."""

    path: Path
    inode: tuple[int, int] | None

    def same(self, other: "_File") -> bool:
        return self.path == other.path or (self.inode is not None and self.inode == other.inode)


class OutputGuard:
    def __init__(self, command: str, settings: dict[str, Any], inputs: Mapping[str, str | Path | None],
                 outputs: Sequence[GuardedOutput], overwrite: bool = False,
                 checkpoint: dict[str, str] | None = None) -> None:
        """`inputs`: flag -> a file (digested into the manifest) or a folder (the checkpoint: only its files'
        paths are checked); `checkpoint`: the model's identity (models/checkpoint_identity.py), recorded."""
        assert outputs and outputs[0].resumable, "the first output is the job's own (its manifest and lock)"
        self.command = command
        self.settings = json_ready(settings)
        self.inputs = {flag: Path(path) for flag, path in inputs.items() if path is not None}
        self.outputs = list(outputs)
        self.overwrite = overwrite
        self.checkpoint = checkpoint
        self.manifest = manifest_path(outputs[0].path)
        self.resuming = False  # set on entry: outputs of this job were there
        self._locks = [OutputLock(lock_path(o.path), str(o.path)) for o in self.outputs if o.resumable]
        self._held: list[OutputLock] = []
        self._file_locks: list[int] = []

    def __enter__(self) -> "OutputGuard":
        self._check_paths()
        try:
            self._lock()
            job = JobManifest(self.command, self.settings,
                              {flag: file_sha256(path) for flag, path in self.inputs.items() if path.is_file()},
                              checkpoint=self.checkpoint)
            existing = [o for o in self.outputs if o.resumable and _has_content(o.path)]
            if existing and self.overwrite:
                for output in existing:
                    _remove(resolved(output.path))
            elif existing:
                self._check_same_job(job, existing[0])
                self.resuming = True
            write_json_atomic(self.manifest, job.to_json())
        except BaseException:
            self._unlock()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if not any(_has_content(o.path) for o in self.outputs if o.resumable):
                self.manifest.unlink(missing_ok=True)
        finally:
            self._unlock()

    def _lock(self) -> None:
        for lock in self._locks:
            lock.acquire()
            self._held.append(lock)
        for output in self.outputs:
            if output.resumable and resolved(output.path).is_file():
                self._file_locks.append(_lock_file(output))

    def _unlock(self) -> None:
        for fd in self._file_locks:
            os.close(fd)  # drops its flock
        self._file_locks.clear()
        while self._held:
            self._held.pop().release()

    def _check_paths(self) -> None:
        inputs = [(flag, path, f) for flag, path in self.inputs.items() for f in _input_files(flag, path)]
        for i, output in enumerate(self.outputs):
            for what, written in self._written_beside(i, output):
                _check_kind(output, written)
                for flag, path, f in inputs:
                    if f.same(written):
                        raise ConfigError(self._clash(output, what, written.path, flag, path))
                    if temporary_target(f.path.name) == written.path.name and f.path.parent == written.path.parent:
                        raise ConfigError(f"{flag} {path} is named like a temporary file the run writes beside "
                                          f"{output.flag} {output.path} while rewriting it; rename the input or "
                                          "write the output elsewhere")
            for flag, path, f in inputs:
                if _inside(f, output):
                    raise ConfigError(f"{flag} {path} lies inside {output.flag} {output.path}, a folder the run "
                                      "writes into; move the input or write the output elsewhere")
            mine = _file(output.path, output.flag)
            for other in self.outputs[:i]:
                theirs = _file(other.path, other.flag)
                if mine.same(theirs) or _inside(mine, other) or _inside(theirs, output):
                    raise ConfigError(f"{output.flag} {output.path} is also {other.flag} (or lies inside it); give "
                                      "each output its own file")

    def _written_beside(self, index: int, output: GuardedOutput) -> Iterator[tuple[str, "_File"]]:
        """(what it is, the file) for the output and each file the run may write beside it."""
        beside = [("", output.path)]
        if output.resumable:
            beside += [("its lock", lock_path(output.path)), ("its damaged lines", damaged_path(output.path))]
        if index == 0:
            beside.append(("the job's manifest", self.manifest))
        for what, path in beside:
            yield what, _file(path, output.flag)
        for inside in _folder_files(output):
            yield "inside", inside

    @staticmethod
    def _clash(output: GuardedOutput, what: str, written: Path, flag: str, path: Path) -> str:
        if not what:
            return (f"{output.flag} {output.path} is the {flag} file: writing it would destroy the input; write the "
                    "output to a new file")
        if what == "inside":
            return (f"{flag} {path} is {written}, inside {output.flag} {output.path}, a folder the run writes into; "
                    "move the input or write the output elsewhere")
        return (f"{flag} {path} is {what} of {output.flag} {output.path}, which the run writes: the input would be "
                "destroyed; rename the input or write the output elsewhere")

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
        if recorded.checkpoint is None and job.checkpoint is not None:
            log.warning("%s was written by an inferlab that did not record the checkpoint's identity: resuming "
                        "on the recorded settings alone (the model folder's weights are recorded from now on)",
                        self.manifest)


def _file(path: Path, flag: str) -> _File:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return _File(resolved(path), None)
    except OSError as e:  # a link that loops, a path through a file
        raise ConfigError(f"{flag} {path} cannot be followed to a file ({e.strerror}); give a plain file path") \
            from None
    return _File(resolved(path), (info.st_dev, info.st_ino))


def _input_files(flag: str, path: Path) -> list[_File]:
    """An input file, or a folder's files (a checkpoint folder is flat)."""
    if path.is_dir():
        return [_file(p, flag) for p in sorted(path.iterdir()) if p.is_file()]
    return [_file(path, flag)]


def _folder_files(output: GuardedOutput) -> Iterator[_File]:
    """Every file under an output that is a folder already (a hard link in it would be written through)."""
    root = resolved(output.path)
    if not root.is_dir():
        return
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_file():
                yield _file(path, output.flag)


def _inside(f: _File, output: GuardedOutput) -> bool:
    root = resolved(output.path)
    return f.path != root and f.path.is_relative_to(root)


def _check_kind(output: GuardedOutput, written: _File) -> None:
    """Refuse a file the run would write that exists as something other than a regular file or folder."""
    if written.inode is None:
        return
    mode = os.stat(written.path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file (a FIFO or socket)"
        raise ConfigError(f"{written.path} (written by {output.flag}) is {kind}; give the path of a file to write")


def _lock_file(output: GuardedOutput) -> int:
    """An flock on the output file itself: a run reaching it under another name (a hard link) is refused."""
    fd = os.open(resolved(output.path), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(f"another inferlab run is writing {output.path} ({output.flag}) under another name (a "
                          "link to the same file); wait for it to end, or write to another output") from None
    return fd


def _has_content(path: Path) -> bool:
    if path.is_dir():
        return any(path.iterdir())
    return path.is_file() and path.stat().st_size > 0


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
