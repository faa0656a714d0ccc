"""Shard input files keep the original line numbering (so ids, `line-<n>` fallbacks and messages match a
single-process run), the CSV header goes to every shard, progress counting reads only complete lines,
and merging places rows by id in input order."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scale_testkit import varied_lines, write_jsonl

from inferlab.jsonl_io import read_jsonl_records
from inferlab.scale.order import UNPLACED, OrderIndex, RecordSpan, write_in_order
from inferlab.scale.progress import LineCounter
from inferlab.scale.units import Unit, read_units, write_shard_inputs, write_units
from inferlab.scale.workloads.jsonl_output import merge_jsonl_by_id
from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs


def test_jsonl_shards_read_back_as_the_original_lines(tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", varied_lines(20))
    original = list(read_jsonl_records(inp))
    units = [Unit(r.line_no, r.key, 1.0) for r in original]
    shard_of_key: dict[str, int] = {}  # a repeated id in its first line's shard, as the partitioner keeps it
    assignment = [shard_of_key.setdefault(u.key, len(shard_of_key) % 3) for u in units]
    paths = [tmp_path / f"s{i}.jsonl" for i in range(3)]
    write_shard_inputs(inp, assignment, units, 0, paths)
    seen = []
    for shard, path in enumerate(paths):
        records = list(read_jsonl_records(path))
        expected = [r for r, s in zip(original, assignment) if s == shard]
        assert records == expected  # same line numbers, ids (line-<n> included), data and errors
        seen += records
        assert path.read_text().count("\n") == inp.read_text().count("\n")
    assert sorted(r.line_no for r in seen) == [r.line_no for r in original]


def test_csv_header_in_every_shard(tmp_path):
    inp = tmp_path / "mols.csv"
    inp.write_text("name,smiles\nethanol,CCO\nbenzene,c1ccccc1\nbad,not_a_smiles\n,CC(=O)O\nx,y,z\n")
    original = read_molecule_inputs(inp).records
    units = [Unit(r.line_no, r.id, 1.0) for r in original]
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    assignment = [0, 1, 0, 1, 0]
    write_shard_inputs(inp, assignment, units, 1, paths)
    for shard, path in enumerate(paths):
        assert read_molecule_inputs(path).records == tuple(r for r, s in zip(original, assignment) if s == shard)


def test_units_file_round_trip(tmp_path):
    units = [Unit(1, "a", 3.5), Unit(4, "b", 2.0, rows=5, first_line=2)]
    write_units(tmp_path / "units.jsonl", units, [1, 0])
    assert read_units(tmp_path / "units.jsonl") == (units, [1, 0])


def test_line_counter_counts_complete_lines_only(tmp_path):
    path = tmp_path / "out.jsonl"
    counter = LineCounter(path)
    assert counter.count() == 0
    path.write_bytes(b'{"id": 1}\n{"id": 2}\n{"id": 3')  # a torn last line
    assert counter.count() == 2
    with path.open("ab") as f:
        f.write(b'}\n\n{"id": 4}\n')
    assert counter.count() == 4  # the torn line completed; the blank line does not count
    tmp = tmp_path / "replacement"
    tmp.write_bytes(b'{"id": 9}\n')
    os.replace(tmp, path)  # a workload reordering its output replaces the file
    assert counter.count() == 1
    big = b"".join(b'{"id": %d}\n' % i for i in range(300_000))  # several read blocks
    path.write_bytes(big)
    assert LineCounter(path).count() == 300_000


def test_order_index_places_ids_and_line_fallbacks():
    order = OrderIndex([Unit(2, "a", 1.0), Unit(5, "b", 1.0), Unit(9, "a", 1.0)])
    assert order.line_of("a") == 2  # the first line with that id
    assert order.line_of("line-9") == 9  # the repeated id's own row
    assert order.line_of("zzz") == UNPLACED


def test_merge_places_rows_by_id_and_keeps_strays(tmp_path):
    units = [Unit(i + 1, f"k{i}", 1.0) for i in range(6)]
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_text('{"id": "k4"}\n{"id": "k0"}\n{"id": "stray"}\n')
    b.write_text('{"id": "k5"}\n\n{"id": "k1", "x": "é"}\nnot json\n{"id": "line-3"}\n')
    out = tmp_path / "merged.jsonl"
    assert merge_jsonl_by_id([a, b], out, {}, OrderIndex(units)) == 7
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["id"] for x in lines[:5]] == ["k0", "k1", "line-3", "k4", "k5"]
    assert lines[5:] == ['{"id": "stray"}', "not json"]  # unknown ids and junk: kept, after the rest
    assert json.loads(lines[1])["x"] == "é"


def test_write_in_order_adds_a_missing_final_newline(tmp_path):
    src = tmp_path / "src"
    src.write_bytes(b"second\nfirst")
    spans = [RecordSpan((2,), 0, 0, 7), RecordSpan((1,), 0, 7, 5)]
    assert write_in_order([Path(src)], spans, tmp_path / "dst") == 2
    assert (tmp_path / "dst").read_bytes() == b"first\nsecond\n"
