"""`inferlab classify` end to end on the tiny-qwen2-cls preset, checked against a plain transformers forward
of each text alone (no padding, batch of one)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from workload_testkit import TEXTS, OomAboveRows, read_jsonl, write_jsonl

from inferlab.cli import main
from inferlab.errors import ConfigError
from inferlab.workloads.classify import ClassifyOptions, classify_file, load_classifier
from inferlab.workloads.hf_loading import ModelLoadConfig


@pytest.fixture(scope="module")
def cls_dir(tiny_checkpoint):
    return tiny_checkpoint("tiny-qwen2-cls")


@pytest.fixture(scope="module")
def reference(cls_dir):
    """probabilities of one text through transformers directly, optionally cut to its first n tokens."""
    tok = AutoTokenizer.from_pretrained(cls_dir)
    model = AutoModelForSequenceClassification.from_pretrained(cls_dir).eval()

    def probs(text: str, first_n: int | None = None) -> list[float]:
        ids = tok(text)["input_ids"][:first_n]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]
        return logits.softmax(-1).tolist()

    probs.id2label = model.config.id2label
    return probs


@pytest.fixture(scope="module")
def classifier(cls_dir):
    return load_classifier(ModelLoadConfig(str(cls_dir), dtype="float32", device="cpu"))


def assert_matches_reference(row, reference, text, first_n=None):
    expected = reference(text, first_n)
    got = list(row["probabilities"].values())
    assert got == pytest.approx(expected, abs=1e-5)
    assert row["label_id"] == max(range(len(expected)), key=expected.__getitem__)
    assert row["label"] == reference.id2label[row["label_id"]]


@pytest.mark.parametrize("backend", ["auto", "hf"])
def test_cli_classifies_in_input_order_with_error_records(tmp_path, cls_dir, reference, backend, capsys):
    lines = [{"id": k, "text": v} for k, v in TEXTS.items()]
    lines.insert(2, {"id": "empty", "text": "   "})
    lines.insert(3, "{broken json")
    lines.append({"id": "over", "text": "x" * 300})  # over --max-length 200
    lines.append({"id": "short", "text": "again"})  # a repeated id
    lines.append({"id": "notext", "body": "wrong field"})
    inp = write_jsonl(tmp_path / "in.jsonl", lines)
    out, summary = tmp_path / "preds.jsonl", tmp_path / "summary.json"
    rc = main(["classify", "--model", str(cls_dir), "--input", str(inp), "--output", str(out),
               "--batch-size", "2", "--max-length", "200", "--device", "cpu", "--dtype", "float32", "--backend", backend,
               "--summary-json", str(summary)])
    assert rc == 0
    printed = capsys.readouterr().out
    chosen = "inferlab" if backend == "auto" else "hf"  # auto: the engine runs Qwen2ForSequenceClassification
    assert f"backend: {chosen} (" in printed and "rows: 5 ok, 5 errors, 0 done by earlier runs" in printed
    assert "texts/s" in printed and "latency per text (its batch's time): p50 " in printed and " p99 " in printed
    assert f"error rows by reason (5 in {out}):" in printed
    assert "  1 x, e.g. notext: line 10: field 'text' is missing" in printed
    assert len(printed.splitlines()) < 15 and "{" not in printed  # a summary, not the raw JSON
    figures = json.loads(summary.read_text())
    assert figures["backend"] == chosen and figures["rows_ok"] == 5 and figures["latency_ms"]["p95"] > 0
    assert sum(g["count"] for g in figures["errors_by_reason"]) == 5
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == ["short", "mid", "empty", "line-4", "long", "tiny", "medium", "over", "line-9",
                                       "notext"]
    by_id = {r["id"]: r for r in rows}
    for key, text in TEXTS.items():
        assert by_id[key]["status"] == "ok"
        assert_matches_reference(by_id[key], reference, text)
        assert by_id[key]["batch_rows"] <= 2 and by_id[key]["latency_ms"] > 0
    assert "empty" in by_id["empty"]["error"]
    assert "not valid JSON" in by_id["line-4"]["error"]
    assert "over the maximum of 200" in by_id["over"]["error"] and "--truncate" in by_id["over"]["error"]
    assert "repeats line 1" in by_id["line-9"]["error"]
    assert "'text' is missing; name the field that holds the text with --text-field body" in by_id["notext"]["error"]


def test_truncate_keeps_the_first_tokens_and_says_so(tmp_path, classifier, reference):
    text = "y" * 150
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "text": text}])
    out = tmp_path / "preds.jsonl"
    classify_file(classifier, inp, out, ClassifyOptions(max_length=40, truncate=True))
    (row,) = read_jsonl(out)
    assert row["truncated"] is True and row["tokens"] == 40 and row["original_tokens"] == 151  # BOS + 150
    assert_matches_reference(row, reference, text, first_n=40)


def test_resume_skips_finished_ids(tmp_path, classifier, reference):
    lines = [{"id": k, "text": v} for k, v in TEXTS.items()]
    inp = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "preds.jsonl"
    # An earlier run finished "mid" (marked so we can see it is not recomputed) and died mid-line.
    out.write_text('{"id": "mid", "status": "ok", "label": "FROM-EARLIER-RUN"}\n{"id": "long", "sta')
    report = classify_file(classifier, inp, out, ClassifyOptions(batch_size=3))
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == list(TEXTS)  # each id once, input order
    assert rows[1]["label"] == "FROM-EARLIER-RUN"
    assert report.rows_skipped == 1 and report.rows_ok == 4
    assert_matches_reference(rows[2], reference, TEXTS["long"])  # the torn row was redone
    again = classify_file(classifier, inp, out, ClassifyOptions())
    assert again.rows_ok == 0 and again.rows_skipped == 5 and len(read_jsonl(out)) == 5


def test_simulated_oom_backs_off_and_writes_every_row_once(tmp_path, classifier, reference):
    texts = {f"t{i}": ("word " * (i % 7 + 1)) + str(i) for i in range(23)}
    texts["huge"] = "z" * 120  # OOMs even alone: longer than the simulated device's 100 tokens
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": k, "text": v} for k, v in texts.items()])
    out = tmp_path / "preds.jsonl"
    inner = classifier.loaded.model
    wrapper = OomAboveRows(inner, max_rows=3, max_len=100)  # batches of more than 3 rows raise OutOfMemoryError
    classifier.loaded.model = wrapper
    try:
        report = classify_file(classifier, inp, out, ClassifyOptions(batch_size=16, max_batch_tokens=None))
    finally:
        classifier.loaded.model = inner
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == list(texts)  # every row exactly once, in input order
    for row in rows[:-1]:
        assert row["status"] == "ok" and row["batch_rows"] <= 3
        assert_matches_reference(row, reference, texts[row["id"]])
    assert rows[-1]["status"] == "error" and "out of memory even as a batch of one" in rows[-1]["error"]
    assert wrapper.batch_rows[:2] == [16, 8]  # a batch of 16 halved at once
    assert report.backoff.oom_events >= 4 and report.backoff.rows_failed_oom == 1
    assert report.rows_ok == 23 and report.rows_error == 1


def test_options_are_validated(classifier, tmp_path):
    with pytest.raises(ConfigError, match="batch_size=0"):
        ClassifyOptions(batch_size=0)
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "text": "x"}])
    with pytest.raises(ConfigError, match="over the model's 512 positions"):
        classify_file(classifier, inp, tmp_path / "o.jsonl", ClassifyOptions(max_length=100000))


def test_cli_reports_missing_input_and_unavailable_quantization(tmp_path, cls_dir, capsys):
    rc = main(["classify", "--model", str(cls_dir), "--input", str(tmp_path / "nope.jsonl"), "--output",
               str(tmp_path / "o.jsonl")])
    assert rc == 2 and "does not exist" in capsys.readouterr().err
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "text": "x"}])
    rc = main(["classify", "--model", str(cls_dir), "--input", str(inp), "--output", str(tmp_path / "o.jsonl"),
               "--quantization", "fp8", "--device", "cpu"])
    assert rc == 2 and "compute capability" in capsys.readouterr().err
