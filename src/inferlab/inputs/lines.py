"""Input files line by line, each line bounded before it is decoded or parsed.

A line is read as bytes up to a limit (`max_chars` characters: at most 4 bytes each in UTF-8), so a
50 MB line costs at most that limit in memory before it is refused, and decoded as UTF-8 on its own: a
line too long, or not UTF-8, comes back with `error` set and the reading goes on at the next line. Lines
end at "\n" only (a "\r" before it is dropped; a lone "\r" is a character), the numbering every reader
and the scale-out's shard files share. A UTF-8 byte-order mark at the start of the file is dropped.

Not here: what a line means (the JSONL and molecule readers), ids (record_ids.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from inferlab.errors import ConfigError, InputError

# Characters one input line may hold unless told otherwise (--max-line-chars): about 250,000 tokens of
# text, beyond the context of every model inferlab runs, and 1,000 times a long SMILES line.
DEFAULT_MAX_LINE_CHARS = 1_000_000
_UTF8_MAX_BYTES = 4
_SKIP_CHUNK = 1 << 20  # bytes read at a time while skipping the rest of a line over the limit


@dataclass(frozen=True)
class InputLine:
    line_no: int  # 1-based
    text: str | None  # the line without its ending; None when `error` is set
    error: str | None = None


def check_max_line_chars(max_chars: int) -> int:
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ConfigError(f"max_line_chars={max_chars!r} must be an integer >= 1")
    return max_chars


def read_lines(path: str | Path, max_chars: int = DEFAULT_MAX_LINE_CHARS) -> Iterator[InputLine]:
    """Every line of `path` (blank ones too), in order; raises only for a file that cannot be opened."""
    check_max_line_chars(max_chars)
    p = Path(path)
    max_bytes = max_chars * _UTF8_MAX_BYTES
    try:
        f = p.open("rb")
    except FileNotFoundError:
        raise InputError(f"input file {p} does not exist") from None
    except OSError as e:
        raise InputError(f"input file {p} cannot be read ({e.strerror})") from None
    with f:
        line_no = 0
        while raw := f.readline(max_bytes + 2):  # + the line ending
            line_no += 1
            if not raw.endswith(b"\n") and len(raw) > max_bytes:
                _skip_rest_of_line(f)
                yield InputLine(line_no, None, _too_long(line_no, max_chars))
                continue
            yield _decoded(line_no, raw.removesuffix(b"\n").removesuffix(b"\r"), max_chars)


def _decoded(line_no: int, raw: bytes, max_chars: int) -> InputLine:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return InputLine(line_no, None, f"line {line_no} is not UTF-8 text (byte 0x{raw[e.start]:02x} at byte "
                                        f"{e.start + 1} of the line); save the file as UTF-8")
    if line_no == 1:
        text = text.removeprefix("\ufeff")
    if len(text) > max_chars:
        return InputLine(line_no, None, _too_long(line_no, max_chars))
    return InputLine(line_no, text)


def _skip_rest_of_line(f) -> None:
    while chunk := f.readline(_SKIP_CHUNK):
        if chunk.endswith(b"\n"):
            return


def _too_long(line_no: int, max_chars: int) -> str:
    return (f"line {line_no} is longer than {max_chars:,} characters, the limit of one input line; "
            "raise it with --max-line-chars if the line is meant to be this long")
