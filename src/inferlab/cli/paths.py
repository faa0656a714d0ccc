"""Checks of the files and folders a command is given, before any work starts: each error names the flag,
the path and the fix (a missing input, a folder where a file belongs, a wrong extension, an output that
would overwrite an input). The workloads check what they read themselves; this catches what they would
only meet late or would silently accept (an SDF written to `out.txt`, an output on top of its input)."""

from __future__ import annotations

from pathlib import Path

from inferlab.errors import ConfigError

JSONL_KINDS = (".jsonl", ".json", ".ndjson")


def input_file(flag: str, path: str | Path, kinds: tuple[str, ...] | None, what: str) -> Path:
    """An existing file named `flag` on the command line; `kinds`: accepted extensions (None: any)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{flag} {p} does not exist; pass {what}")
    if p.is_dir():
        raise ConfigError(f"{flag} {p} is a folder; pass {what}")
    if kinds is not None and p.suffix.lower() not in kinds:
        raise ConfigError(f"{flag} {p}: expected {what} ({' or '.join(kinds)}); rename it if it is one")
    return p


def output_file(flag: str, path: str | Path, kinds: tuple[str, ...], what: str,
                inputs: dict[str, str | Path | None] | None = None) -> Path:
    """A file to write (created with its folders if missing): not a folder, one of `kinds`, and not one of
    `inputs` ({flag: path})."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag} {p} is a folder; pass a file path inside it, e.g. {p / ('out' + kinds[0])}")
    if p.suffix.lower() not in kinds:
        raise ConfigError(f"{flag} {p}: the command writes {what}; name the file {p.with_suffix(kinds[0]).name}")
    for in_flag, in_path in (inputs or {}).items():
        if in_path is not None and Path(in_path).exists() and p.exists() and p.samefile(in_path):
            raise ConfigError(f"{flag} {p} is the {in_flag} file; write the output to a new file")
    return p


def output_folder(flag: str, path: str | Path) -> Path:
    """A folder to write into (created if missing): not an existing file."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{flag} {p} is a file; pass a folder (it is created if missing)")
    return p
