"""`inferlab generate --gpus 2` on two local CPU workers (the engine through workloads/text.py): the merged
rows equal a single-process run token for token, each id once, in input order, error rows included."""

from __future__ import annotations

import json

from inferlab.cli import main

LINES = [{"id": f"p{i}", "prompt": "count " * (i % 5 + 1)} for i in range(9)] + [
    {"id": "empty", "prompt": ""},
    {"id": "ids", "prompt_ids": [5, 6, 7], "max_new_tokens": 3},
]


def generate(model, inp, out, *extra) -> int:
    return main(["generate", "--model", str(model), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--max-new-tokens", "5", "--temperature", "0", "--max-slots", "4", "--max-seq-len", "64", *extra])


def test_generate_on_two_workers_equals_one_process(tmp_path, tiny_checkpoint):
    model = tiny_checkpoint("tiny")
    inp = tmp_path / "prompts.jsonl"
    inp.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    single, scaled = tmp_path / "single.jsonl", tmp_path / "scaled.jsonl"
    assert generate(model, inp, single) == 0
    assert generate(model, inp, scaled, "--gpus", "2") == 0
    expected = {r["id"]: r for r in map(json.loads, single.read_text().splitlines())}
    got = [json.loads(line) for line in scaled.read_text().splitlines()]
    assert [r["id"] for r in got] == [line["id"] for line in LINES]  # input order, each once
    assert {r["id"]: r for r in got} == expected
    assert expected["empty"]["finish_reason"] == "error" and expected["ids"]["output_tokens"] == 3
    manifest = json.loads((tmp_path / "scaled.jsonl.scale" / "manifest.json").read_text())
    assert len(manifest["shards"]) == 2 and all(s["rows"] for s in manifest["shards"])


def test_overwrite_with_a_changed_setting_starts_a_scaled_run_over(tmp_path, tiny_checkpoint, capsys):
    """`--overwrite` with another --seed once deleted the output, then met the work folder's manifest of the
    old settings and refused, the old rows gone. The work folder is one of the guarded outputs now: it starts
    over with the rest; and a scale flag that cannot run is refused before anything is deleted."""
    model = tiny_checkpoint("tiny")
    inp, out = tmp_path / "prompts.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(line) + "\n" for line in LINES[:3]))
    assert generate(model, inp, out, "--gpus", "2") == 0
    before = out.read_text()
    assert generate(model, inp, out, "--gpus", "2", "--seed", "5", "--retries", "-1", "--overwrite") == 2
    assert "--retries -1 must be >= 0" in capsys.readouterr().err and out.read_text() == before
    assert generate(model, inp, out, "--gpus", "2", "--seed", "5", "--overwrite") == 0
    manifest = json.loads((tmp_path / "out.jsonl.scale" / "manifest.json").read_text())
    assert manifest["settings"]["seed"] == 5 and len(out.read_text().splitlines()) == 3
