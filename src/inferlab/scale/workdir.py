"""The work folder of a scaled run and its manifest.

Layout (default `<output>.scale/`, beside the output):
  manifest.json             the plan and its state: input hash, settings, shards (lines, rows, estimated
                            tokens, status, attempts, last error); rewritten atomically on every change
  units.jsonl               one line per input unit: line, id, estimated tokens, rows, shard
  inputs/shard-NNN.<ext>    each shard's input (original line numbers kept, see units.py)
  outputs/shard-NNN.<ext>   each shard's output, resumable on its own (the workload's own writers)
  logs/shard-NNN.attempt-K.log   what the worker printed
  stats/shard-NNN.json      the worker's summary when it finished (load and run seconds, rows, tokens)
  tasks/                    the task files local workers were started with
  report.json               the last run's report
  lock                      held while a run is going on (a second run on the same folder is refused)

A rerun with the same input file (same SHA-256) and the same result-affecting settings reuses the plan:
finished shards are kept, the others resume. Anything else is refused with a message naming what
changed. Only the coordinator writes the manifest; workers write only their own shard's files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError
from inferlab.outputs.atomic import write_json_atomic
from inferlab.outputs.lock import OutputLock

MANIFEST_VERSION = 1


@dataclass
class ShardState:
    index: int
    input: str  # relative to the work folder
    input_sha256: str
    output: str  # relative to the work folder
    units: int
    rows: int
    est_tokens: float
    first_line: int
    last_line: int
    status: str = "pending"
    attempts: int = 0  # over all runs
    error: str | None = None
    log: str | None = None  # the last attempt's log, relative to the work folder


@dataclass
class Manifest:
    workload: str
    input_path: str
    input_sha256: str
    input_bytes: int
    output: str
    settings: dict[str, Any]
    header_lines: int
    shards: list[ShardState] = field(default_factory=list)
    version: int = MANIFEST_VERSION

    @property
    def rows_total(self) -> int:
        return sum(s.rows for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Manifest:
        shards = [ShardState(**s) for s in data.pop("shards")]
        return Manifest(**data, shards=shards)


class WorkDir:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def units_path(self) -> Path:
        return self.root / "units.jsonl"

    @property
    def report_path(self) -> Path:
        return self.root / "report.json"

    def path(self, relative: str) -> Path:
        return self.root / relative

    def shard_input(self, index: int, suffix: str) -> str:
        return f"inputs/shard-{index:03d}{suffix}"

    def shard_output(self, index: int, suffix: str) -> str:
        return f"outputs/shard-{index:03d}{suffix}"

    def log_file(self, index: int, attempt: int) -> str:
        return f"logs/shard-{index:03d}.attempt-{attempt}.log"

    def stats_file(self, index: int) -> str:
        return f"stats/shard-{index:03d}.json"

    def task_file(self, index: int, attempt: int) -> str:
        return f"tasks/shard-{index:03d}.attempt-{attempt}.json"

    def make(self) -> None:
        for sub in ("inputs", "outputs", "logs", "stats", "tasks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def load_manifest(self) -> Manifest | None:
        if not self.manifest_path.exists():
            return None
        data = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        if data.get("version") != MANIFEST_VERSION:
            raise ConfigError(
                f"{self.manifest_path} was written by another version of inferlab (manifest version "
                f"{data.get('version')}, this one reads {MANIFEST_VERSION}); use another --output or delete {self.root}"
            )
        return Manifest.from_json(data)

    def save_manifest(self, manifest: Manifest) -> None:
        write_json_atomic(self.manifest_path, manifest.to_json())

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the folder's lock for the run; a second run on the same folder is refused, not queued."""
        with OutputLock(self.root / "lock", f"the work folder {self.root}"):
            yield
