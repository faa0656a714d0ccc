"""Rough seconds of the cells of the engine and its peers on one H100/H200 (BackendSpec.estimate_s), so a
budgeted sweep (`--limit-seconds`, lab_sweep.py) starts only cells that fit: a fixed start-up plus a decode
step of `base + per row` ms on llama-380m, scaled by the model's parameter count, or a rate in tokens/s for
the conformer cells. The constants are calibrated from the rows' `wall_s` (benchmarks/README.md). On a CPU
every backend keeps its scenario's estimate (None).
"""

from __future__ import annotations

from inferlab.bench.cells import Cell

_REFERENCE_PARAMS = 0.38e9  # llama-380m, the shape the step times below are for


def weight_scale(cell: Cell) -> float:
    """How much heavier a decode step of this model is than llama-380m's (by its parameter count)."""
    from inferlab.bench import model_refs

    try:
        config = model_refs.model_config(cell.model)
    except Exception:  # noqa: BLE001 - an estimate never fails a plan
        return 1.0
    config = config.get("text_config", config)
    hidden, layers = config.get("hidden_size", 1024), config.get("num_hidden_layers", 24)
    inter, vocab = config.get("intermediate_size", 4 * hidden), config.get("vocab_size", 32000)
    params = layers * (4 * hidden * hidden + 3 * hidden * inter) + vocab * hidden
    return max(0.25, params / _REFERENCE_PARAMS)


def conformer_tokens_per_request(c: dict) -> float:
    """~20 output tokens per heavy atom with the qwen3-chem tokenizer (drug-sized NCI: ~680 at 20-50 atoms);
    430 for the first NCI molecules unfiltered."""
    if c.get("max_heavy_atoms"):
        return 20.0 * (c.get("min_heavy_atoms", 0) + c["max_heavy_atoms"]) / 2
    return 430.0


def _generate(cell: Cell, fixed_s: float, base_ms: float, per_row_ms: float) -> float:
    from inferlab.bench.scenarios.generate import planned_seconds

    step_ms = (base_ms + per_row_ms * cell.config["batch_size"]) * weight_scale(cell)
    return planned_seconds(cell.config, step_ms, fixed_s)


def inferlab_generate(cell: Cell, accelerator: bool) -> float | None:
    return _generate(cell, 15.0, 0.9, 0.009) if accelerator else None


def vllm_generate(cell: Cell, accelerator: bool) -> float | None:
    return _generate(cell, 70.0, 2.6, 0.02) if accelerator else None  # import, compile, graph capture


def hf_continuous(cell: Cell, accelerator: bool) -> float | None:
    """Paged SDPA without flash attends over every row's KV under a mask: the step grows with the batch."""
    return _generate(cell, 25.0, 6.0, 0.08) if accelerator else None


def _conformer_pass_s(cell: Cell, tokens_per_s: float) -> float:
    from inferlab.bench.scenarios.constrained import measured_requests

    return measured_requests(cell.config) * conformer_tokens_per_request(cell.config) / tokens_per_s


def inferlab_constrained(cell: Cell, accelerator: bool) -> float | None:
    """Engine start + compiled programs (~45 s), a warm-up of `slots` full requests, then the passes."""
    if not accelerator:
        return None
    c = cell.config
    rate = 35_000.0 / weight_scale(cell) * 1.6  # tokens/s of qwen3-0.6b (weight scale 1.6)
    slots = c.get("slots") or c["batch_size"]
    warm = 2 * slots * conformer_tokens_per_request(c) / rate
    return 45.0 + warm + c["min_repeats"] * _conformer_pass_s(cell, rate)


def vllm_constrained(cell: Cell, accelerator: bool) -> float | None:
    """Start-up and one 1-token request per template (~110 s), then passes at ~11k tok/s."""
    return 110.0 + cell.config["min_repeats"] * _conformer_pass_s(cell, 11_000.0) if accelerator else None


def hf_xgrammar(cell: Cell, accelerator: bool) -> float | None:
    """Lock-step batches as long as their longest row (~1.3x the mean), ~15 ms + 0.6 ms per row a step
    (the host fills each row's mask); a dynamic cache warms up over a whole batch, a static one compiles."""
    from inferlab.bench.scenarios.constrained import measured_requests

    if not accelerator:
        return None
    c = cell.config
    steps = 1.3 * conformer_tokens_per_request(c)
    batch_s = steps * (15.0 + 0.6 * c["batch_size"]) / 1000
    warm_s = batch_s if c["kv_cache"] == "dynamic" else 35.0 + 2 * 16 * batch_s / steps
    return 12.0 + warm_s + c["min_repeats"] * measured_requests(c) // c["batch_size"] * batch_s


def _encode_pass_s(cell: Cell, tflops: float) -> float:
    """One pass over the classify / hidden-states sample at `tflops` of useful work (2 FLOPs per parameter per
    token, attention left out), from the scenario's mean text length."""
    from inferlab.bench.scenarios.encode_measurement import approx_params_b

    c = cell.config
    count = c.get("num_samples") or c.get("num_prompts")
    tokens = count * (c["min_tokens"] + c["max_tokens"]) / 2
    return tokens * approx_params_b(cell.model) * 2e9 / (tflops * 1e12)


def _encode_s(cell: Cell, fixed_s: float, tflops: float) -> float:
    from inferlab.bench.scenarios.encode_measurement import check_s

    c = cell.config
    one_pass = _encode_pass_s(cell, tflops)
    timed = min(c["max_duration_s"], max(c["min_duration_s"], one_pass))
    return fixed_s + (1 + c["warmup"]) * one_pass + timed + check_s(cell, True)


def inferlab_encode(cell: Cell, accelerator: bool) -> float | None:
    """Process and imports (~6 s), weights, the attention check and timing, a warm-up batch (~4 s); passes at
    ~300 TFLOP/s of useful work."""
    return _encode_s(cell, 10.0, 300.0) if accelerator else None


def vllm_encode(cell: Cell, accelerator: bool) -> float | None:
    """vLLM's start-up (import, load, torch.compile, CUDA graphs: ~70 s cold), passes at ~150 TFLOP/s."""
    return _encode_s(cell, 75.0, 150.0) if accelerator else None
