"""Scenario `attention-kernels`: one attention call, timed per kernel (SDPA auto / flash / efficient /
cudnn / math, and the flash-attn library), over the seeds' shapes ([4,16,2048,64] bf16 causal, [16,32,
512,64]) and decode-like ones (one query over a KV cache). Reports ms/iter (median of warm timed loops),
TFLOP/s, which kernel the profiler saw, and the max abs error against SDPA's math backend in float32.

A kernel that cannot take the inputs is a row with status `unavailable` and torch's reason.
"""

from __future__ import annotations

import math
from typing import Any

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, common_knobs
from inferlab.bench.packages import missing_package
from inferlab.bench.scenarios.attention_calls import KERNELS
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.errors import ConfigError

KNOBS = (
    Knob("kernel", str, "auto", "attention kernel: SDPA auto or forced to one backend, or the flash-attn library", choices=KERNELS),
    Knob("batch_size", int, 4, "batch", minimum=1),
    Knob("q_heads", int, 16, "query heads", minimum=1),
    Knob("kv_heads", int, 16, "key/value heads (fewer than q_heads: grouped-query attention)", minimum=1),
    Knob("q_len", int, 2048, "query positions (1 for a decode step)", minimum=1),
    Knob("kv_len", int, 2048, "key/value positions (the KV cache length for a decode step)", minimum=1),
    Knob("head_dim", int, 64, "head dimension", minimum=1),
    Knob("causal", bool, True, "causal self-attention (needs q_len == kv_len)"),
    Knob("dtype", str, "bfloat16", "q/k/v dtype", choices=("bfloat16", "float16", "float32")),
    Knob("gqa", str, "native", "grouped kv heads: native (enable_gqa) or expand (repeat to q_heads first, untimed)",
         choices=("native", "expand")),
    Knob("sample_min_s", float, 0.005, "calls per timed sample are chosen so one sample lasts at least this long", minimum=0.0),
    *common_knobs(min_repeats=10, min_duration_s=0.5, warmup=3),
)


def validate(cell: Cell) -> None:
    c = cell.config
    if c["causal"] and c["q_len"] != c["kv_len"]:
        raise ConfigError(
            f"causal=true needs q_len == kv_len (got {c['q_len']} and {c['kv_len']}); a decode-like shape "
            "(one query over a cache) is causal=false"
        )
    if c["q_heads"] % c["kv_heads"]:
        raise ConfigError(f"q_heads={c['q_heads']} is not a multiple of kv_heads={c['kv_heads']}; pick kv_heads that divides it")


def precheck(cell: Cell) -> str | None:
    if cell.config["kernel"] != "flash_attn":
        return None
    return missing_package("flash_attn", "kernel=flash_attn", "pip install flash-attn")


def flops_per_call(c: dict[str, Any]) -> float:
    """4*B*H*Sq*Sk*D (two matmuls of 2 flops per multiply-add), halved for causal self-attention."""
    flops = 4.0 * c["batch_size"] * c["q_heads"] * c["q_len"] * c["kv_len"] * c["head_dim"]
    return flops / 2 if c["causal"] else flops


def shape_label(c: dict[str, Any]) -> str:
    heads = f"{c['q_heads']}" if c["q_heads"] == c["kv_heads"] else f"{c['q_heads']}q/{c['kv_heads']}kv"
    kind = "causal" if c["causal"] else "full"
    return f"B{c['batch_size']} H{heads} q{c['q_len']} kv{c['kv_len']} d{c['head_dim']} {c['dtype']} {kind}"


def estimate_s(cell: Cell, accelerator: bool) -> float:
    measuring = max(cell.config["min_duration_s"], 0.2) * 1.5 + 0.5  # timed loop, profile, reference
    return (4.5 if accelerator else 3.0) + measuring


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    import torch

    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device, torch_dtype
    from inferlab.bench.profiling import observe_attention
    from inferlab.bench.scenarios.attention_calls import build_call, math_reference, require_flash_attn
    from inferlab.bench.timing import device_synchronizer, measure, timed

    c = cell.config
    if c["kernel"] == "flash_attn":
        require_flash_attn()
    device = resolve_device(c["device"])
    dtype = torch_dtype(c["dtype"])
    sync = device_synchronizer(device)
    gen = torch.Generator().manual_seed(c["seed"])
    b, hq, hkv, sq, sk, d = (c[k] for k in ("batch_size", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim"))
    q = torch.randn(b, hq, sq, d, generator=gen).to(device, dtype)  # [B, Hq, Sq, D]
    k = torch.randn(b, hkv, sk, d, generator=gen).to(device, dtype)  # [B, Hkv, Sk, D]
    v = torch.randn(b, hkv, sk, d, generator=gen).to(device, dtype)
    reset_peak_memory(device)
    call = build_call(c["kernel"], q, k, v, c["causal"], c["gqa"])
    with torch.no_grad():
        with timed(sync) as first:
            out = call(1)  # the first call: kernel selection, lazy init; raises if no kernel fits
        reference = math_reference(q, k, v, c["causal"])
        max_abs_error = (out.float() - reference).abs().max().item()
        del reference
        with timed(sync) as one:
            call(1)
        inner = max(1, math.ceil(c["sample_min_s"] / max(one.seconds, 1e-7)))
        m = measure(lambda: call(inner), warmup=c["warmup"], min_repeats=c["min_repeats"],
                    min_duration_s=c["min_duration_s"], sync=sync)
        kernels = observe_attention(lambda: call(1), device)
    per_iter_ms = m.stats.scaled(1000.0 / inner)
    if c["kernel"] not in ("auto", "flash_attn") and c["kernel"] not in kernels.observed:
        ctx.warn(f"requested SDPA kernel {c['kernel']} but the profiler saw {kernels.observed}")
    flops = flops_per_call(c)
    return {
        "ms_per_iter": per_iter_ms.median,
        "ms_per_iter_stats": per_iter_ms.to_dict(),
        "latency_ms": per_iter_ms.latency_dict(),
        "spread": per_iter_ms.spread,
        "tflops_per_s": flops / (per_iter_ms.median / 1000.0) / 1e12,
        "flops_per_call": flops,
        "first_call_s": first.seconds,
        "max_abs_error": max_abs_error,
        "error_reference": "sdpa math backend, float32, kv heads expanded",
        "calls_per_sample": inner,
        "shape": shape_label(c),
        "attention_kernel_observed": kernels.observed,
        "attention_kernels_profile": kernels.to_json(),
        "device": str(device),
        **peak_memory(device),
    }


SCENARIO = Scenario(
    name="attention-kernels",
    description="one attention call per kernel: ms/iter, TFLOP/s, kernel seen, error vs math fp32",
    knobs=KNOBS,
    run=run,
    validate=validate,
    estimate_s=estimate_s,
    headline_metric="ms_per_iter",
    higher_is_better=False,
    uses_backends=False,
    uses_model=False,
    default_timeout_s=180.0,
    workload_knobs=("batch_size", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal", "dtype"),
    row_backend=lambda cell: f"sdpa:{cell.config['kernel']}" if cell.config["kernel"] != "flash_attn" else "flash-attn",
    precheck=precheck,
)
