"""`inferlab generate` and workloads/text.py: error rows, per-line overrides, resume after a crash."""

from __future__ import annotations

import json

import pytest

from inferlab.cli import main
from inferlab.types import Result, SamplingParams
from inferlab.workloads.text import run_text_generation

LINES = [
    '{"id": "a", "prompt": "Hello world"}',
    '{"id": "b", "prompt_ids": [5, 6, 7], "max_new_tokens": 3, "temperature": 0}',
    "this is not json",
    '{"id": "empty", "prompt": ""}',
    '{"id": "long", "prompt_ids": [5, 6, 7], "max_new_tokens": 500}',
    '{"id": "bad-top-p", "prompt": "x", "top_p": 2}',
    '{"id": "both", "prompt": "x", "prompt_ids": [1]}',
    '{"id": "a", "prompt": "again"}',
]


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_cli_writes_results_and_error_rows_then_resumes(tiny_checkpoint, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(LINES) + "\n")
    argv = [
        "generate",
        "--model",
        str(tiny_checkpoint("tiny")),
        "--input",
        str(src),
        "--output",
        str(out),
        "--max-new-tokens",
        "6",
        "--max-slots",
        "2",
        "--max-seq-len",
        "64",
        "--temperature",
        "0",
    ]
    assert main(argv) == 0
    rows = {r["id"]: r for r in _read(out)}
    assert set(rows) == {"a", "b", "line-3", "empty", "long", "bad-top-p", "both", "line-8"}
    assert rows["a"]["finish_reason"] == "length" and rows["a"]["output_tokens"] == 6 and rows["a"]["text"]
    assert rows["b"]["output_tokens"] == 3 and len(rows["b"]["token_ids"]) == 3 and rows["b"]["prompt_tokens"] == 3
    for rid in ("line-3", "empty", "long", "bad-top-p", "both", "line-8"):
        assert rows[rid]["finish_reason"] == "error" and rows[rid]["error"], rid
    assert "max_seq_len=64" in rows["long"]["error"] and "not valid JSON" in rows["line-3"]["error"]
    assert set(rows["a"]) == {"id", "text", "token_ids", "finish_reason", "prompt_tokens", "output_tokens", "error"}
    assert "wrote 8 rows" in capsys.readouterr().out
    assert main(argv) == 0  # everything done: nothing rerun, nothing duplicated
    assert "8 already done" in capsys.readouterr().out and len(_read(out)) == 8


def test_finished_rows_survive_a_crash_and_a_rerun_does_only_the_rest(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "prompt_ids": [i + 1]}) + "\n" for i in range(5)))
    seen: list[list[str]] = []

    def crashing_backend(requests):
        seen.append([r.id for r in requests])
        for i, request in enumerate(requests):
            if i == 2 and len(seen) == 1:
                raise RuntimeError("device lost")
            yield Result(id=request.id, token_ids=[1, 2], text="ok", finish_reason="length", prompt_tokens=1)

    with pytest.raises(RuntimeError, match="device lost"):
        run_text_generation(src, out, lambda: crashing_backend, SamplingParams())
    assert [r["id"] for r in _read(out)] == ["r0", "r1"]
    summary = run_text_generation(src, out, lambda: crashing_backend, SamplingParams())
    assert seen[1] == ["r2", "r3", "r4"] and summary.skipped == 2 and summary.written == 3
    assert sorted(r["id"] for r in _read(out)) == [f"r{i}" for i in range(5)]


def test_overrides_are_type_checked_per_line(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": "x", "prompt_ids": [1], "max_new_tokens": 2.5}\n{"id": "y", "prompt_ids": [1], "seed": 7}\n')
    received = []

    def backend(requests):
        received.extend(requests)
        return iter(())

    summary = run_text_generation(src, out, lambda: backend, SamplingParams())
    assert summary.errors == 1 and "max_new_tokens=2.5 must be an integer" in _read(out)[0]["error"]
    assert [r.sampling.seed for r in received] == [7]


def test_gemma_preset_from_init_to_generate_on_the_engine(tmp_path, capsys):
    """`inferlab model init --preset tiny-gemma2` (built-in tokenizer) then `inferlab generate`: text prompts
    longer than its window of 8, run by the engine (not the transformers fallback)."""
    model = tmp_path / "gemma2"
    assert main(["model", "init", "--preset", "tiny-gemma2", "--out", str(model), "--dtype", "float32"]) == 0
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": "a", "prompt": "A prompt well past the sliding window of eight tokens"}\n'
                   '{"id": "b", "prompt": "Short", "temperature": 0.7, "seed": 3}\n')  # fmt: skip
    argv = ["generate", "--model", str(model), "--input", str(src), "--output", str(out), "--max-new-tokens", "12",
            "--max-slots", "2", "--max-seq-len", "96", "--backend", "inferlab"]  # fmt: skip
    assert main(argv) == 0
    rows = {r["id"]: r for r in _read(out)}
    assert all(r["finish_reason"] == "length" and r["output_tokens"] == 12 and not r["error"] for r in rows.values())
    assert rows["a"]["prompt_tokens"] > 8
