"""The candidates a tune has measured, kept in its --work-dir (measured.jsonl, one line per candidate, flushed
as each ends) so that a rerun of the same tune, stopped by --budget-s or killed, measures only the rest.
A line is reused only when its fingerprint (the settings that change the figures and the cut sample's
digest) is this tune's; lines of other tunes in the same folder are ignored."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

FILE_NAME = "measured.jsonl"


def fingerprint(settings: dict[str, Any], sample: Path) -> str:
    digest = hashlib.sha256(sample.read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps([settings, digest], sort_keys=True, default=str).encode()).hexdigest()[:16]


def _key(candidate: dict[str, Any]) -> str:
    return json.dumps(candidate, sort_keys=True)


class MeasuredStore:
    def __init__(self, folder: Path | None, tune_fingerprint: str) -> None:
        self.path = folder / FILE_NAME if folder is not None else None
        self.fingerprint = tune_fingerprint
        self.entries: dict[str, dict[str, Any]] = {}
        if self.path is not None and self.path.is_file():
            for line in self.path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a line cut by a kill
                if isinstance(entry, dict) and entry.get("fingerprint") == tune_fingerprint:
                    self.entries[_key(entry["settings"])] = entry

    def get(self, candidate: dict[str, Any]) -> dict[str, Any] | None:
        """{"settings", "figures" | "error"} of a candidate measured by an earlier run of this tune."""
        entry = self.entries.get(_key(candidate))
        return None if entry is None else {k: v for k, v in entry.items() if k != "fingerprint"}

    def add(self, measured: dict[str, Any]) -> None:
        entry = {"fingerprint": self.fingerprint, **measured}
        self.entries[_key(measured["settings"])] = entry
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(entry, default=str) + "\n")
