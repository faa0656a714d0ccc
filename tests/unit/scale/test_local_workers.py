"""Two local worker processes on CPU, end to end through the CLI and the library, for classify, hidden
states and HF generate: merged outputs equal a single-process run (input order, each row once, error rows
included); a killed worker is reported with its log tail and a rerun completes its shard without
redoing the finished one; a rerun on changed inputs or settings, or over a foreign output, is refused.
(Retries: test_conformer_shards.py.)"""

from __future__ import annotations

import json

import pytest
import torch
from scale_testkit import read_jsonl, read_safetensors, varied_lines, write_jsonl

from inferlab.cli import main
from inferlab.cli.scale_args import EXIT_INCOMPLETE
from inferlab.jsonl_io import ResumableJsonlWriter, read_jsonl_records
from inferlab.scale import ScaleConfig, ScaleJob, run_scaled
from inferlab.scale.faults import FAULT_ENV
from inferlab.scale.workloads.generate import generate_params
from inferlab.types import SamplingParams
from inferlab.workloads.batching import reorder_jsonl
from inferlab.workloads.hf_text import HFTextOptions, generate_with_hf


@pytest.fixture(scope="module")
def cls_dir(tiny_checkpoint):
    return tiny_checkpoint("tiny-qwen2-cls")


def classify(model, inp, out, *extra) -> int:
    return main(["classify", "--model", str(model), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--dtype", "float32", "--batch-size", "2", "--max-length", "200", *extra])


def assert_same_classifications(got: list[dict], expected: list[dict]) -> None:
    assert [r["id"] for r in got] == [r["id"] for r in expected]  # input order, every row once
    for a, b in zip(got, expected):
        assert a["status"] == b["status"] and a.get("error") == b.get("error"), a["id"]
        if a["status"] == "ok":
            assert a["label"] == b["label"]
            assert list(a["probabilities"].values()) == pytest.approx(list(b["probabilities"].values()), abs=1e-5)


def manifest_of(out) -> dict:
    return json.loads((out.parent / (out.name + ".scale") / "manifest.json").read_text())


@pytest.mark.slow
def test_killed_worker_is_reported_and_a_rerun_completes_it(tmp_path, cls_dir, monkeypatch, capsys):
    inp = write_jsonl(tmp_path / "in.jsonl", varied_lines(30))
    expected_ids = [r.id if r.data is None or r.data.get("id") != "r01" or r.line_no == 2 else f"line-{r.line_no}"
                    for r in read_jsonl_records(inp)]
    out = tmp_path / "out.jsonl"
    monkeypatch.setenv(FAULT_ENV, "shard=1,after_rows=3")
    assert classify(cls_dir, inp, out, "--gpus", "2", "--retries", "0", "--batch-size", "1") == EXIT_INCOMPLETE
    printed = capsys.readouterr().out
    assert "shard 1 failed: worker ended by the fault hook" in printed and "fault hook: ending this worker" in printed
    assert not out.exists()  # nothing merged while a shard is unfinished
    shards = manifest_of(out)["shards"]
    assert [s["status"] for s in shards] == ["done", "failed"] and all(s["rows"] > 10 for s in shards)
    partial = read_jsonl(tmp_path / "out.jsonl.scale" / "outputs" / "shard-001.jsonl")
    assert 3 <= len(partial) < shards[1]["rows"]

    monkeypatch.delenv(FAULT_ENV)
    assert classify(cls_dir, inp, out, "--gpus", "2", "--batch-size", "1") == 0
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == expected_ids  # every row exactly once, in input order
    report = json.loads((tmp_path / "out.jsonl.scale" / "report.json").read_text())
    assert [s["attempts_this_run"] for s in report["shards"]] == [0, 1]  # the finished shard was not rerun
    assert report["rows_before"] >= shards[0]["rows"] + 3

    single = tmp_path / "single.jsonl"
    assert classify(cls_dir, inp, single) == 0
    assert_same_classifications(rows, read_jsonl(single))

    assert classify(cls_dir, inp, out, "--gpus", "2", "--max-length", "100") == 2
    assert "--max-length=200 then, 100 now" in capsys.readouterr().err  # the output's manifest (outputs/guard.py)
    assert classify(cls_dir, inp, single, "--gpus", "2") == 2  # a single-process output is never overwritten
    assert "exists but" in capsys.readouterr().err
    with inp.open("a") as f:
        f.write(json.dumps({"id": "new", "text": "one more line"}) + "\n")
    assert classify(cls_dir, inp, out, "--gpus", "2") == 2
    assert "--input changed since" in capsys.readouterr().err


@pytest.mark.slow
def test_hidden_states_on_two_workers_equal_one_process(tmp_path, tiny_checkpoint):
    model = tiny_checkpoint("tiny")
    inp = write_jsonl(tmp_path / "in.jsonl", varied_lines(20, field="prompt"))
    args = ["hidden-states", "--model", str(model), "--input", str(inp), "--layers", "0", "-1", "--pool", "mean",
            "--device", "cpu", "--dtype", "float32", "--batch-size", "3", "--shard-rows", "4"]
    single, scaled = tmp_path / "single.safetensors", tmp_path / "scaled.safetensors"
    assert main([*args, "--output", str(single)]) == 0
    assert main([*args, "--output", str(scaled), "--gpus", "2"]) == 0
    ids_a, tensors_a, meta_a = read_safetensors(single)
    ids_b, tensors_b, meta_b = read_safetensors(scaled)
    assert ids_b == ids_a and len(ids_a) == 21  # the 3 error lines are in the index only
    assert meta_b["failed"] == meta_a["failed"] == "3" and meta_b["layers"] == meta_a["layers"]
    assert sorted(tensors_b) == sorted(tensors_a)
    for key in tensors_a:
        torch.testing.assert_close(tensors_b[key], tensors_a[key], atol=1e-5, rtol=1e-5)
    index = read_jsonl(scaled.with_name("scaled.safetensors.index.jsonl"))
    assert len(index) == 24 and len({r["id"] for r in index}) == 24
    assert [r["row"] for r in index if r["status"] == "ok"] == list(range(21))


@pytest.mark.slow
def test_hf_generate_on_two_workers_equals_one_process(tmp_path, tiny_checkpoint):
    model = tiny_checkpoint("tiny")
    lines = [{"id": f"p{i}", "prompt": "count " * (i % 6 + 1)} for i in range(14)] + [{"id": "bad", "prompt": ""}]
    inp = write_jsonl(tmp_path / "prompts.jsonl", lines)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=5)
    options = HFTextOptions(batch_size=4)
    single = tmp_path / "single.jsonl"
    with ResumableJsonlWriter(single) as writer:
        summary = generate_with_hf(model, read_jsonl_records(inp), sampling, writer, dtype="float32", device="cpu",
                                   options=options)
    reorder_jsonl(single, summary.ids_in_order)
    params = generate_params(str(model), sampling, backend="hf", hf_load={"dtype": "float32"}, hf_options=options)
    report = run_scaled(ScaleJob("generate", str(inp), str(tmp_path / "scaled.jsonl"), params),
                        ScaleConfig(workers=2, device="cpu", poll_s=0.2))
    assert report.complete and report.merged_rows == 15 and len(report.shards) == 2
    got, expected = read_jsonl(tmp_path / "scaled.jsonl"), read_jsonl(single)
    assert [r["id"] for r in got] == [r["id"] for r in expected] == [line["id"] for line in lines]
    assert [(r["status"], r.get("text"), r.get("output_tokens")) for r in got] == \
        [(r["status"], r.get("text"), r.get("output_tokens")) for r in expected]
