"""Scenario `attention-kernels`: one attention call, timed per kernel (SDPA auto / flash / efficient /
cudnn / math, and the flash-attn library), over the seeds' shapes ([4,16,2048,64] bf16 causal, [16,32,
512,64]) and decode-like ones (one query over a KV cache). Reports ms/iter (median of warm timed loops),
TFLOP/s, which kernel the profiler saw, and the max abs error against SDPA's math backend in float32.

A kernel that cannot take the inputs is a row with status `unavailable` and torch's reason. Each kernel's call
(`build_call`) returns `run(n)`: n back-to-back calls under one backend context (torch.nn.attention.sdpa_kernel,
or the flash-attn library's own kernel), returning the last output in SDPA layout [batch, q_heads, q_len,
head_dim]; built and run in the child process only (torch).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, common_knobs, dtype_knob
from inferlab.bench.packages import missing_package
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.errors import ConfigError, UnsupportedError

SDPA_KERNELS = ("auto", "flash", "efficient", "cudnn", "math")
KERNELS = SDPA_KERNELS + ("flash_attn",)

KNOBS = (
    Knob("kernel", str, "auto", "attention kernel: SDPA auto or forced to one backend, or the flash-attn library", choices=KERNELS),
    Knob("batch_size", int, 4, "batch", minimum=1),
    Knob("q_heads", int, 16, "query heads", minimum=1),
    Knob("kv_heads", int, 16, "key/value heads (fewer than q_heads: grouped-query attention)", minimum=1),
    Knob("q_len", int, 2048, "query positions (1 for a decode step)", minimum=1),
    Knob("kv_len", int, 2048, "key/value positions (the KV cache length for a decode step)", minimum=1),
    Knob("head_dim", int, 64, "head dimension", minimum=1),
    Knob("causal", bool, True, "causal self-attention (needs q_len == kv_len)"),
    dtype_knob("q/k/v dtype"),
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


def _sdpa_backend(kernel: str) -> Any:
    from torch.nn.attention import SDPBackend

    return {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[kernel]


def expand_kv(t: Any, q_heads: int) -> Any:
    """t  # [batch, kv_heads, len, head_dim] -> [batch, q_heads, len, head_dim] (as HF's repeat_kv)."""
    return t.repeat_interleave(q_heads // t.shape[1], dim=1)


def build_call(kernel: str, q: Any, k: Any, v: Any, causal: bool, gqa: str) -> Callable[[int], Any]:
    """q  # [B, Hq, Sq, D]; k, v  # [B, Hkv, Sk, D]. gqa: 'native' hands the kv heads to the kernel
    (enable_gqa / flash-attn's own GQA), 'expand' repeats them to Hq first (not timed)."""
    import torch.nn.functional as F

    if kernel == "flash_attn":
        return _flash_attn_call(q, k, v, causal, gqa)
    grouped = k.shape[1] != q.shape[1]
    if grouped and gqa == "expand":
        k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
        grouped = False
    extra = {"enable_gqa": True} if grouped else {}

    def run(n: int) -> Any:
        out = None
        for _ in range(n):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)
        return out

    if kernel == "auto":
        return run

    from torch.nn.attention import sdpa_kernel

    backend = _sdpa_backend(kernel)

    def forced(n: int) -> Any:
        with sdpa_kernel([backend]):
            return run(n)

    return forced


def require_flash_attn() -> Callable[..., Any]:
    """flash-attn's flash_attn_func, or UnsupportedError with the import error (checked before any
    tensor is made, so an absent library costs no device initialisation)."""
    try:
        from flash_attn import flash_attn_func
    except Exception as e:  # ImportError, or an ABI mismatch raising OSError/undefined symbol
        raise UnsupportedError(f"flash-attn is not usable here: {type(e).__name__}: {e}") from None
    return flash_attn_func


def _flash_attn_call(q: Any, k: Any, v: Any, causal: bool, gqa: str) -> Callable[[int], Any]:
    import torch

    flash_attn_func = require_flash_attn()
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise UnsupportedError(f"flash-attn runs only float16/bfloat16, not {q.dtype}; set dtype=bfloat16")
    if gqa == "expand" and k.shape[1] != q.shape[1]:
        k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    # flash-attn's layout is [B, S, H, D]; converted once, outside the timed calls.
    qf, kf, vf = (t.transpose(1, 2).contiguous() for t in (q, k, v))

    def run(n: int) -> Any:
        out = None
        for _ in range(n):
            out = flash_attn_func(qf, kf, vf, causal=causal)
        return out.transpose(1, 2)

    return run


def math_reference(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """The same attention in float32 through SDPA's math backend, kv heads expanded: the yardstick."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qf, kf, vf = q.float(), expand_kv(k.float(), q.shape[1]), expand_kv(v.float(), q.shape[1])
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        return F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)


SCENARIO = Scenario(
    "attention-kernels", "one attention call per kernel: ms/iter, TFLOP/s, kernel seen, error vs math fp32",
    KNOBS, run, validate, estimate_s, precheck=precheck,
    headline_metric="ms_per_iter", higher_is_better=False, uses_model=False, default_timeout_s=180.0,
    workload_knobs=("batch_size", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal", "dtype"),
    row_backend=lambda cell: f"sdpa:{cell.config['kernel']}" if cell.config["kernel"] != "flash_attn" else "flash-attn",
)
