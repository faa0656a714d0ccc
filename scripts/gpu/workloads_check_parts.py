"""The parts of scripts/gpu/workloads_check.py, one function each: the classify matrix, hidden-state
throughput, and the two OOM back-off runs. Measurement itself is the library's (inferlab.workloads.measure),
so the lab's scenarios can call the same code."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from workloads_check_context import CheckContext, free_memory, limit_memory_if_cpu, status_of


def _cell_line(row: dict) -> str:
    m = row["metrics"]
    if row["status"] != "ok":
        return f"{row['status']}: {row['message'][:120]}"
    lat = m.get("latency_ms", {})
    return f"{m['requests_per_s']:.1f}/s p50 {lat.get('p50', 0):.1f} p95 {lat.get('p95', 0):.1f} ms"


def run_classify_matrix(ctx: CheckContext) -> None:
    from inferlab.workloads.classify import load_classifier
    from inferlab.workloads.hf_loading import ModelLoadConfig
    from inferlab.workloads.measure import MeasureSpec, measure_classify, synthetic_texts

    p = ctx.profile
    path = ctx.checkpoint(p.cls_preset)
    from transformers import AutoTokenizer

    texts = synthetic_texts(AutoTokenizer.from_pretrained(path), p.cls_texts, *p.cls_tokens, seed=0)
    combos = [(d, a, q) for d in p.cls_dtypes for a in p.cls_attns for q in p.cls_quants]
    combos.append((p.cls_dtypes[0], p.cls_attns[0], "none-consecutive"))  # the seeds' unbucketed batching
    for dtype, attn, quant in combos:
        bucket = quant != "none-consecutive"
        quantization = quant if bucket else "none"
        batches = p.cls_batches if bucket else (p.cls_batches[-2],)
        config = {"dtype": dtype, "attn": attn, "quantization": quantization, "bucket_by_length": bucket,
                  "texts": p.cls_texts, "token_range": list(p.cls_tokens)}
        if ctx.over_budget():
            for bs in batches:
                ctx.record("classify.jsonl", "classify", p.cls_preset, bs, "skipped", "over the time budget", config, {})
            continue
        classifier = None
        try:
            classifier = load_classifier(ModelLoadConfig(str(path), dtype, attn, quantization, str(ctx.device)))
            load_error = None
        except Exception as e:  # noqa: BLE001
            load_error = status_of(e)
        for bs in batches:
            if load_error is not None:
                row = ctx.record("classify.jsonl", "classify", p.cls_preset, bs, *load_error, config, {})
            elif ctx.over_budget():
                row = ctx.record("classify.jsonl", "classify", p.cls_preset, bs, "skipped", "over the time budget",
                                 config, {})
            else:
                spec = MeasureSpec(bs, bucket_by_length=bucket, min_seconds=p.min_seconds, max_seconds=p.max_seconds)
                try:
                    metrics = measure_classify(classifier, texts, spec)
                    metrics["load_s"] = classifier.loaded.load_s
                    cfg = {**config, **classifier.loaded.describe()}
                    row = ctx.record("classify.jsonl", "classify", p.cls_preset, bs, "ok", "", cfg, metrics)
                except Exception as e:  # noqa: BLE001
                    row = ctx.record("classify.jsonl", "classify", p.cls_preset, bs, *status_of(e), config, {})
                    free_memory(ctx.device)
            print(f"  classify {dtype:8s} {attn:5s} {quant:16s} bs {bs:3d}: {_cell_line(row)}", flush=True)
        del classifier
        free_memory(ctx.device)


def run_hidden_throughput(ctx: CheckContext) -> None:
    from inferlab.workloads.activations import HiddenStateCollector
    from inferlab.workloads.hf_loading import ModelLoadConfig
    from inferlab.workloads.hidden_states import HiddenStatesOptions, collect_hidden_states, load_base_model
    from inferlab.workloads.measure import MeasureSpec, measure_hidden_states, synthetic_texts

    p = ctx.profile
    path = ctx.checkpoint(p.hid_preset)
    loaded = load_base_model(ModelLoadConfig(str(path), device=str(ctx.device)))
    texts = synthetic_texts(loaded.tokenizer, p.hid_texts, *p.hid_tokens, seed=1)
    collector = HiddenStateCollector(loaded, p.hid_layers, "mean")
    config = {"layers": list(collector.layers), "pool": "mean", **loaded.describe(), "texts": p.hid_texts,
              "token_range": list(p.hid_tokens)}
    for bs in p.hid_batches:
        if ctx.over_budget():
            row = ctx.record("hidden_states.jsonl", "hidden-states", p.hid_preset, bs, "skipped", "over the time budget",
                             config, {})
        else:
            try:
                spec = MeasureSpec(bs, min_seconds=p.min_seconds, max_seconds=p.max_seconds)
                metrics = measure_hidden_states(collector, texts, spec)
                row = ctx.record("hidden_states.jsonl", "hidden-states", p.hid_preset, bs, "ok", "", config, metrics)
            except Exception as e:  # noqa: BLE001
                row = ctx.record("hidden_states.jsonl", "hidden-states", p.hid_preset, bs, *status_of(e), config, {})
        m = row["metrics"]
        extra = f", {m['input_tokens_per_s']:.0f} tok/s" if row["status"] == "ok" else ""
        print(f"  hidden-states bs {bs:3d}: {_cell_line(row)}{extra}", flush=True)
    # The whole command path once: files, shards, assembly, read back.
    work = ctx.work_dir()
    inp = _write_prompts(work / "hidden_prompts.jsonl", texts)
    target = work / "acts.safetensors"
    _remove_output(target)
    start = time.perf_counter()
    report = collect_hidden_states(loaded, inp, target, HiddenStatesOptions(layers=p.hid_layers, pool="mean",
                                                                             batch_size=p.hid_batches[-1]))
    check = _check_hidden_output(target, inp)
    summary = {**report.summary(), **check, "wall_s": time.perf_counter() - start}
    status = "ok" if check["rows_written_once"] else "error"
    ctx.record("hidden_states.jsonl", "hidden-states-file", p.hid_preset, p.hid_batches[-1], status, "", config, summary)
    print(f"  hidden-states file run: {json.dumps(summary, default=str)}", flush=True)


def _write_prompts(path: Path, texts: list[str]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"p{i:05d}", "prompt": t}) + "\n")
    return path


def _remove_output(target: Path) -> None:
    import shutil

    target.unlink(missing_ok=True)
    shutil.rmtree(target.with_name(target.name + ".d"), ignore_errors=True)


def _input_ids(inp: Path) -> list[str]:
    return [json.loads(line)["id"] for line in inp.read_text(encoding="utf-8").splitlines() if line.strip()]


def _check_hidden_output(target: Path, inp: Path) -> dict[str, Any]:
    from safetensors import safe_open

    expected = _input_ids(inp)
    index = [json.loads(line) for line in target.with_name(target.name + ".d").joinpath("index.jsonl").open()]
    indexed = [r["id"] for r in index]
    with safe_open(str(target), framework="pt") as f:
        ids = json.loads(f.metadata()["ids"])
        shapes = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    ok_ids = [r["id"] for r in index if r["status"] == "ok"]
    once = len(indexed) == len(set(indexed)) and set(indexed) == set(expected)
    in_order = ids == [i for i in expected if i in set(ok_ids)]
    return {"rows_expected": len(expected), "rows_indexed": len(indexed), "rows_in_file": len(ids),
            "rows_written_once": once and in_order, "tensor_shapes": shapes}


def run_oom_hidden(ctx: CheckContext) -> None:
    from inferlab.workloads.hf_loading import ModelLoadConfig
    from inferlab.workloads.hidden_states import HiddenStatesOptions, collect_hidden_states, load_base_model
    from inferlab.workloads.measure import synthetic_texts

    p = ctx.profile
    if ctx.over_budget():
        ctx.record("oom.jsonl", "oom-backoff-hidden", p.oom_preset, p.oom_batch, "skipped", "over the time budget", {}, {})
        return
    loaded = load_base_model(ModelLoadConfig(str(ctx.checkpoint(p.oom_preset)), device=str(ctx.device)))
    source = limit_memory_if_cpu(ctx, loaded)
    texts = synthetic_texts(loaded.tokenizer, p.oom_prompts, *p.oom_tokens, seed=2)
    work = ctx.work_dir()
    inp = _write_prompts(work / "oom_prompts.jsonl", texts)
    target = work / "oom_acts.safetensors"
    _remove_output(target)
    options = HiddenStatesOptions(layers=p.oom_layers, pool="mean", batch_size=p.oom_batch, max_batch_tokens=None,
                                  max_length=p.oom_max_length, shard_rows=p.oom_prompts)
    start = time.perf_counter()
    report = collect_hidden_states(loaded, inp, target, options)
    wall = time.perf_counter() - start
    check = _check_hidden_output(target, inp)
    metrics = {**report.summary(), **check, "wall_s": wall, "oom_source": source, "events": report.backoff.events[:30],
               "peak_memory_gb": torch.cuda.max_memory_allocated(ctx.device) / 1e9 if ctx.device.type == "cuda" else None}
    passed = check["rows_written_once"] and report.backoff.oom_events > 0
    message = "" if passed else "no OOM happened" if report.backoff.oom_events == 0 else "rows lost or repeated"
    ctx.record("oom.jsonl", "oom-backoff-hidden", p.oom_preset, p.oom_batch, "ok" if passed else "error", message,
               {"layers": list(p.oom_layers), "max_length": p.oom_max_length, **loaded.describe()}, metrics)
    print(f"  oom hidden-states: {json.dumps({k: v for k, v in metrics.items() if k != 'events'}, default=str)}")
    print("  back-off events:\n    " + "\n    ".join(report.backoff.events[:30]), flush=True)


def run_oom_generate(ctx: CheckContext) -> None:
    from transformers import AutoModelForCausalLM

    from inferlab.jsonl_io import ResumableJsonlWriter, read_jsonl_records
    from inferlab.types import SamplingParams
    from inferlab.workloads.hf_loading import ModelLoadConfig, load_hf_model
    from inferlab.workloads.hf_text import HFTextOptions, run_hf_generation
    from inferlab.workloads.measure import synthetic_texts

    p = ctx.profile
    if ctx.over_budget():
        ctx.record("oom.jsonl", "oom-backoff-generate", p.oom_preset, p.oom_batch, "skipped", "over the time budget", {}, {})
        return
    loaded = load_hf_model(ModelLoadConfig(str(ctx.checkpoint(p.oom_preset)), device=str(ctx.device)), AutoModelForCausalLM)
    source = limit_memory_if_cpu(ctx, loaded)
    texts = synthetic_texts(loaded.tokenizer, p.gen_prompts, *p.oom_tokens, seed=3)
    work = ctx.work_dir()
    inp = _write_prompts(work / "gen_prompts.jsonl", texts)
    out = work / "gen_out.jsonl"
    out.unlink(missing_ok=True)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=p.gen_new_tokens)
    start = time.perf_counter()
    with ResumableJsonlWriter(out) as writer:
        summary = run_hf_generation(loaded, read_jsonl_records(inp), sampling, writer,
                                    HFTextOptions(batch_size=p.oom_batch, max_batch_tokens=None, chunk_rows=p.gen_prompts))
    wall = time.perf_counter() - start
    written = [json.loads(line)["id"] for line in out.read_text(encoding="utf-8").splitlines()]
    expected = _input_ids(inp)
    once = len(written) == len(set(written)) and set(written) == set(expected)
    metrics = {**summary.summary(), "rows_expected": len(expected), "rows_written": len(written),
               "rows_written_once": once, "wall_s": wall, "oom_source": source, "events": summary.backoff.events[:30]}
    passed = once and summary.backoff.oom_events > 0
    message = "" if passed else "no OOM happened" if summary.backoff.oom_events == 0 else "rows lost or repeated"
    ctx.record("oom.jsonl", "oom-backoff-generate", p.oom_preset, p.oom_batch, "ok" if passed else "error", message,
               {"max_new_tokens": p.gen_new_tokens, **loaded.describe()}, metrics)
    print(f"  oom generate: {json.dumps({k: v for k, v in metrics.items() if k != 'events'}, default=str)}")
    print("  back-off events:\n    " + "\n    ".join(summary.backoff.events[:30]), flush=True)


