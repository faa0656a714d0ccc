"""The input readers fuzzed: random bytes, lines over the bound and hostile ids never raise, every line that
is not blank (or a comment) gives exactly one record, and no two records share an id."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferlab.jsonl_io import read_jsonl_records
from inferlab.workloads.conformers.chemistry.input_bounds import InputBounds
from inferlab.workloads.conformers.chemistry.inputs import SMILES_COLUMN_NAMES, read_molecule_inputs

MAX_CHARS = 64  # a small bound, so "huge" lines stay cheap to generate
HOSTILE_IDS = ["$$$$", "> <row_id>", "line-1", "line-2", "line-2.2", "a#0", "\u2028", "%24", " ", "x" * 200]

_line_bytes = st.one_of(
    st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"")),  # anything, over the bound at times
    st.text(max_size=80).map(lambda t: t.replace("\n", "").encode("utf-8", "surrogatepass")),
    st.builds(lambda i, smiles: f"{smiles} {i}".encode(), st.sampled_from(HOSTILE_IDS),
              st.sampled_from(["CCO", "c1ccccc1", "C1CC", "[Na+].[Cl-]", "C" * 70, "", "CC(=O"])),
    st.builds(lambda i, p: (f'{{"id": {i}, "prompt": "{p}"}}').encode(), st.sampled_from(
        ['"$$$$"', '"line-1"', '"line-2"', '"a\\nb"', '"\\ud800"', "null", "3", "[1]", '"x"']),
        st.sampled_from(["hi", "\\u0000", "\\ud83d\\ude00"])),
)
_files = st.lists(_line_bytes, min_size=1, max_size=12)
_fuzz = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _write(folder: str, lines: list[bytes], suffix: str, header: bytes = b"") -> Path:
    path = Path(folder) / f"in{suffix}"
    path.write_bytes(header + b"\n".join(lines) + b"\n")
    return path


def _text(raw: bytes) -> str | None:
    """The line as the reader sees it, or None when it is unreadable (an error record, never skipped)."""
    raw = raw.removesuffix(b"\r")
    if len(raw) > 4 * MAX_CHARS:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if len(text) <= MAX_CHARS else None


def _check_unique(records) -> None:
    ids = [r.id for r in records]
    assert len(set(ids)) == len(ids)
    assert [r.line_no for r in records] == sorted({r.line_no for r in records})
    assert all((r.error is None) == (r.data is not None) for r in records if hasattr(r, "data"))


@_fuzz
@given(_files)
def test_jsonl_reader(lines):
    with tempfile.TemporaryDirectory() as folder:
        records = list(read_jsonl_records(_write(folder, lines, ".jsonl"), max_line_chars=MAX_CHARS))
    expected = [n for n, raw in enumerate(lines, 1) if (t := _text(raw)) is None or t.strip()]
    assert [r.line_no for r in records] == expected
    _check_unique(records)


@_fuzz
@given(_files)
def test_smi_reader(lines):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(folder, lines, ".smi")
        records = read_molecule_inputs(path, bounds=InputBounds(max_line_chars=MAX_CHARS)).records

    def skipped(n: int, text: str | None) -> bool:
        fields = text.strip().split() if text is not None else ["?"]
        return not fields or fields[0].startswith("#") or (n == 1 and fields[0].lower() in SMILES_COLUMN_NAMES)

    assert [r.line_no for r in records] == [n for n, raw in enumerate(lines, 1) if not skipped(n, _text(raw))]
    _check_unique(records)


@_fuzz
@given(_files)
def test_csv_reader(lines):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(folder, lines, ".csv", header=b"id,smiles\n")
        records = read_molecule_inputs(path, bounds=InputBounds(max_line_chars=MAX_CHARS)).records
    assert len(records) <= len(lines)  # a quoted field may join lines into one record
    _check_unique(records)
