"""`inferlab generate --steer ... --collect-...` (workloads/text_steering_collection.py): the engine and the transformers
backend (forward hooks) give the same steered tokens and the same activations; per-line overrides; the
activation store resumes with the JSONL; misuse is refused with the fix."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from inferlab.cli import main
from inferlab.types import Result, SamplingParams
from inferlab.workloads.backend import Backend
from inferlab.workloads.text import run_text_generation
from inferlab.workloads.text_steering_collection import CollectSettings

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
HIDDEN, LAYERS = 64, 2  # the tiny preset


class FunctionBackend(Backend):
    """A backend whose generate is a plain function of the requests."""

    def __init__(self, generate) -> None:
        self.generate_fn = generate

    def generate(self, requests, stop_after_steps=None):
        return self.generate_fn(list(requests))


def _rows(path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def _tensors(path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


@pytest.fixture()
def job(tmp_path):
    g = torch.Generator().manual_seed(11)
    save_file({"toward": torch.randn(HIDDEN, generator=g), "away": torch.randn(LAYERS, HIDDEN, generator=g)},
              str(tmp_path / "vectors.safetensors"))
    lines = [
        {"id": "default", "prompt_ids": [5, 6, 7]},
        {"id": "scaled", "prompt_ids": [9, 4], "steer_scale": -1.5},
        {"id": "other", "prompt_ids": [300, 2, 2, 8], "steer_vector": "away", "steer_layer": 1},
        {"id": "plain", "prompt_ids": [5, 6, 7], "steer_vector": None},
        {"id": "bad-name", "prompt_ids": [1], "steer_vector": "nope"},
        {"id": "bad-layer", "prompt_ids": [1], "steer_layer": "x"},
    ]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return tmp_path


def _generate(model, job, backend: str, out: str, *extra) -> int:
    return main(["generate", "--model", str(model), "--input", str(job / "in.jsonl"), "--output", str(job / out),
                 "--backend", backend, "--device", "cpu", "--dtype", "float32", "--temperature", "0",
                 "--max-new-tokens", "6", "--max-slots", "2", "--max-seq-len", "64",
                 "--steer", str(job / "vectors.safetensors"), "--steer-vector", "toward", "--steer-layer", "0",
                 "--steer-scale", "0.8", *extra])


@pytest.mark.parametrize("pool", ["last", "mean", "all"])
def test_engine_and_transformers_hooks_agree_on_tokens_and_activations(tiny_checkpoint, job, pool):
    model = tiny_checkpoint("tiny")
    collect = ["--collect-layers", "0", "-1", "--collect-pool", pool]
    for backend in ("inferlab", "hf"):
        assert _generate(model, job, backend, f"{backend}.jsonl", *collect,
                         "--collect-output", str(job / f"{backend}.safetensors")) == 0
    engine, hf = _rows(job / "inferlab.jsonl"), _rows(job / "hf.jsonl")
    assert set(engine) == set(hf) == {"default", "scaled", "other", "plain", "bad-name", "bad-layer"}
    for rid in ("default", "scaled", "other", "plain"):
        assert engine[rid]["token_ids"] == hf[rid]["token_ids"] and engine[rid]["error"] is None, rid
    assert engine["default"]["token_ids"] != engine["plain"]["token_ids"]  # steering changed the output
    assert "no registered steering vector is named 'nope'" in engine["bad-name"]["error"]
    assert "no registered steering vector is named 'nope'" in hf["bad-name"]["error"]
    assert "steer_layer='x'" in engine["bad-layer"]["error"]
    (ours, meta), (theirs, _) = _tensors(job / "inferlab.safetensors"), _tensors(job / "hf.safetensors")
    assert json.loads(meta["ids"]) == ["default", "scaled", "other", "plain"] and meta["pool"] == pool
    assert set(ours) == set(theirs) == ({"layer_0", "layer_1"} | ({"offsets"} if pool == "all" else set()))
    for key in ours:
        torch.testing.assert_close(ours[key], theirs[key], atol=1e-4, rtol=0)
    rows = 4 if pool != "all" else sum(engine[r]["output_tokens"] for r in ("default", "scaled", "other", "plain"))
    assert ours["layer_0"].shape == (rows, HIDDEN)


def test_activations_resume_with_the_jsonl(tmp_path):
    """An exception mid-run still saves the finished rows (the waiting shard is written on the way out); the
    rerun computes exactly the ids missing from either file, and the assembled file holds every row in
    input order. A changed collection setting is refused."""
    src, out, acts = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "acts.safetensors"
    src.write_text("".join(json.dumps({"id": f"r{i}", "prompt_ids": [i + 1]}) + "\n" for i in range(5)))
    collect = CollectSettings(acts, (0, 1), LAYERS, HIDDEN, "last", shard_rows=2)
    seen: list[list[str]] = []

    def backend(requests):
        seen.append([r.id for r in requests])
        for i, request in enumerate(requests):
            assert request.collect is not None and request.collect.layers == (0, 1)
            if i == 3 and len(seen) == 1:
                raise RuntimeError("device lost")
            k = int(request.id[1:])
            yield Result(request.id, [1, 2], "ok", "length", 1,
                         activations={0: torch.full((HIDDEN,), float(k)), 1: torch.full((HIDDEN,), -float(k))})

    with pytest.raises(RuntimeError, match="device lost"):
        run_text_generation(src, out, lambda: FunctionBackend(backend), SamplingParams(), collect=collect)
    assert sorted(_rows(out)) == ["r0", "r1", "r2"]
    summary = run_text_generation(src, out, lambda: FunctionBackend(backend), SamplingParams(), collect=collect)
    assert seen[1] == ["r3", "r4"] and summary.skipped == 3 and summary.activation_rows == 5
    tensors, meta = _tensors(acts)
    assert json.loads(meta["ids"]) == [f"r{i}" for i in range(5)]
    assert tensors["layer_0"][:, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert sorted(_rows(out)) == [f"r{i}" for i in range(5)] and len(out.read_text().splitlines()) == 5
    with pytest.raises(Exception, match="other settings"):
        run_text_generation(src, out, lambda: FunctionBackend(backend), SamplingParams(),
                            collect=CollectSettings(acts, (1,), LAYERS, HIDDEN, "last"))


def test_a_flush_interrupted_anywhere_writes_each_row_at_most_once(tmp_path):
    """A signal (here a KeyboardInterrupt from the row writer) inside ActivationSink.flush: the close that
    follows flushes only what still waits, so no JSONL row is written twice; the rerun completes the rest."""
    from inferlab.workloads.text_steering_collection import ActivationSink

    collect = CollectSettings(tmp_path / "acts.safetensors", (0,), LAYERS, HIDDEN, "last", shard_rows=3)
    written: list[str] = []

    def write_row(row):
        if len(written) == 1 and not hasattr(write_row, "interrupted"):
            write_row.interrupted = True
            raise KeyboardInterrupt  # between the first and the second row of the shard
        written.append(row["id"])

    sink = ActivationSink.open(collect, {"model": "m"}, write_row)
    results = [Result(f"r{i}", [1], "ok", "length", 1, activations={0: torch.zeros(HIDDEN)}) for i in range(4)]
    with pytest.raises(KeyboardInterrupt):
        for result in results:
            sink.add(result, {"id": result.id, "error": None})
    sink.close([r.id for r in results])
    assert written == ["r0"]  # r1 and r2 are in the store, not in the rows: not done, computed again
    reopened = ActivationSink.open(collect, {"model": "m"}, write_row).done_ids  # what a rerun finds in the store
    assert {r.id for r in results if r.id in reopened} == {"r0", "r1", "r2"} and len(reopened) == 3


def test_misuse_is_refused_with_the_fix(tiny_checkpoint, job, capsys):
    model = tiny_checkpoint("tiny")
    base = ["generate", "--model", str(model), "--input", str(job / "in.jsonl"), "--output", str(job / "o.jsonl")]
    assert main(base + ["--steer-layer", "3"]) == 2
    assert "--steer-layer / --steer-vector need --steer FILE" in capsys.readouterr().err
    assert main(base + ["--collect-layers", "0"]) == 2
    assert "--collect-layers and --collect-output go together" in capsys.readouterr().err
    assert main(base + ["--collect-layers", "5", "--collect-output", str(job / "a.safetensors")]) == 2
    assert "out of range: the model has decoder layers 0..1" in capsys.readouterr().err
    assert main(base + ["--steer", str(job / "vectors.safetensors"), "--steer-vector", "x"]) == 2
    assert "--steer-vector 'x' is not in" in capsys.readouterr().err
    assert main(base + ["--steer", str(job / "vectors.safetensors"), "--gpus", "2"]) == 2
    assert "do not run with --gpus" in capsys.readouterr().err
