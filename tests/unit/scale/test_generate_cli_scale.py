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
