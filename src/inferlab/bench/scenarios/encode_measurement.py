"""What the `classify` and `hidden-states` scenarios share: the knobs of a synthetic text sample (count, token-length
range and spread), the dtype, the check against transformers; their checks; transformers' GPU time model (the
engine's and vLLM's are in backends/estimates.py); and the measurement of one cell (child process), whatever the
backend. Each backend's own knobs (transformers' batch size, bucketing, attention and quantization; the engine's
token budget; vLLM's calls) are its own (backends/hf_encode.py, inferlab_encode.py, vllm_encode.py).

The measurement: the texts (synthetic and seeded, or a labelled set's: classify_texts.py) tokenised with the
checkpoint's tokenizer before anything is timed; the
backend loads (timed: load_s; the engine's includes its warm-up, vLLM's its compile and graph capture); the
backend cuts the sample into its own batches (`encode_batches`), run in a seeded shuffled order (a prefix is a
fair mix of lengths) by workloads/measure.py, the loop `inferlab classify` / `hidden-states` measure with: the
first batch timed apart, warm-up, then whole passes until min_repeats batches and min_duration_s, cut at
max_duration_s. Every batch is timed from its start to its results on the host, which is each of its requests'
latency (latency_ms p50/p90/p95/p99 per request). Figures: requests_per_s (samples/s, prompts/s),
input_tokens_per_s, achieved TFLOP/s (model FLOPs of the texts' real tokens: inferlab.engine.prefill_flops, the
same count for every backend, padding never counted) and its percentage of this device's measured bf16 matmul
rate (bench/matmul_peak.py). With check_texts, the first texts' outputs are taken from the backend, the backend
is closed, and transformers (the cell's dtype, SDPA, batches of 16) computes them again: labels_agree_with_hf (every
row, and where the precision decides: transformers once more in a wider dtype, label_agreement.py), with true labels
(a labelled set's texts, classify_texts.py) accuracy and hf_accuracy, and max_prob_diff_vs_hf (classify);
states_max_rel_diff_vs_hf and states_min_cosine_vs_hf (hidden states).
"""

from __future__ import annotations

import contextlib
import math
import random
from typing import Any, Iterator

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, common_knobs, dtype_knob
from inferlab.bench.scenarios.base import CellContext
from inferlab.bench.scenarios.classify_texts import SYNTHETIC, cell_texts
from inferlab.bench.scenarios.label_agreement import accuracy, label_agreement, wider_dtype
from inferlab.errors import ConfigError
from inferlab.workloads.encode_backends import EncodeSpec

LENGTH_DISTRIBUTIONS = ("uniform", "log-uniform")  # workloads/measure.py LENGTH_DISTRIBUTIONS


def sample_knobs(count_name: str, count: int, min_tokens: int, max_tokens: int, distribution: str) -> tuple[Knob, ...]:
    return (
        Knob(count_name, int, count, "synthetic texts in the sample (random prose of drawn token lengths)", minimum=1),
        Knob("min_tokens", int, min_tokens, "shortest text, in tokens", minimum=1),
        Knob("max_tokens", int, max_tokens, "longest text, in tokens", minimum=1),
        Knob("length_distribution", str, distribution, "how token lengths spread over [min_tokens, max_tokens]",
             choices=LENGTH_DISTRIBUTIONS),
        dtype_knob(),
        Knob("check_texts", int, 0, "texts whose outputs are compared with transformers' (the dtype, SDPA) after the "
             "timing: label agreement, probability / hidden-state differences (0: no check)", minimum=0),
    )


def measuring_knobs(min_batches: int, min_duration_s: float, max_duration_s: float, warmup: int) -> tuple[Knob, ...]:
    return (
        Knob("max_duration_s", float, max_duration_s, "stop timing batches after this long, even mid-pass (batches "
             "run in a seeded shuffled order, so a prefix is a fair mix of lengths)", minimum=0.01),
        Knob("profile", bool, False, "after the timing, run the first batches (up to 8) under torch.profiler: the "
             "device time by kernel family, the GEMMs' and the attention's share of the matmul peak, how busy the "
             "device was (row prefill_profile; bench/prefill_profile.py; in-process backends only)"),
        *common_knobs(min_repeats=min_batches, min_duration_s=min_duration_s, warmup=warmup,
                      repeats_help="timed batches (at least; whole passes over the sample unless max_duration_s ends it)"),
    )


def validate_text_workload(cell: Cell, task: str) -> None:
    c = cell.config
    assert cell.model is not None
    if model_refs.model_task(cell.model) != task:
        raise ConfigError(f"model {cell.model} is not a {task} model; the {cell.scenario} scenario needs one "
                          f"(presets: {', '.join(n for n in model_refs.preset_names() if model_refs.model_task(n) == task)})")
    if c["min_tokens"] > c["max_tokens"]:
        raise ConfigError(f"min_tokens={c['min_tokens']} is above max_tokens={c['max_tokens']}; swap them")
    config = model_refs.model_config(cell.model)
    limit = config.get("text_config", config).get("max_position_embeddings")
    if limit and c["max_tokens"] > limit:
        raise ConfigError(f"max_tokens={c['max_tokens']} exceeds the model's max_position_embeddings={limit}; lower it")
    if c["max_duration_s"] < c["min_duration_s"]:
        raise ConfigError(f"max_duration_s={c['max_duration_s']:g} is below min_duration_s={c['min_duration_s']:g}")


def measure_spec(c: dict[str, Any]) -> Any:
    from inferlab.workloads.measure import MeasureSpec

    return MeasureSpec(c.get("batch_size", 1), warmup_batches=c["warmup"], min_batches=c["min_repeats"],
                       min_seconds=c["min_duration_s"], max_seconds=c["max_duration_s"], seed=c["seed"])


def estimate_text_s(cell: Cell, accelerator: bool, count: int, params_b: float) -> float:
    """Rough seconds: process, imports and load (~10 s on a GPU host, +2 s for torchao), then the first
    call, the warm-up pass and timed batches. A batch costs ~15 ms of launches plus ~2 GFLOP per padded token per
    billion parameters at ~200 TFLOP/s (int8 weight-only: twice that); unbucketed batches pad to the
    longest text. CPU: tiny models, ~5 ms + 2 us per padded token. Plus the check against transformers."""
    c = cell.config
    mean = (c["min_tokens"] + c["max_tokens"]) / 2
    rows = c.get("batch_size", 16)  # a backend without batch_size (the engine, vLLM on a CPU): like 16 sorted rows
    padded = c["max_tokens"] if not c.get("bucket_by_length", True) and rows > 1 else mean
    tokens = min(rows, count) * padded
    if accelerator:
        batch_s = 0.015 + tokens * params_b * 2e9 / 200e12 * (2 if c.get("quantization") == "int8" else 1)
        fixed = 10.0 + (2.0 if c.get("quantization", "none") != "none" else 0.0)
    else:
        batch_s = 0.005 + tokens * 2e-6
        fixed = 6.0
    timed = min(c["max_duration_s"], max(c["min_duration_s"], c["min_repeats"] * batch_s))
    warm = min(c["max_duration_s"], max(c["warmup"], math.ceil(count / rows)) * batch_s) if c["warmup"] else 0.0
    return fixed + batch_s + warm + timed + check_s(cell, accelerator)


def check_s(cell: Cell, accelerator: bool) -> float:
    """The check against transformers: its load, then batches of 16 over check_texts texts; classify runs it
    again in the wider dtype (label_agreement.py), float32 at about a third of bf16's rate."""
    n = cell.config["check_texts"]
    if not n:
        return 0.0
    one = (4.0 + 0.01 * n) if accelerator else (2.0 + 0.05 * n)
    return one + ((4.0 + 0.03 * n) if accelerator else one) if cell.scenario == "classify" else one


def estimate_cell_s(cell: Cell, accelerator: bool, count_knob: str) -> float:
    """The backend's own estimate (the engine, vLLM: backends/estimates.py), else transformers' model over
    the sample of `count_knob` texts."""
    from inferlab.bench.backends import backend_estimate_s

    assert cell.model is not None
    own = backend_estimate_s(cell, accelerator)
    return own if own is not None else estimate_text_s(cell, accelerator, cell.config[count_knob],
                                                       approx_params_b(cell.model))


def approx_params_b(model: str) -> float:
    """Billions of parameters from the config (decoder layers + embedding), for time estimates only."""
    config = model_refs.model_config(model)
    config = config.get("text_config", config)
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config.get("num_key_value_heads") or heads
    attention = hidden * head_dim * (2 * heads + 2 * kv)
    mlp = 3 * hidden * config.get("intermediate_size", 4 * hidden)
    return (layers * (attention + mlp) + config["vocab_size"] * hidden) / 1e9


CHECK_BATCH = 16


def measure_encode(cell: Cell, ctx: CellContext, spec: EncodeSpec, count: int,
                   texts_source: str = SYNTHETIC) -> dict[str, Any]:
    """texts_source: classify_texts.py's (a labelled set gives the check true labels to score)."""
    import torch

    from inferlab.bench.backends import get_backend
    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device, torch_dtype
    from inferlab.bench.matmul_peak import device_matmul_tflops
    from inferlab.bench.timing import device_synchronizer, timed
    from inferlab.engine import prefill_flops
    from inferlab.models.config import read_model_spec
    from inferlab.workloads.batching import tokenize_chunk
    from inferlab.workloads.hf_loading import load_tokenizer
    from inferlab.workloads.measure import measure_batches

    c = cell.config
    assert ctx.model_path is not None and cell.backend is not None
    device = resolve_device(c["device"])
    peak = device_matmul_tflops(device, ctx.cache_dir)  # before the model loads: the whole device is free
    tokenizer = load_tokenizer(ctx.model_path)
    texts, truth = cell_texts(texts_source, tokenizer, count, c["min_tokens"], c["max_tokens"], c["seed"],
                              c["length_distribution"])
    token_ids = tokenize_chunk(tokenizer, texts)
    model_spec = read_model_spec(ctx.model_path)
    backend = get_backend(cell.backend, cell.scenario).create(dict(c), spec)
    reset_peak_memory(device)
    with timed(device_synchronizer(device)) as load:
        backend.load(ctx.model_path, device, torch_dtype(c["dtype"]))
    batches = backend.encode_batches(token_ids)
    random.Random(c["seed"]).shuffle(batches)
    with torch.inference_mode():
        metrics = measure_batches(backend.encode, [[token_ids[i] for i in batch] for batch in batches],
                                  measure_spec(c), device,
                                  work=lambda rows: prefill_flops(model_spec, [len(r) for r in rows]),
                                  pads=backend.pads)
    if not metrics["whole_passes"]:
        ctx.warn(f"max_duration_s={c['max_duration_s']:g} ended the timing within the first pass over the sample "
                 "(batches run in a shuffled order)")
    tflops = metrics.pop("flops_timed") / metrics["steady_s"] / 1e12
    metrics.update({"load_s": load.seconds, "tflops_per_s": tflops, "matmul_peak_tflops": peak,
                    "pct_of_matmul_peak": 100 * tflops / peak if peak else None, "batches_per_pass": len(batches),
                    "texts": count, "sample_tokens": sum(map(len, token_ids)), "device": str(device),
                    **peak_memory(device), **_trained_weights(ctx.model_path)})
    ctx.add_backend_metrics(metrics, backend)
    if c["profile"]:
        metrics["prefill_profile"] = _profile(cell, ctx, backend, [[token_ids[i] for i in b] for b in batches],
                                              model_spec, spec, device, peak)
    if c["check_texts"]:
        check_rows = token_ids[: c["check_texts"]]
        with torch.inference_mode():
            ours = _outputs(backend, check_rows)
        backend.close()
        metrics.update(_compare_with_hf(cell, ctx, spec, check_rows, ours, device,
                                        truth[: c["check_texts"]] if truth else None))
    else:
        backend.close()
    return metrics


PROFILED_BATCHES = 8


def _profile(cell: Cell, ctx: CellContext, backend: Any, batches: list[list[list[int]]], model_spec: Any,
             spec: EncodeSpec, device: Any, peak: float | None) -> dict[str, Any] | None:
    """The first batches' device time by kernel family (bench/prefill_profile.py); None for vLLM, whose model
    runs in a process of its own that the profiler does not see."""
    import torch

    from inferlab.bench.prefill_profile import profile_batches
    from inferlab.engine import prefill_flops, projection_flops

    if cell.backend == "vllm":
        ctx.warn("profile: vLLM runs its model in another process; no profile")
        return None
    batches = batches[:PROFILED_BATCHES]
    lengths = [len(row) for batch in batches for row in batch]
    layers = model_spec.num_layers
    if spec.task == "hidden-states" and spec.layers and max(spec.layers) < layers:
        layers = max(spec.layers)  # the forward stops after the deepest layer asked for
    total = prefill_flops(model_spec, lengths, layers)
    projections = projection_flops(model_spec, sum(lengths), layers)
    with torch.inference_mode():
        return profile_batches(backend.encode, batches, device, projections, total - projections, peak)


def _trained_weights(model_path: Any) -> dict[str, Any]:
    """A trained preset's weights as its checkpoint records them (name, sha256); nothing for others."""
    import json
    from pathlib import Path

    record = Path(model_path) / "inferlab_preset.json"
    trained = json.loads(record.read_text()).get("trained_weights") if record.is_file() else None
    return {"trained_weights": trained} if trained else {}


@contextlib.contextmanager
def _exact_float32_matmuls() -> Iterator[None]:
    """float32 matmuls and convolutions in float32, not TF32, while the wide reference runs."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _outputs(backend: Any, rows: list[list[int]]) -> Any:
    """The backend's outputs for `rows` in order, batched its own way: classify [n, labels]; hidden {layer: [n, h]}."""
    import torch

    by_row: dict[int, Any] = {}
    for batch in backend.encode_batches(rows):
        out = backend.encode([rows[i] for i in batch])
        for k, i in enumerate(batch):
            by_row[i] = {layer: t[k] for layer, t in out.items()} if isinstance(out, dict) else out[k]
    ordered = [by_row[i] for i in range(len(rows))]
    if isinstance(ordered[0], dict):
        return {layer: torch.stack([o[layer] for o in ordered]) for layer in ordered[0]}
    return torch.stack(ordered)


def _transformers_outputs(ctx: CellContext, spec: EncodeSpec, rows: list[list[int]], device: Any, dtype: str) -> Any:
    """transformers' outputs for `rows` in `dtype` (SDPA, length-sorted batches of CHECK_BATCH rows; float64: loaded
    in float32, then cast, since the loader offers no float64 and the checkpoint's weights are exact in both)."""
    import torch

    from inferlab.bench.devices import torch_dtype
    from inferlab.workloads.encode_backends import HFEncodeBackend

    reference = HFEncodeBackend(spec, attn="sdpa", batch_size=CHECK_BATCH, bucket_by_length=True)
    reference.load(ctx.model_path, device, torch_dtype("float32" if dtype == "float64" else dtype))
    if dtype == "float64":
        reference.loaded.model.double()
    with torch.inference_mode():
        outputs = _outputs(reference, rows)
    reference.close()
    return outputs


def _compare_with_hf(cell: Cell, ctx: CellContext, spec: EncodeSpec, rows: list[list[int]], ours: Any,
                     device: Any, truth: list[int] | None) -> dict[str, Any]:
    """classify: the labels beside transformers' in the cell's dtype, raw and where decidable (label_agreement.py:
    transformers again in a wider dtype gives the tolerance), the probabilities' largest difference, and with
    true labels (truth) both accuracies; hidden states: relative difference and cosine of the states."""
    import torch

    dtype = cell.config["dtype"]
    theirs = _transformers_outputs(ctx, spec, rows, device, dtype)
    if spec.task == "classify":
        wider = wider_dtype(dtype)
        with _exact_float32_matmuls():
            wide = _transformers_outputs(ctx, spec, rows, device, wider)
        p, q = ours.float().softmax(-1), theirs.float().softmax(-1)
        figures = {"check_texts": len(rows), **label_agreement(ours, theirs, wide), "label_tolerance_dtype": wider,
                   "max_prob_diff_vs_hf": (p - q).abs().max().item()}
        if truth is not None:
            figures.update({"accuracy": accuracy(ours, truth), "hf_accuracy": accuracy(theirs, truth)})
        return figures
    worst_rel, worst_cos = 0.0, 1.0
    for layer, mine in ours.items():
        ref = theirs[layer].float()
        rel = ((mine.float() - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-12)).max().item()
        cos = torch.nn.functional.cosine_similarity(mine.float(), ref, dim=-1).min().item()
        worst_rel, worst_cos = max(worst_rel, rel), min(worst_cos, cos)
    return {"check_texts": len(rows), "states_max_rel_diff_vs_hf": worst_rel, "states_min_cosine_vs_hf": worst_cos}
