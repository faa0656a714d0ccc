"""What the engine measures at start-up (the GEMM plan), kept on disk and reused by the next start of the same job.

An entry is a small JSON file under `<root>/<kind>/<hash of the key>.json` that repeats its key. A key names
everything the measurement depends on: the GPU, the model's shapes, the dtype, the torch / triton / CUDA
versions and a fingerprint of the code that makes the choice (editing that code invalidates old entries).
An entry whose stored key differs (stale) or that does not parse (corrupt) is ignored with a warning and
replaced by the next store. Writes go to a temporary file renamed into place, so two engines starting at
once never read half a file; a folder that cannot be written costs a warning, never the start-up.

Where: `EngineConfig.cache_dir`, else `$INFERLAB_CACHE_DIR`, else `$XDG_CACHE_HOME/inferlab` (default
`~/.cache/inferlab`); `EngineConfig.startup_cache=False` turns it off. The engine's tokenizer snapshots
(models/tokenizer_snapshot.py) live in the same folder, under `tokenizers/`.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.cache_dir import CACHE_DIR_ENV, default_cache_dir

log = logging.getLogger(__name__)

FORMAT = 1  # the file layout below; a file of another format is stale


def source_fingerprint(*modules: Any) -> str:
    """A short hash of the source files of `modules`: the version of the code that makes a decision."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:16]


def code_fingerprint(*modules: Any) -> str:
    """A short hash of the code of `modules` without comments, docstrings, blank lines and trailing spaces:
    what the code does, not how its prose reads (a measurement shipped with the package, gemm_plans/, stays
    valid when a comment changes). The same on every Python version: spans are cut from the source text."""
    digest = hashlib.sha256()
    for module in modules:
        source = Path(module.__file__).read_text()
        lines = source.splitlines(keepends=True)
        for (row, col), (end_row, end_col) in reversed(_prose_spans(source)):
            lines[row - 1 : end_row] = [lines[row - 1][:col] + lines[end_row - 1][end_col:]]
        code = [line.rstrip() for line in "".join(lines).splitlines() if line.strip()]
        digest.update("\n".join(code).encode())
    return digest.hexdigest()[:16]


def _prose_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) of every comment and of every string that is a statement of its own (docstrings), in
    source order, as tokenize positions (1-based rows, 0-based columns)."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)]
    code = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL)]
    statement_starts = {id(t) for prev, t in zip([None] + code, code)
                        if prev is None or prev.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)}
    spans = [(t.start, t.end) for t in tokens if t.type == tokenize.COMMENT]
    for t, after in zip(code, code[1:]):
        if t.type == tokenize.STRING and id(t) in statement_starts and after.type == tokenize.NEWLINE:
            spans.append((t.start, t.end))
    return sorted(spans)


@dataclass(frozen=True)
class StartupCache:
    root: Path | None  # None: disabled (every lookup misses, nothing is written)

    @classmethod
    def at(cls, enabled: bool, folder: str | Path | None) -> "StartupCache":
        if not enabled:
            return cls(None)
        return cls(Path(folder).expanduser() if folder is not None else default_cache_dir())

    def path(self, kind: str, key: dict[str, Any]) -> Path | None:
        if self.root is None:
            return None
        digest = hashlib.sha256(_canonical(key).encode()).hexdigest()[:32]
        return self.root / kind / f"{digest}.json"

    def load(self, kind: str, key: dict[str, Any]) -> dict[str, Any] | None:
        """The value stored under `key`, or None (miss, disabled, stale or corrupt: the last two logged)."""
        path = self.path(kind, key)
        if path is None or not path.exists():
            return None
        try:
            entry = json.loads(path.read_text())
            stored_key, value = entry["key"], entry["value"]
            if entry.get("format") != FORMAT or not isinstance(value, dict):
                raise ValueError(f"format {entry.get('format')!r}, expected {FORMAT}")
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("start-up cache: ignoring the unreadable entry %s (%s); it will be measured again", path, e)
            return None
        if _canonical(stored_key) != _canonical(key):
            log.warning("start-up cache: ignoring the stale entry %s (its key differs); it will be measured again",
                        path)
            return None
        return value

    def store(self, kind: str, key: dict[str, Any], value: dict[str, Any]) -> Path | None:
        """Write the entry atomically; returns its path, or None when disabled or the folder is not writable."""
        path = self.path(kind, key)
        if path is None:
            return None
        text = json.dumps({"format": FORMAT, "key": key, "value": value}, indent=1, sort_keys=True)
        tmp: Path | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp",
                                             delete=False) as f:
                tmp = Path(f.name)
                f.write(text)
            os.replace(tmp, path)
        except OSError as e:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            log.warning("start-up cache: could not write %s (%s); set EngineConfig.cache_dir or %s to a "
                        "writable folder, or startup_cache=False", path, e, CACHE_DIR_ENV)
            return None
        return path


def _canonical(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"))
