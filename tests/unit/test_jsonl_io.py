import pytest

from inferlab.errors import InputError, OutputError
from inferlab.jsonl_io import ResumableJsonlWriter, read_jsonl_records


def done_ids(writer: ResumableJsonlWriter, candidates) -> set[str]:
    """The ids of `candidates` the writer holds as done (its set keeps fingerprints, not the ids), checked to
    be all it holds."""
    held = {c for c in candidates if c in writer.done}
    assert len(writer.done) == len(held)
    return held


ROWS = [f"r{i}" for i in range(200)] + ["torn", "a", "b", "c"]


def test_bad_lines_become_error_records(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text('{"id": "a", "prompt": "x"}\n\nnot json\n[1, 2]\n{"prompt": "no id"}\n')
    recs = list(read_jsonl_records(p))
    assert [r.id for r in recs] == ["a", "line-3", "line-4", "line-5"]
    assert recs[0].data == {"id": "a", "prompt": "x"} and recs[0].error is None
    assert "not valid JSON" in recs[1].error and recs[1].data is None
    assert "not a JSON object" in recs[2].error
    assert recs[3].data == {"prompt": "no id"}


def test_writer_resumes_and_drops_a_torn_line(tmp_path):
    p = tmp_path / "out.jsonl"
    with ResumableJsonlWriter(p) as w:
        w.write({"id": "a", "v": 1})
        w.write({"id": "b", "v": 2})
    with p.open("a") as f:
        f.write('{"id": "c", "v"')  # crash mid-write
    w = ResumableJsonlWriter(p)
    assert done_ids(w, ROWS) == {"a", "b"}
    w.write({"id": "c", "v": 3})
    w.close()
    assert [line for line in p.read_text().splitlines()] == [
        '{"id": "a", "v": 1}',
        '{"id": "b", "v": 2}',
        '{"id": "c", "v": 3}',
    ]


def test_a_file_of_another_jobs_rows_is_refused_not_resumed_into(tmp_path):
    """README's two usage lines once shared out.jsonl: `conformers generate --output out.sdf` writes its rows
    there, and `generate --output out.jsonl` then appended text rows to them."""
    p = tmp_path / "out.jsonl"
    p.write_text('{"id": "ethanol#0", "conformer_index": 0, "status": "ok"}\n')
    with pytest.raises(InputError, match="already holds rows of another kind .*no finish_reason.*new file"):
        ResumableJsonlWriter(p, kind_fields=("finish_reason",))
    assert p.read_text() == '{"id": "ethanol#0", "conformer_index": 0, "status": "ok"}\n'  # untouched
    ResumableJsonlWriter(p, kind_fields=("conformer_index",)).close()  # its own kind resumes


def test_a_folder_is_not_an_output_file(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        ResumableJsonlWriter(tmp_path)


def test_rows_not_kept_are_taken_out_of_the_file_and_not_done(tmp_path):
    p = tmp_path / "out.jsonl"
    with ResumableJsonlWriter(p) as w:
        for i, status in enumerate(["ok", "error", "ok", "error"]):
            w.write({"id": f"r{i}", "status": status})
    with p.open("a") as f:
        f.write('{"id": "r9", "st')  # a torn line goes too
    w = ResumableJsonlWriter(p, keep_row=lambda row: row["status"] != "error")
    assert done_ids(w, ROWS) == {"r0", "r2"} and w.dropped == 2
    w.write({"id": "r1", "status": "ok"})
    w.close()
    assert [line for line in p.read_text().splitlines()] == [
        '{"id": "r0", "status": "ok"}', '{"id": "r2", "status": "ok"}', '{"id": "r1", "status": "ok"}']
    assert ResumableJsonlWriter(p, keep_row=lambda row: row["status"] != "error").dropped == 0
    assert list(tmp_path.iterdir()) == [p]  # no temporary file left


def test_a_damaged_middle_line_is_set_aside_and_only_its_row_runs_again(tmp_path, caplog):
    """Two NUL bytes in row 10 of 200 (or a 0xff byte, or a line that is JSON but no object): the rows on
    both sides are kept, the damaged bytes go to out.jsonl.damaged (appended to), one log line says so;
    only a torn last line is a torn write, dropped without a word."""
    p = tmp_path / "out.jsonl"
    with ResumableJsonlWriter(p) as w:
        for i in range(200):
            w.write({"id": f"r{i}", "v": i})
    lines = p.read_bytes().split(b"\n")
    lines[9] = lines[9][:5] + b"\x00\x00" + lines[9][5:]
    lines[20] = b'{"id": "r20", "v": "\xff"}'
    lines[30] = b"[30]"
    p.write_bytes(b"\n".join(lines) + b'{"id": "torn"')
    w = ResumableJsonlWriter(p)
    assert done_ids(w, ROWS) == {f"r{i}" for i in range(200)} - {"r9", "r20", "r30"} and w.damaged == 3
    w.close()
    assert len(p.read_bytes().splitlines()) == 197 and b"torn" not in p.read_bytes()
    aside = (tmp_path / "out.jsonl.damaged").read_bytes()
    assert b"\x00\x00" in aside and b"\xff" in aside and b"[30]" in aside and aside.count(b"# line ") == 3
    assert "3 damaged line(s) (line 10, 21, 31" in caplog.text and caplog.text.count("damaged line") == 1
    with p.open("ab") as f:
        f.write(b"not json\n" + b'{"id": "r9", "v": 9}\n')
    assert done_ids(ResumableJsonlWriter(p), ROWS) == {f"r{i}" for i in range(200)} - {"r20", "r30"}
    assert (tmp_path / "out.jsonl.damaged").read_bytes().startswith(aside)  # appended, never replaced


def test_a_failed_write_is_one_error_naming_the_file_and_nothing_follows_it(tmp_path):
    import resource

    p = tmp_path / "out.jsonl"
    w = ResumableJsonlWriter(p)
    w.write({"id": "a", "text": "x" * 100})
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (p.stat().st_size + 50, limit[1]))  # the disk is full, for us
    try:
        with pytest.raises(OutputError, match=f"cannot write {p} .*then rerun the same command") as first:
            w.write({"id": "b", "text": "y" * 100})
        with pytest.raises(OutputError) as again:
            w.write({"id": "c"})
        w.close()  # the buffered rest of "b" cannot go either: no second error
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    assert again.value is first.value and "File too large" in str(first.value)
    resumed = ResumableJsonlWriter(p)
    assert done_ids(resumed, ROWS) == {"a"} and resumed.damaged == 0  # a torn "b" at the end at most
