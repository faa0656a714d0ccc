"""`inferlab generate` and workloads/text.py: error rows, per-line overrides, resume after a crash."""

from __future__ import annotations

import json

import pytest

from inferlab.cli import main
from inferlab.errors import ConfigError
from inferlab.types import Result, SamplingParams
from inferlab.workloads.backend import Backend
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


class FunctionBackend(Backend):
    """A backend whose generate is a plain function of the requests."""

    def __init__(self, generate) -> None:
        self.generate_fn = generate

    def generate(self, requests, stop_after_steps=None):
        return self.generate_fn(list(requests))


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
    assert set(rows["a"]) == {"id", "status", "text", "token_ids", "finish_reason", "prompt_tokens", "output_tokens",
                              "backend", "error"}  # docs/workloads.md
    assert rows["a"]["status"] == "ok" and rows["a"]["backend"] == "inferlab"
    assert rows["long"]["status"] == "error" and rows["long"]["backend"] == "inferlab"
    assert rows["line-3"]["status"] == "error" and rows["line-3"]["backend"] is None  # never reached a backend
    assert [r["id"] for r in _read(out)] == ["a", "b", "line-3", "empty", "long", "bad-top-p", "both", "line-8"]
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
        run_text_generation(src, out, lambda: FunctionBackend(crashing_backend), SamplingParams())
    assert [r["id"] for r in _read(out)] == ["r0", "r1"]
    summary = run_text_generation(src, out, lambda: FunctionBackend(crashing_backend), SamplingParams())
    assert seen[1] == ["r2", "r3", "r4"] and summary.skipped == 2 and summary.written == 3
    assert sorted(r["id"] for r in _read(out)) == [f"r{i}" for i in range(5)]


def reversed_backend(requests):
    """Finishes the requests last first, as an engine finishes short rows before long ones."""
    for request in reversed(requests):
        yield Result(id=request.id, token_ids=[1], text="ok", finish_reason="length", prompt_tokens=1)


def test_rows_are_written_in_input_order_whatever_order_they_finish_in(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [{"id": f"r{i}", "prompt_ids": [i + 1]} for i in range(6)]
    lines[3] = {"id": "r3", "prompt": 5}  # an error row, known before the backend runs
    src.write_text("".join(json.dumps(line) + "\n" for line in lines))
    finished: list[str] = []
    run_text_generation(src, out, lambda: FunctionBackend(reversed_backend), SamplingParams(),
                        on_row=lambda r: finished.append(r["id"]))
    assert [r["id"] for r in _read(out)] == [f"r{i}" for i in range(6)]
    # the backend's rows counted as they finish; the error row when the input order reaches it (never held)
    assert [i for i in finished if i != "r3"] == ["r5", "r4", "r2", "r1", "r0"] and finished.count("r3") == 1


def test_an_interrupted_run_writes_every_finished_row(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "prompt_ids": [1]}) + "\n" for i in range(5)))

    def interrupted(requests):
        yield from list(reversed_backend(requests))[:3]  # r4, r3, r2 finish; r0 and r1 never do
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_text_generation(src, out, lambda: FunctionBackend(interrupted), SamplingParams())
    assert [r["id"] for r in _read(out)] == ["r2", "r3", "r4"]
    run_text_generation(src, out, lambda: FunctionBackend(reversed_backend), SamplingParams())
    assert [r["id"] for r in _read(out)] == ["r0", "r1", "r2", "r3", "r4"]  # the resumed run restores input order


def test_retry_errors_runs_the_error_rows_again_and_keeps_one_row_per_id(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "prompt_ids": [1]}) + "\n" for i in range(4)))

    def fails_odd_rows(requests):
        for r in requests:
            if int(r.id[1:]) % 2:
                yield Result(id=r.id, token_ids=[], text=None, finish_reason="error", prompt_tokens=1, error="OOM")
            else:
                yield Result(id=r.id, token_ids=[1], text="ok", finish_reason="length", prompt_tokens=1)

    run_text_generation(src, out, lambda: FunctionBackend(fails_odd_rows), SamplingParams())
    assert [r["status"] for r in _read(out)] == ["ok", "error", "ok", "error"]
    again = run_text_generation(src, out, lambda: FunctionBackend(fails_odd_rows), SamplingParams())
    assert again.written == 0 and again.skipped == 4  # without the flag, an error row is a finished row
    ran: list[str] = []

    def works(requests):
        ran.extend(r.id for r in requests)
        return reversed_backend(requests)

    summary = run_text_generation(src, out, lambda: FunctionBackend(works), SamplingParams(), retry_errors=True)
    rows = _read(out)
    assert ran == ["r1", "r3"] and summary.retried == 2 and summary.skipped == 2
    assert sorted(r["id"] for r in rows) == ["r0", "r1", "r2", "r3"] and all(r["status"] == "ok" for r in rows)


def test_a_max_new_tokens_no_row_can_take_is_refused_before_any_work(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": "a", "prompt_ids": [5, 6, 7]}\n{"id": "b", "prompt": "hello"}\n')
    opened = []
    with pytest.raises(ConfigError, match="the largest max_new_tokens that works is 511"):
        run_text_generation(src, out, lambda: opened.append(1), SamplingParams(max_new_tokens=100_000_000),
                            row_positions=512)
    assert opened == [] and not out.exists()  # refused before the output is created
    with pytest.raises(ConfigError, match="cannot hold the shortest prompt"):
        run_text_generation(src, out, lambda: opened.append(1), SamplingParams(max_new_tokens=4), row_positions=1)
    # the text prompt may fit: its line says so if not
    summary = run_text_generation(src, out, lambda: FunctionBackend(reversed_backend),
                                  SamplingParams(max_new_tokens=511), row_positions=512)
    assert summary.written == 2


def test_cli_refuses_a_max_new_tokens_beyond_the_models_positions(tiny_checkpoint, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": "a", "prompt": "Hello world"}\n')
    argv = ["generate", "--model", str(tiny_checkpoint("tiny")), "--input", str(src), "--output", str(out),
            "--max-new-tokens", "100000000", "--device", "cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--max-new-tokens=100000000 leaves no room in any row" in err and "works is 511" in err


def test_overrides_are_type_checked_per_line(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": "x", "prompt_ids": [1], "max_new_tokens": 2.5}\n{"id": "y", "prompt_ids": [1], "seed": 7}\n')
    received = []

    def backend(requests):
        received.extend(requests)
        return iter(())

    summary = run_text_generation(src, out, lambda: FunctionBackend(backend), SamplingParams())
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
