"""The measurement of one `classify` or `hidden-states` cell (child process), whatever the backend: the
sample, the backend's batches, the timed loop, the figures, and the check against transformers.

Protocol: synthetic texts (seeded, the checkpoint's tokenizer) tokenised before anything is timed; the
backend loads (timed: load_s; the engine's includes its warm-up, vLLM's its compile and graph capture);
the backend cuts the sample into its own batches, run in a seeded shuffled order (a prefix is a fair mix
of lengths) by workloads/measure.py: the first batch timed apart, warm-up, then whole passes until
min_repeats batches and min_duration_s, cut at max_duration_s. Every batch is timed from its start to its
results on the host, which is each of its requests' latency (latency_ms p50/p90/p95/p99 per request).
Figures: requests_per_s (samples/s, prompts/s), input_tokens_per_s, achieved TFLOP/s (model FLOPs of the
texts' real tokens: inferlab.engine.prefill_flops, the same count for every backend, padding never counted)
and its percentage of this device's measured bf16 matmul rate (bench/matmul_peak.py). With check_texts,
the first texts' outputs are taken from the backend, the backend is closed, and transformers (the cell's
dtype, SDPA, batches of 16) computes them again: labels_agree_with_hf and max_prob_diff_vs_hf (classify),
states_max_rel_diff_vs_hf and states_min_cosine_vs_hf (hidden states).
"""

from __future__ import annotations

import random
from typing import Any

from inferlab.bench.backends.encode_base import EncodeSpec, encode_rows
from inferlab.bench.cells import Cell
from inferlab.bench.scenarios.base import CellContext

CHECK_BATCH = 16


def measure_encode(cell: Cell, ctx: CellContext, spec: EncodeSpec, count: int) -> dict[str, Any]:
    import torch

    from inferlab.bench.backends import get_backend
    from inferlab.bench.backends.base import close_backend
    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device, torch_dtype
    from inferlab.bench.matmul_peak import device_matmul_tflops
    from inferlab.bench.scenarios.text_workload import measure_spec
    from inferlab.bench.timing import device_synchronizer, timed
    from inferlab.engine import prefill_flops
    from inferlab.models.config import read_model_spec
    from inferlab.workloads.batching import tokenize_chunk
    from inferlab.workloads.hf_loading import load_tokenizer
    from inferlab.workloads.measure import measure_batches, synthetic_texts

    c = cell.config
    assert ctx.model_path is not None and cell.backend is not None
    device = resolve_device(c["device"])
    peak = device_matmul_tflops(device, ctx.cache_dir)  # before the model loads: the whole device is free
    tokenizer = load_tokenizer(ctx.model_path)
    texts = synthetic_texts(tokenizer, count, c["min_tokens"], c["max_tokens"], seed=c["seed"],
                            distribution=c["length_distribution"])
    token_ids = tokenize_chunk(tokenizer, texts)
    model_spec = read_model_spec(ctx.model_path)
    backend = get_backend(cell.backend, cell.scenario).create(dict(c), spec)
    reset_peak_memory(device)
    with timed(device_synchronizer(device)) as load:
        backend.load(ctx.model_path, device, torch_dtype(c["dtype"]))
    batches = backend.batches(token_ids)
    random.Random(c["seed"]).shuffle(batches)
    with torch.inference_mode():
        metrics = measure_batches(backend.run, encode_rows(batches, token_ids), measure_spec(c), device,
                                  work=lambda rows: prefill_flops(model_spec, [len(r) for r in rows]),
                                  pads=backend.pads)
    if not metrics["whole_passes"]:
        ctx.warn(f"max_duration_s={c['max_duration_s']:g} ended the timing within the first pass over the sample "
                 "(batches run in a shuffled order)")
    tflops = metrics.pop("flops_timed") / metrics["steady_s"] / 1e12
    metrics.update({"load_s": load.seconds, "tflops_per_s": tflops, "matmul_peak_tflops": peak,
                    "pct_of_matmul_peak": 100 * tflops / peak if peak else None, "batches_per_pass": len(batches),
                    "texts": count, "sample_tokens": sum(map(len, token_ids)), "device": str(device),
                    **peak_memory(device)})
    ctx.add_backend_metrics(metrics, backend)
    if c["check_texts"]:
        check_rows = token_ids[: c["check_texts"]]
        with torch.inference_mode():
            ours = _outputs(backend, check_rows)
        close_backend(backend)
        metrics.update(_compare_with_hf(cell, ctx, spec, check_rows, ours, device))
    else:
        close_backend(backend)
    return metrics


def _outputs(backend: Any, rows: list[list[int]]) -> Any:
    """The backend's outputs for `rows` in order, batched its own way: classify [n, labels]; hidden {layer: [n, h]}."""
    import torch

    by_row: dict[int, Any] = {}
    for batch in backend.batches(rows):
        out = backend.run([rows[i] for i in batch])
        for k, i in enumerate(batch):
            by_row[i] = {layer: t[k] for layer, t in out.items()} if isinstance(out, dict) else out[k]
    ordered = [by_row[i] for i in range(len(rows))]
    if isinstance(ordered[0], dict):
        return {layer: torch.stack([o[layer] for o in ordered]) for layer in ordered[0]}
    return torch.stack(ordered)


def _compare_with_hf(cell: Cell, ctx: CellContext, spec: EncodeSpec, rows: list[list[int]], ours: Any,
                     device: Any) -> dict[str, Any]:
    import torch

    from inferlab.bench.backends.base import close_backend
    from inferlab.bench.backends.hf_encode import HfEncodeBackend
    from inferlab.bench.devices import torch_dtype

    reference = HfEncodeBackend({"batch_size": CHECK_BATCH, "bucket_by_length": True, "attn_implementation": "sdpa"},
                                spec)
    reference.load(ctx.model_path, device, torch_dtype(cell.config["dtype"]))
    with torch.inference_mode():
        theirs = _outputs(reference, rows)
    close_backend(reference)
    if spec.task == "classify":
        p, q = ours.float().softmax(-1), theirs.float().softmax(-1)
        return {"check_texts": len(rows), "labels_agree_with_hf": (p.argmax(-1) == q.argmax(-1)).float().mean().item(),
                "max_prob_diff_vs_hf": (p - q).abs().max().item()}
    worst_rel, worst_cos = 0.0, 1.0
    for layer, mine in ours.items():
        ref = theirs[layer].float()
        rel = ((mine.float() - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-12)).max().item()
        cos = torch.nn.functional.cosine_similarity(mine.float(), ref, dim=-1).min().item()
        worst_rel, worst_cos = max(worst_rel, rel), min(worst_cos, cos)
    return {"check_texts": len(rows), "states_max_rel_diff_vs_hf": worst_rel, "states_min_cosine_vs_hf": worst_cos}
