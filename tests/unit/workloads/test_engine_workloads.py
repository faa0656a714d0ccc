"""classify and hidden-states on the engine (workloads/classify_engine.py, hidden_states_engine.py,
packed_run.py, backend_choice.py): the same rows as transformers through several packed batches, the
packing plan (token budget, row cap, latency cap), the reader and writer threads, OOM back-off, the choice
of backend, the problem types, the output guard's record of the backend."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from workload_testkit import OOM, read_jsonl, write_jsonl

from inferlab.cli import main
from inferlab.cli.hf_workload_args import ENGINE_BATCH_TOKENS
from inferlab.errors import ConfigError, UnsupportedError
from inferlab.outputs.guard import manifest_path
from inferlab.workloads.backend_choice import (ENGINE_MAX_BATCH_TOKENS, WorkloadBackend, choose_backend,
                                               open_classifier)
from inferlab.workloads.classifier_labels import ClassifierLabels
from inferlab.workloads.classify import ClassifyOptions, classify_file
from inferlab.workloads.hf_loading import ModelLoadConfig
from inferlab.workloads.packed_run import BackgroundWriter, PackedOptions, PrefetchedChunks, plan_packed_batches
from inferlab.workloads.rows import LengthPolicy, RowPreparer, TextRow, text_field_getter

TEXTS = {f"t{i}": ("some words " * (i % 9 + 1)) + str(i) for i in range(30)}


@pytest.fixture(scope="module")
def cls_dir(tiny_checkpoint):
    return tiny_checkpoint("tiny-qwen2-cls")


def load(path, **kw) -> ModelLoadConfig:
    return ModelLoadConfig(str(path), dtype="float32", device="cpu", **kw)


def test_engine_rows_equal_transformers_rows_through_many_packed_batches(tmp_path, cls_dir):
    lines = [{"id": k, "text": v} for k, v in TEXTS.items()] + [{"id": "empty", "text": " "}, {"id": "big", "text": "w" * 90}]
    inp = write_jsonl(tmp_path / "in.jsonl", lines)
    options = ClassifyOptions(max_length=64, truncate=True)
    engine, choice = open_classifier(load(cls_dir), WorkloadBackend(max_batch_tokens=60), max_length=64)
    assert choice.name == "inferlab"
    report = classify_file(engine, inp, tmp_path / "e.jsonl", options)
    hf, _ = open_classifier(load(cls_dir), WorkloadBackend("hf"))
    classify_file(hf, inp, tmp_path / "h.jsonl", options)
    ours, theirs = read_jsonl(tmp_path / "e.jsonl"), read_jsonl(tmp_path / "h.jsonl")
    assert [r["id"] for r in ours] == [r["id"] for r in theirs] == [line["id"] for line in lines]
    for a, b in zip(ours, theirs):
        assert a["status"] == b["status"]
        if a["status"] == "ok":
            assert a["label"] == b["label"] and a["tokens"] == b["tokens"] and a["truncated"] == b["truncated"]
            assert list(a["probabilities"].values()) == pytest.approx(list(b["probabilities"].values()), abs=1e-5)
    assert ours[-1]["truncated"] and ours[-1]["tokens"] == 64  # a row over the budget of 60 ran alone
    summary = report.summary()
    assert summary["backend"] == "inferlab" and report.batch_seconds and max(report.batch_rows) > 1
    assert summary["latency_ms"]["n"] == 31 and summary["engine"]["batches"] == len(report.batch_seconds)
    assert sum(report.batch_rows) == 31 and all(r["latency_ms"] > 0 for r in ours if r["status"] == "ok")


def rows_of(lengths):
    return [TextRow(i, f"r{i}", list(range(n)), n) for i, n in enumerate(lengths)]


def test_packing_follows_the_budget_the_row_cap_and_the_latency_cap():
    def plan(lengths, budget, options=PackedOptions(), predict=lambda lengths: None):
        return [[len(r.token_ids) for r in batch] for batch in plan_packed_batches(rows_of(lengths), budget, options, predict)]

    assert plan([3, 4, 5, 20, 1, 1], 10) == [[3, 4], [5], [20], [1, 1]]  # a row over the budget runs alone
    assert plan([1, 1, 1, 1, 1], 10, PackedOptions(max_rows=2)) == [[1, 1], [1, 1], [1]]
    # 1 ms per token expected, a cap of 5 ms: batches of at most 5 tokens though the budget allows 100
    latency = PackedOptions(max_batch_latency_ms=5.0)
    assert plan([2, 2, 2, 3, 1, 9], 100, latency, lambda lengths: sum(lengths) / 1000) == [[2, 2], [2, 3], [1], [9]]
    assert plan([2, 2, 2], 100, latency) == [[2, 2, 2]]  # nothing timed yet: the budget alone
    with pytest.raises(ConfigError, match="must be > 0"):
        PackedOptions(max_batch_latency_ms=0)


def test_the_latency_knob_gives_smaller_batches_on_the_engine(tmp_path, cls_dir):
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": k, "text": v} for k, v in TEXTS.items()])
    sizes = {}
    for knob in (None, 1e-6):
        engine, _ = open_classifier(load(cls_dir), WorkloadBackend(max_batch_tokens=4096, max_batch_latency_ms=knob))
        engine.encoder.classify(engine.encoder.pack([[5] * 20]))  # a timed batch: the rate is known
        report = classify_file(engine, inp, tmp_path / f"{knob}.jsonl", ClassifyOptions())
        sizes[knob] = max(report.batch_rows)
    assert sizes[None] == 30 and sizes[1e-6] == 1  # the whole file in one batch; a tiny cap: one row per batch


def test_an_oom_halves_the_packed_batch_and_a_row_that_ooms_alone_is_an_error_row(tmp_path, cls_dir):
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": k, "text": v} for k, v in TEXTS.items()] +
                      [{"id": "huge", "text": "z" * 300}])
    engine, _ = open_classifier(load(cls_dir), WorkloadBackend(max_batch_tokens=100000))
    real = engine.encoder.classify
    seen = []

    def small_device(batch):  # a device that holds 200 tokens
        seen.append(batch.num_tokens)
        if batch.num_tokens > 200:
            raise OOM("CUDA out of memory (simulated)")
        return real(batch)

    engine.encoder.classify = small_device
    report = classify_file(engine, inp, tmp_path / "o.jsonl", ClassifyOptions())
    rows = {r["id"]: r for r in read_jsonl(tmp_path / "o.jsonl")}
    assert len(rows) == 31 and rows["huge"]["status"] == "error" and "even as a batch of one" in rows["huge"]["error"]
    assert all(r["status"] == "ok" for k, r in rows.items() if k != "huge")
    assert seen[0] > 200 and report.backoff.oom_events >= 2 and report.rows_ok == 30


def test_the_reader_and_writer_threads_pass_their_errors_on():
    class Broken:
        def __call__(self, texts, **kw):
            raise RuntimeError("tokenizer exploded")

    from inferlab.jsonl_io import InputRecord

    preparer = RowPreparer(Broken(), text_field_getter("text"), LengthPolicy(10))
    records = [InputRecord(1, "a", {"text": "x"}, None)]
    with pytest.raises(RuntimeError, match="tokenizer exploded"), PrefetchedChunks(preparer, records, 1) as chunks:
        list(chunks)
    done = []
    writer = BackgroundWriter()
    writer.submit(lambda: done.append(1))
    writer.submit(lambda: 1 / 0)
    writer.submit(lambda: done.append(2))  # not run: the writer stopped at the error
    with pytest.raises(ZeroDivisionError):
        writer.close()
    assert done == [1]


def test_backend_choice(tmp_path, cls_dir, tiny_checkpoint):
    assert ENGINE_BATCH_TOKENS == ENGINE_MAX_BATCH_TOKENS  # the CLI's help and the default agree
    assert choose_backend(WorkloadBackend(), load(cls_dir), "classify").name == "inferlab"
    quantized = choose_backend(WorkloadBackend(), load(cls_dir, quantization="int8"), "classify")
    assert quantized.name == "hf" and "torchao" in quantized.reason
    causal = load(tiny_checkpoint("tiny"))
    assert choose_backend(WorkloadBackend(), causal, "hidden-states").name == "inferlab"
    fallback = choose_backend(WorkloadBackend(), causal, "classify")
    assert fallback.name == "hf" and "not a sequence classifier" in fallback.reason
    with pytest.raises(UnsupportedError, match="--backend inferlab: LlamaForCausalLM is not a sequence classifier"):
        choose_backend(WorkloadBackend("inferlab"), causal, "classify")
    with pytest.raises(ConfigError, match="--weights fp8 is the engine's"):
        WorkloadBackend("hf", weights="fp8")
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"architectures": ["GPT2ForSequenceClassification"], "n_layer": 2}))
    unsupported = choose_backend(WorkloadBackend(), load(gpt2), "classify")
    assert unsupported.name == "hf" and "GPT2ForSequenceClassification" in unsupported.reason


def test_problem_types_shape_the_label_fields():
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    single = ClassifierLabels.from_config({"id2label": {"0": "a", "1": "b", "2": "c"}}).row_fields(logits)[0]
    assert single["label"] == "a" and single["label_id"] == 0 and sum(single["probabilities"].values()) == pytest.approx(1)
    multi = ClassifierLabels.from_config({"id2label": {"0": "a", "1": "b", "2": "c"},
                                          "problem_type": "multi_label_classification"}).row_fields(logits)[0]
    assert multi["labels"] == ["a", "c"] and multi["label_ids"] == [0, 2]
    assert multi["probabilities"]["b"] == pytest.approx(torch.sigmoid(torch.tensor(-1.0)).item())
    regression = ClassifierLabels.from_config({"num_labels": 1}).row_fields(torch.tensor([[0.25]]))[0]
    assert regression == {"score": 0.25}
    with pytest.raises(Exception, match="problem_type='ranking'"):
        ClassifierLabels.from_config({"problem_type": "ranking"})


def test_hidden_states_cli_on_the_engine_with_every_token(tmp_path, tiny_checkpoint, capsys):
    tiny = tiny_checkpoint("tiny")
    inp = write_jsonl(tmp_path / "p.jsonl", [{"id": k, "prompt": v} for k, v in list(TEXTS.items())[:6]])
    outputs = {}
    for backend in ("inferlab", "hf"):
        out = tmp_path / f"{backend}.safetensors"
        rc = main(["hidden-states", "--model", str(tiny), "--input", str(inp), "--output", str(out), "--layers", "1",
                   "-1", "--pool", "all", "--device", "cpu", "--dtype", "float32", "--backend", backend,
                   "--max-batch-tokens", "50"])
        assert rc == 0
        outputs[backend] = load_file(out)
    ours, theirs = outputs["inferlab"], outputs["hf"]
    assert torch.equal(ours["offsets"], theirs["offsets"]) and ours["layer_2"].shape[0] == ours["offsets"][-1]
    for key in ("layer_1", "layer_2"):
        torch.testing.assert_close(ours[key], theirs[key], atol=1e-5, rtol=1e-5)
    rc = main(["hidden-states", "--model", str(tiny), "--input", str(inp), "--output", str(tmp_path / "x.safetensors"),
               "--layers", "1", "--pool", "all", "--gpus", "2"])
    assert rc == 2 and "--pool all is not merged across workers" in capsys.readouterr().err


def test_the_guard_records_the_backend_and_refuses_a_rerun_on_another(tmp_path, cls_dir, capsys):
    """The backend and the engine's weights change the numbers: a resume never mixes rows of two backends."""
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": k, "text": v} for k, v in list(TEXTS.items())[:4]])
    out = tmp_path / "preds.jsonl"

    def classify(*extra):
        return main(["classify", "--model", str(cls_dir), "--input", str(inp), "--output", str(out), "--device", "cpu",
                     "--dtype", "float32", *extra])

    assert classify("--backend", "inferlab") == 0
    settings = json.loads(manifest_path(out).read_text())["settings"]
    assert settings["backend"] == "inferlab" and settings["weights"] == "auto"
    written = out.read_text()
    assert classify("--backend", "hf") == 2
    assert "backend='inferlab' then, 'hf' now" in capsys.readouterr().err
    assert out.read_text() == written
    assert classify("--backend", "inferlab") == 0 and out.read_text() == written  # the same job resumes
