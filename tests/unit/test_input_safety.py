"""Hostile JSONL input lines: each becomes one error record and the reading goes on (a non-UTF-8 byte, a
line over the bound, JSON nested too deep, a lone surrogate, an id of the wrong type), and no two records
share an id, generated ones included."""

from __future__ import annotations

import json

from inferlab.jsonl_io import ResumableJsonlWriter, read_jsonl_records


def test_a_non_utf8_byte_is_that_lines_error_record(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_bytes(b'{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "caf\xe9"}\n{"id": "c", "prompt": "y"}\n')
    recs = list(read_jsonl_records(p))
    assert [(r.id, r.error is None) for r in recs] == [("a", True), ("line-2", False), ("c", True)]
    assert "line 2 is not UTF-8 text (byte 0xe9" in recs[1].error


def test_a_line_over_the_bound_is_refused_without_reading_it_whole(tmp_path):
    p = tmp_path / "in.jsonl"
    huge = json.dumps({"id": "big", "prompt": "x" * 5000})
    p.write_text('{"id": "a", "prompt": "x"}\n' + huge + '\n{"id": "c", "prompt": "y"}\n')
    recs = list(read_jsonl_records(p, max_line_chars=1000))
    assert [(r.line_no, r.id, r.error is None) for r in recs] == [(1, "a", True), (2, "line-2", False), (3, "c", True)]
    assert "longer than 1,000 characters" in recs[1].error and "--max-line-chars" in recs[1].error
    assert [r.id for r in read_jsonl_records(p)] == ["a", "big", "c"]  # the default bound takes it


def test_unparsable_json_values_are_error_records(tmp_path):
    p = tmp_path / "in.jsonl"
    lines = ["[" * 100_000 + "]" * 100_000,  # nesting too deep for Python's parser
             '{"id": "n", "v": ' + "9" * 5000 + "}",  # an integer over Python's 4300-digit limit
             '{"id": "s", "prompt": "\\ud800"}',  # a lone surrogate: not text
             '{"id": ["x"], "prompt": "a"}',
             '{"id": null, "prompt": "b"}', '{"id": 7, "prompt": "c"}']
    p.write_text("\n".join(lines) + "\n")
    recs = list(read_jsonl_records(p))
    assert [r.id for r in recs] == ["line-1", "line-2", "line-3", "line-4", "line-5", "7"]
    assert [r.error is None for r in recs] == [False, False, False, False, True, True]
    assert "lone UTF-16 surrogate" in recs[2].error and "must be a string or a number, not list" in recs[3].error


def test_a_repeated_id_never_takes_another_lines_id(tmp_path):
    """Line 3 has no id, so it is `line-3`; a later line declaring `line-3`, and a repeat at line 4 whose own
    `line-4` a later line declares first, each get an id no other line has."""
    p = tmp_path / "in.jsonl"
    p.write_text('{"id": "a", "prompt": "1"}\n{"id": "line-4", "prompt": "2"}\n{"prompt": "3"}\n'
                 '{"id": "a", "prompt": "4"}\n{"id": "line-3", "prompt": "5"}\n')
    recs = list(read_jsonl_records(p))
    ids = [r.id for r in recs]
    assert ids == ["a", "line-4", "line-3", "line-4.2", "line-5"] and len(set(ids)) == len(ids)
    assert "id 'a' repeats line 1" in recs[3].error and "'line-4.2'" in recs[3].error
    assert recs[3].key == "a" and recs[4].given_id == "line-3"


def test_the_writer_appears_with_the_first_row_and_drops_rows_it_is_told_to(tmp_path):
    p = tmp_path / "sub" / "out.jsonl"
    ResumableJsonlWriter(p).close()
    assert not p.parent.exists()  # nothing created by opening
    with ResumableJsonlWriter(p) as w:
        w.write({"id": "a", "status": "ok"})
        w.write({"id": "b", "status": "error"})
        w.write({"id": "\ud800", "status": "ok"})  # a lone surrogate is written escaped, not a crash
    reopened = ResumableJsonlWriter(p, keep_row=lambda row: row["status"] != "error")
    reopened.close()
    assert "a" in reopened.done and "\ud800" in reopened.done and len(reopened.done) == 2
    assert [json.loads(line)["id"] for line in p.read_text().splitlines()] == ["a", "\ud800"]
