"""Lab plugin: scenario `engine-kernels`, the engine's kernels one at a time, each timed inside a CUDA graph.

A plugin because it reaches into the engine's kernels (inferlab.engine.kernels, engine.constraints),
which the lab's own scenarios (src/inferlab/bench) may not import: the engine's public surface ends at
Engine. Run it with benchmarks/plans/engine-kernels.toml (docs/lab.md, "Kernel micro-benchmarks").

Every timing replays one CUDA graph holding one call per layer over `layers` distinct tensors (so nothing
is served from L2 that a real step reads from memory): device microseconds per call, no launch overhead.
Knob `group`:
  attention        the decode attention kernel (rope + K/V write + flash-decoding + split merge) at a model's
                   shape (`shape`), `rows` rows of `length` positions, bf16 or fp8 cache (`kv_dtype`): the
                   engine's default config; with fp8 also the bf16 cache's default (`fp8_over_bf16`: the fp8
                   default's time over it) and the fp8 kernel's other configs (FP8_CANDIDATES); with `sweep`
                   the grid of splits per SM x BLOCK_N x warps x stages. Every config is first checked against
                   the torch reference (fp32 math) with its output's memory poisoned by NaN (`rel_error`: max
                   |error| / max |output|, at most 2%, or the label is that error); us, GB/s of K/V (+ scales).
  sampling         the sampler's pieces at `rows` x `vocab` bf16 logits: one read of them (torch amax), top-p
                   threshold by the torch sort (the reference) and by the radix kernels, min-p, top-k 50 +
                   top-p, the whole top-p draw by rejection (4 and 8 warps) and by threshold + race, the race
                   at the engine's tile, two others and with the exact logarithm, with a threshold, the fp32
                   cast before it (`logit_reads`: each time in reads of the logits at the copy bandwidth);
                   with `sweep` the radix chain's slicing x tile x warps. Their correctness and the
                   distribution of their draws: tests/gpu/test_sampling_gpu.py.
  skinny-gemm      the skinny Triton GEMM for each projection of `shape` at `rows` rows: the engine's
                   candidate tiles, or with `sweep` the grid of BLOCK_N x BLOCK_K x split-K x warps x stages;
                   past the engine's 64 rows, tiles with every row in one program (checked against F.linear).
  cublas-gemm      each projection and the LM head (`vocab` x hidden): F.linear on the stored [N, K] weight
                   (the engine's path) against x @ W^T stored [K, N], with cuBLAS and with the cuBLASLt
                   preference.
                   Both GEMM groups: `bound_us` per projection, max(bytes at the measured copy bandwidth,
                   FLOPs at the measured bf16 matrix rate), and `of_bound` (bound / time) per label.
  constraint-step  the constraint runtime at `rows` x `vocab`: sampling alone (greedy, T=1) against mask +
                   sampling + choose + advance, the mask alone (Triton kernel and torch), choose + advance,
                   the logits copy every variant starts with, and the torch mask over three table layouts
                   (bool [S+1, V], class-indirect, bit-packed). Runs on CPU too (wall clock, torch mask).
The row's `us` is {label: microseconds} (a label that does not compile, run or pass its check: its error),
`default_us` the engine's own choice, `best` / `best_us` the fastest label.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import Any, Callable

from inferlab.bench.graph_timing import graph_us as cuda_graph_us
from inferlab.bench.knobs import Knob
from inferlab.bench.scenarios import register_scenario
from inferlab.bench.scenarios.base import Scenario
from inferlab.errors import ConfigError, UnsupportedError

# heads, kv_heads, head_dim, qk_norm, window, softcap, (1 + w) q/k norms; hidden, qkv width, q width, intermediate
SHAPES = {
    "llama-380m": ((16, 8, 64, False, 0, None, False), (1024, 2048, 1024, 4096)),
    "qwen3-0.6b": ((16, 8, 128, True, 0, None, False), (1024, 4096, 2048, 3072)),
    "gemma-2b": ((8, 1, 256, False, 0, None, False), (2048, 2560, 2048, 16384)),
    "gemma2-2b": ((8, 4, 256, False, 300, 50.0, False), (2304, 4096, 2048, 9216)),
    "gemma3-1b": ((4, 1, 256, True, 512, None, True), (1152, 1536, 1024, 6912)),
}
GROUPS = ("attention", "sampling", "skinny-gemm", "cublas-gemm", "constraint-step")

KNOBS = (
    Knob("group", str, "attention", "which kernels (see the plugin's docstring)", choices=GROUPS),
    Knob("shape", str, "llama-380m", "the model shape of attention / GEMM groups", choices=tuple(SHAPES)),
    Knob("rows", int, 16, "decode rows (batch)", minimum=1),
    Knob("length", int, 1000, "attention: every row's length (positions attended)", minimum=1),
    Knob("vocab", int, 128256, "sampling / constraint-step: logits width", minimum=2),
    Knob("kv_dtype", str, "auto", "attention: the cache in bf16 (auto) or fp8", choices=("auto", "fp8")),
    Knob("tokenizer", str, "qwen3-chem", "constraint-step: whose grammar set", choices=("qwen3-chem", "builtin")),
    Knob("sweep", bool, False, "attention / sampling / skinny-gemm: time the config grid, not only the engine's"),
    Knob("layers", int, 16, "distinct tensors per graph (one call each)", minimum=1),
    Knob("replays", int, 5, "graph replays timed", minimum=1),
    Knob("device", str, "auto", "where to run: auto picks cuda when available", choices=("auto", "cuda", "cpu")),
    Knob("seed", int, 0, "seed of the random inputs", minimum=0),
    Knob("cpu_threads", int, 0, "torch intra-op threads (0 = torch's default)", minimum=0),
)


def graph_us(calls: list[Callable[[], Any]], replays: int, cuda: bool) -> float:
    """Microseconds per call: the calls captured once in a CUDA graph and replayed; on CPU, wall clock."""
    if not cuda:
        calls[0]()
        start = time.perf_counter()
        for call in calls:
            call()
        return 1e6 * (time.perf_counter() - start) / len(calls)
    return cuda_graph_us(calls, replays)


def timed_labels(cells: dict[str, Callable[[], float]]) -> dict[str, Any]:
    """{label: us, or the error that label raised}: a config that does not compile hides no other."""
    out: dict[str, Any] = {}
    for label, measure in cells.items():
        try:
            out[label] = measure()
        except Exception as e:
            out[label] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


# The fp8 cache's other configs timed beside its default (AttentionConfig fields: block_n, warps, stages,
# programs_per_sm, maxnreg): one-warp programs won the development sweep (benchmarks/checks/
# 2026-11-26-fp8-attention-dev); maxnreg trades registers for resident programs
FP8_CANDIDATES = ((32, 1, 3, 4, 168), (16, 1, 4, 4, None), (16, 1, 4, 4, 168), (32, 1, 4, 4, None),
                  (64, 2, 3, 4, None), (64, 4, 3, 1, None))  # fmt: skip


def config_label(config) -> str:
    """'n32 w1 s3' (+ ' p4' programs per SM when not 1, ' r168' with a register cap)."""
    text = f"n{config.block_n} w{config.num_warps} s{config.num_stages}"
    return text + (f" p{config.programs_per_sm}" if config.programs_per_sm != 1 else "") + (
        f" r{config.maxnreg}" if config.maxnreg else "")


def attention(c: dict[str, Any], device: Any, cache_dir: Any) -> dict[str, Any]:
    import torch

    from inferlab.engine.attention import decode_rope_attention_torch
    from inferlab.engine.kernels import triton_attention
    from inferlab.engine.kv_quant import quantize
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    (heads, kv_heads, head_dim, qk_norm, window, softcap, offset), _ = SHAPES[c["shape"]]
    rows, length, fp8 = c["rows"], c["length"], c["kv_dtype"] == "fp8"
    g = torch.Generator(device=device).manual_seed(c["seed"])

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device).bfloat16()

    tables = RotaryTables.build(RopeSpec(theta=500000.0), head_dim, length + 8, device)
    bf16 = [dict(k_cache=randn(rows, kv_heads, length + 8, head_dim), v_cache=randn(rows, kv_heads, length + 8, head_dim))
            for _ in range(c["layers"])]  # per layer: the kernel's cache arguments  # fmt: skip
    quantized = [dict(zip(("k_cache", "k_scale", "v_cache", "v_scale"), (*quantize(layer["k_cache"]),
                                                                       *quantize(layer["v_cache"]))))
                 for layer in bf16] if fp8 else []  # fmt: skip
    qkv = randn(rows, (heads + 2 * kv_heads) * head_dim)
    norms = [randn(head_dim) * 0.3 if qk_norm else None for _ in range(2)]
    slots = torch.arange(rows, device=device)
    positions = torch.full((rows,), length - 1, dtype=torch.int64, device=device)
    counters = torch.zeros(rows * kv_heads, dtype=torch.int32, device=device)
    args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
    variant = dict(window=window, softcap=softcap, qk_norm_offset=offset)
    scale = head_dim**-0.5

    def call(layer: dict, config) -> torch.Tensor:
        scales = {k: layer[k] for k in ("k_scale", "v_scale") if k in layer}
        return triton_attention.decode_rope_attention(*args, layer["k_cache"], layer["v_cache"], slots, heads, scale,
                                                      counters, config=config, **scales, **variant)  # fmt: skip

    def reference(layer: dict) -> torch.Tensor:
        ref = {k: t.clone() for k, t in layer.items()}
        return decode_rope_attention_torch(*args, ref["k_cache"], ref["v_cache"], slots, heads, scale,
                                           **{k: ref[k] for k in ("k_scale", "v_scale") if k in ref}, **variant).float()

    want = {False: reference(bf16[0]), True: reference(quantized[0]) if fp8 else None}
    errors: dict[str, float] = {}

    def checked_then_timed(label: str, caches: list[dict], config) -> Callable[[], float]:
        """The config against the torch reference (fp32 math) on a copy of layer 0, its output's memory poisoned
        with NaN (the caching allocator hands the freed block to the kernel next): within 2% of max |out|, finite,
        the merge counters back at zero; then timed. A config that fails its check raises (its label: the error)."""
        def measure() -> float:
            poison = torch.full((rows * heads * head_dim,), float("nan"), dtype=torch.bfloat16, device=device)
            del poison
            expected = want[caches is quantized]
            got = call({k: t.clone() for k, t in caches[0].items()}, config).float()
            errors[label] = (got - expected).abs().max().item() / max(expected.abs().max().item(), 1e-6)
            if not (errors[label] <= 0.02 and torch.isfinite(got).all().item() and not counters.any().item()):
                raise AssertionError(f"{label}: max |err| {errors[label]:.2%} of max |out| (> 2%), or a non-finite "
                                     "output, or merge counters left non-zero")
            return graph_us([lambda layer=layer: call(layer, config) for layer in caches], c["replays"], True)
        return measure

    default = triton_attention.default_config(head_dim, fp8)
    caches = quantized if fp8 else bf16
    cells = {"default": checked_then_timed("default", caches, default)}
    if fp8:  # the model-dtype cache beside it, and the fp8 kernel's other configs
        cells["bf16 default"] = checked_then_timed("bf16 default", bf16, triton_attention.default_config(head_dim))
        for fields in FP8_CANDIDATES:
            config = triton_attention.AttentionConfig(*fields)
            if config != default:
                cells[f"fp8 {config_label(config)}"] = checked_then_timed(f"fp8 {config_label(config)}", quantized,
                                                                          config)
    if c["sweep"]:
        for mult, block_n, warps, stages in itertools.product((1, 2, 4, 8), (32, 64, 128), (4, 8), (2, 3, 4)):
            config = triton_attention.AttentionConfig(block_n, warps, stages, mult)
            cells[f"x{mult} {config_label(config)}"] = checked_then_timed(f"x{mult} {config_label(config)}", caches,
                                                                          config)
    us = timed_labels(cells)
    per_position = head_dim * (1 if fp8 else 2) + (4 if fp8 else 0)  # K or V, + an fp32 scale with fp8
    kv_bytes = rows * min(length, window or length) * 2 * kv_heads * per_position
    bf16_bytes = rows * min(length, window or length) * 2 * kv_heads * head_dim * 2
    gbps = {k: (bf16_bytes if k.startswith("bf16") else kv_bytes) / v / 1e3 for k, v in us.items() if isinstance(v, float)}
    out = {"us": us, "gb_per_s": gbps, "rel_error": errors, "kv_bytes": kv_bytes}
    if fp8 and isinstance(us.get("bf16 default"), float) and isinstance(us.get("default"), float):
        out["fp8_over_bf16"] = us["default"] / us["bf16 default"]
    return out


def sampling(c: dict[str, Any], device: Any, cache_dir: Any) -> dict[str, Any]:
    import torch

    from inferlab.bench.bandwidth import device_bandwidth_gb_per_s
    from inferlab.engine.kernels import triton_filter, triton_sampling, triton_top_p
    from inferlab.engine.sampler import FILTER_MIN_P, FILTER_TOP_K, FILTER_TOP_P, filter_threshold

    rows, vocab = c["rows"], c["vocab"]
    g = torch.Generator(device=device).manual_seed(c["seed"])
    logits = [(torch.randn(rows, vocab, generator=g, device=device) * 2).bfloat16() for _ in range(c["layers"])]
    t, m = torch.ones(rows, device=device), torch.zeros(rows, device=device)
    none, k50 = torch.zeros(rows, dtype=torch.int64, device=device), torch.full((rows,), 50, device=device)
    p, seeds = torch.full((rows,), 0.9, device=device), torch.arange(rows, device=device)
    tau = triton_filter.filter_threshold(logits[0], t, none, p, m, FILTER_TOP_P)

    def each(fn: Callable[[torch.Tensor], Any]) -> Callable[[], float]:
        return lambda: graph_us([lambda x=x: fn(x) for x in logits], c["replays"], True)

    def race(**tile: int) -> Callable[[torch.Tensor], Any]:
        return lambda x: triton_sampling.race_argmax(x, t, None, seeds, seeds, **tile)

    cells = {
        "one read (torch amax)": each(lambda x: x.amax(dim=-1)),
        "top-p threshold, torch sort": each(lambda x: filter_threshold(x.float(), t, none, p, m, FILTER_TOP_P)),
        "top-p threshold, radix (default)": each(lambda x: triton_filter.filter_threshold(x, t, none, p, m,
                                                                                          FILTER_TOP_P)),
        "min-p threshold": each(lambda x: triton_filter.filter_threshold(x, t, none, p, p / 10, FILTER_MIN_P)),
        "top-k 50 + top-p threshold": each(lambda x: triton_filter.filter_threshold(x, t, k50, p, m, FILTER_TOP_K)),
        "top-p draw by rejection": each(lambda x: triton_top_p.top_p_by_rejection(x, t, p, m, seeds, seeds)),
        "top-p draw by rejection, 8 warps": each(lambda x: triton_top_p.top_p_by_rejection(x, t, p, m, seeds, seeds,
                                                                                           num_warps=8)),
        "top-p draw, threshold + race": each(lambda x: triton_sampling.race_argmax(
            x, t, triton_filter.filter_threshold(x, t, none, p, m, FILTER_TOP_P), seeds, seeds)),
        "race bf16, no threshold (engine: 4096 x 4 warps)": each(race()),
        "race 4096 x 8 warps": each(race(num_warps=8)),
        "race 2048 x 2 warps": each(race(block=2048, num_warps=2)),
        "race, exact log2": each(lambda x: exact_log_race(x, t, seeds, seeds)),
        "race bf16 with threshold": each(lambda x: triton_sampling.race_argmax(x, t, tau, seeds, seeds)),
        "cast to fp32 + race": each(lambda x: triton_sampling.race_argmax(x.float(), t, tau, seeds, seeds)),
    }
    if c["sweep"]:  # the radix chain's slicing and tile: what the defaults were set from
        for (block, warps), chunks in itertools.product(((256, 8), (128, 4), (512, 8), (1024, 16)), (4, 16, 32, 64)):
            cells[f"radix block={block} warps={warps} slices={chunks}"] = each(
                lambda x, b=block, w=warps, n=chunks: triton_filter.filter_threshold(
                    x, t, none, p, m, FILTER_TOP_P, block=b, chunks=n, num_warps=w))
    us = timed_labels(cells)
    copy = device_bandwidth_gb_per_s(device, cache_dir)
    read_us = rows * vocab * 2 / (copy * 1e3) if copy else None  # one read of the bf16 logits at the copy bandwidth
    return {"us": us, "default_label": "top-p draw by rejection", "copy_gb_per_s": copy,
            "logit_reads": {k: v / read_us for k, v in us.items() if isinstance(v, float)} if read_us else {},
            "default_slices": triton_filter.choose_chunks(rows, vocab, 256, triton_filter._sm_count(device))}


def exact_log_race(logits, t, seeds, index):
    """The engine's race kernel with the exact logarithm (FAST_LOG off): what the hardware lg2 saves."""
    import torch
    import triton

    from inferlab.engine.kernels import triton_sampling

    rows, vocab = logits.shape
    chunks = triton.cdiv(vocab, 4096)
    val = torch.empty((rows, chunks), dtype=torch.float32, device=logits.device)
    idx = torch.empty((rows, chunks), dtype=torch.int32, device=logits.device)
    triton_sampling._race_kernel[(rows, chunks)](
        logits, t, t, seeds, index, t, val, idx, val, val, logits.stride(0), vocab,
        CHUNKS=chunks, BLOCK=4096, SPAN=1, HAS_TAU=False, ROUND=0, HAS_SKIP=False, STATS=False, FAST_LOG=False,
        num_warps=4,
    )  # fmt: skip
    return triton_sampling.pick_tokens(triton_sampling.RacePartials(val, idx, None, None, 4096))


def _projections(c: dict[str, Any], device: Any, lm_head: bool = False) -> dict[str, tuple[list, int]]:
    """{projection: ([N, K] bf16 weights, the input width)} at the shape's sizes: one weight per layer (no L2
    reuse), the LM head ([vocab, hidden], larger than the L2 alone) once."""
    import torch

    _, (hidden, qkv, q_width, inter) = SHAPES[c["shape"]]
    g = torch.Generator(device=device).manual_seed(c["seed"])
    sizes = {"qkv": (qkv, hidden), "o": (hidden, q_width), "gate_up": (2 * inter, hidden), "down": (hidden, inter)}
    sizes |= {"lm_head": (c["vocab"], hidden)} if lm_head else {}
    return {name: ([(torch.randn(n, k, generator=g, device=device) * 0.02).bfloat16()
                    for _ in range(1 if name == "lm_head" else c["layers"])], k)
            for name, (n, k) in sizes.items()}  # fmt: skip


def gemm_bound_us(rows: int, n: int, k: int, device: Any, cache_dir: Any) -> float | None:
    """The projection's least time: max(its bytes at the measured copy bandwidth, its FLOPs at the measured
    bf16 matrix rate); None where either is not measured."""
    import torch

    from inferlab.bench.bandwidth import device_bandwidth_gb_per_s
    from inferlab.bench.device_limits import device_limits

    copy, tflops = device_bandwidth_gb_per_s(device, cache_dir), device_limits(device, torch.bfloat16, cache_dir).get(
        "matmul_tflops")
    if not copy or not tflops:
        return None
    return max((n * k + rows * k + rows * n) * 2 / (copy * 1e3), 2 * rows * n * k / (tflops * 1e6))


# Tiles with every row in one program (BLOCK_M, BLOCK_N, BLOCK_K, split-K, warps), beyond the engine's GEMM plan
# (skinny_linear stops at 64 rows): does the skinny kernel reach the bound at 128-256 rows?
ONE_PROGRAM_TILES = ((256, 64, 64, 1, 8), (256, 128, 64, 1, 8), (256, 32, 64, 1, 4), (256, 64, 64, 2, 8),
                     (256, 64, 64, 4, 8))  # fmt: skip


def skinny_one_program(x, w, tile: tuple, counters):
    """The skinny GEMM kernel launched with BLOCK_M rows per program (x has at most BLOCK_M rows)."""
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig
    from inferlab.engine.kernels.triton_gemm_rows import skinny_rows_linear

    block_m, block_n, block_k, split, warps = tile
    return skinny_rows_linear(x, w, block_m, SkinnyConfig(block_n, block_k, split, warps, num_stages=3), counters)


def skinny_gemm(c: dict[str, Any], device: Any, cache_dir: Any) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from inferlab.engine.gemm_plan import candidate_configs
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig, skinny_linear, tile_counters

    sm_count, rows = torch.cuda.get_device_properties(device).multi_processor_count, c["rows"]
    us: dict[str, Any] = {}
    bounds: dict[str, float | None] = {}
    for name, (weights, k) in _projections(c, device).items():
        n = weights[0].shape[0]
        bounds[name] = gemm_bound_us(rows, n, k, device, cache_dir)
        counters = tile_counters(n, 16, device)
        if rows > 64:  # past the engine's plan: every row in one program, checked against F.linear first
            x = torch.randn(rows, k, device=device).bfloat16()
            want = F.linear(x, weights[0]).float()

            def one_program(tile: tuple) -> float:
                got = skinny_one_program(x, weights[0], tile, counters).float()
                if (got - want).abs().max().item() > 0.02 * want.abs().max().item():
                    raise AssertionError(f"tile {tile}: off F.linear by more than 2% of max |out|")
                return graph_us([lambda w=w: skinny_one_program(x, w, tile, counters) for w in weights], c["replays"],
                                True)  # fmt: skip

            us |= timed_labels({f"{name} one program m{t[0]} n{t[1]} k{t[2]} split{t[3]} w{t[4]}":
                                (lambda t=t: one_program(t)) for t in ONE_PROGRAM_TILES})  # fmt: skip
            continue
        swiglu = name == "down"  # down: SwiGLU of the gate_up output fused into its input
        x = torch.randn(rows, 2 * k if swiglu else k, device=device).bfloat16()
        configs = candidate_configs(n, k, rows, sm_count)
        if c["sweep"]:
            grid = itertools.product((16, 32, 64, 128), (64, 128, 256), (1, 2, 4, 8), (4, 8), (3, 4))
            configs = [SkinnyConfig(*tile) for tile in grid if k // tile[2] >= tile[1] and tile[:2] != (128, 256)]
        cells = {f"{name} {config} w{config.num_warps} s{config.num_stages}": (
            lambda cfg=config: graph_us([lambda w=w: skinny_linear(x, w, cfg, swiglu, counters) for w in weights],
                                        c["replays"], True)) for config in configs}  # fmt: skip
        us |= timed_labels(cells)
    return {"us": us, "bound_us": bounds, "of_bound": of_bound(us, bounds)}


def of_bound(us: dict[str, Any], bounds: dict[str, float | None]) -> dict[str, float]:
    """{label: its projection's bound / its time} (1.0: at the bound) for the labels that ran."""
    return {label: bounds[label.split()[0]] / t for label, t in us.items()
            if isinstance(t, float) and bounds.get(label.split()[0])}  # fmt: skip


def cublas_gemm(c: dict[str, Any], device: Any, cache_dir: Any) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    cells, bounds = {}, {}
    for name, (weights, k) in _projections(c, device, lm_head=True).items():
        bounds[name] = gemm_bound_us(c["rows"], weights[0].shape[0], k, device, cache_dir)
        transposed = [w.t().contiguous() for w in weights]  # [K, N]: another cuBLAS kernel family
        x = torch.randn(c["rows"], k, device=device).bfloat16()
        for library in ("cublas", "cublaslt"):
            def timed(calls: list, lib: str = library) -> float:
                torch.backends.cuda.preferred_blas_library(lib)
                try:
                    return graph_us(calls, c["replays"], True)
                finally:
                    torch.backends.cuda.preferred_blas_library("cublas")

            cells[f"{name} linear [N,K] {library}"] = lambda f=timed: f([lambda w=w: F.linear(x, w) for w in weights])
            cells[f"{name} matmul [K,N] {library}"] = lambda f=timed: f([lambda t=t: x @ t for t in transposed])
    us = timed_labels(cells)
    return {"us": us, "bound_us": bounds, "of_bound": of_bound(us, bounds)}


def constraint_step(c: dict[str, Any], device: Any, cache_dir: Any) -> dict[str, Any]:
    import torch

    from inferlab.constraints.program import compile_program
    from inferlab.constraints.simulate import ReferenceSampling, sample_tokens, synthetic_conformer_segments
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.engine.constraints.runtime import ConstraintRuntime
    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
    from inferlab.models.tokenizer_loading import load_hf_tokenizer
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    rows, vocab, cuda = c["rows"], c["vocab"], device.type == "cuda"
    tokenizer = build_builtin_tokenizer() if c["tokenizer"] == "builtin" else load_hf_tokenizer(qwen3_chem_tokenizer_dir())
    if vocab < len(tokenizer):
        raise ConfigError(f"vocab={vocab} is narrower than the {c['tokenizer']} tokenizer ({len(tokenizer)} tokens): "
                          "raise --set vocab (151936 is qwen3-chem's logits width)")
    grammar_set, rng = grammar_set_for(tokenizer), random.Random(c["seed"])
    programs = [compile_program(synthetic_conformer_segments(40, "coord3-fixed4", rng), tokenizer) for _ in range(8)]
    length = max(p.length for p in programs)
    runtime = ConstraintRuntime(grammar_set, rows, length, vocab, device)  # the Triton mask kernel on CUDA
    by_torch = ConstraintRuntime(grammar_set, rows, length, vocab, device, mask_impl="torch")
    greedy, t1 = ReferenceSampling(0.0), ReferenceSampling(1.0)
    source, work = torch.randn(rows, vocab, device=device), torch.empty(rows, vocab, device=device)
    uniform = torch.rand(rows, 1, device=device)
    sampled = torch.zeros(rows, dtype=torch.int64, device=device)
    states = torch.randint(0, grammar_set.num_states + 1, (rows,), device=device)

    def step(rt, sampling, u):
        tokens = rt.choose(sample_tokens(rt.mask_logits(work.copy_(source)), sampling, uniform=u))
        rt.advance(tokens)

    allowed = ~by_torch.forbidden  # [S+1, V]
    by_class = torch.cat([torch.from_numpy(grammar_set.transitions != 0),
                          torch.ones(1, grammar_set.num_classes, dtype=torch.bool)])
    by_class = by_class.to(device)
    bits = torch.nn.functional.pad(allowed.long(), (0, (-vocab) % 32)).view(allowed.shape[0], -1, 32)
    packed = (bits << torch.arange(32, device=device)).sum(-1).int()  # [S+1, V/32] (bit 31 wraps)
    word, bit = torch.arange(vocab, device=device) // 32, (torch.arange(vocab, device=device) % 32).int()
    layouts = {"bool-table": lambda s: by_torch.forbidden.index_select(0, s),
               "class-indirect": lambda s: ~by_class.index_select(0, s).index_select(1, by_torch.token_class),
               "bit-packed": lambda s: ((packed.index_select(0, s).index_select(1, word) >> bit) & 1) == 0}
    for name, layout in layouts.items():  # the same mask three ways
        assert torch.equal(layout(states), layouts["bool-table"](states)), name
    variants = {
        "greedy": lambda: sample_tokens(work.copy_(source), greedy),
        "greedy + constraint": lambda: step(runtime, greedy, None),
        "t1": lambda: sample_tokens(work.copy_(source), t1, uniform=uniform),
        "t1 + constraint": lambda: step(runtime, t1, uniform),
        f"mask ({runtime.mask_impl})": lambda: runtime.mask_logits(work.copy_(source)),
        "mask (torch)": lambda: by_torch.mask_logits(work.copy_(source)),
        "logits copy": lambda: work.copy_(source),
        "choose + advance": lambda: runtime.advance(runtime.choose(sampled)),
        **{f"torch mask, {name} layout": (lambda f=f: work.copy_(source).masked_fill_(f(states), float("-inf")))
           for name, f in layouts.items()},
    }
    for rt in (runtime, by_torch):  # long programs: every row mid-program, in holes and copies alike
        for row in range(rows):
            rt.assign(row, programs[row % len(programs)])
        for _ in range(5):
            step(rt, greedy, None)
    us = timed_labels({label: (lambda fn=fn: graph_us([fn] * c["layers"], c["replays"], cuda))
                       for label, fn in variants.items()})  # fmt: skip
    return {"us": us, "default_label": "t1 + constraint", "mask_impl": runtime.mask_impl}


# group -> its run(knob values, device, the run's cache folder: the measured copy bandwidth and matrix rate)
RUNS = {"attention": attention, "sampling": sampling, "skinny-gemm": skinny_gemm, "cublas-gemm": cublas_gemm,
        "constraint-step": constraint_step}


def run(cell, ctx) -> dict[str, Any]:
    from inferlab.bench.devices import resolve_device

    c = cell.config
    device = resolve_device(c["device"])
    if device.type != "cuda" and c["group"] != "constraint-step":
        raise UnsupportedError(f"group {c['group']} times Triton kernels and cuBLAS in CUDA graphs: it needs a GPU")
    metrics = RUNS[c["group"]](c, device, ctx.cache_dir)
    timed = {label: us for label, us in metrics["us"].items() if isinstance(us, float)}
    if not timed:
        raise RuntimeError(f"no label of group {c['group']} ran: {metrics['us']}")
    metrics["best"] = min(timed, key=timed.get)
    metrics["best_us"] = timed[metrics["best"]]
    metrics["default_us"] = timed.get(metrics.pop("default_label", "default"))
    metrics["device"] = str(device)
    return metrics


def validate(cell) -> None:
    c = cell.config
    if c["group"] == "constraint-step" and c["vocab"] < 2048:
        raise ConfigError(f"vocab={c['vocab']}: constraint-step masks at least the built-in tokenizer's 2,048 tokens; "
                          "use --set vocab=2048 or more (151936 is qwen3-chem's logits width)")


def estimate_s(cell, accelerator: bool) -> float:
    """Process start and CUDA init, plus compiling each config (~2 s; the sweeps: ~100 configs)."""
    return 20.0 + (200.0 if cell.config["sweep"] else 10.0)


register_scenario(Scenario(
    name="engine-kernels",
    description="the engine's kernels one at a time in CUDA graphs: decode attention configs, sampler pieces, "
                "skinny and cuBLAS GEMMs, the constraint step (a plugin: benchmarks/plugins/engine_kernels.py)",
    knobs=KNOBS,
    run=run,
    validate=validate,
    estimate_s=estimate_s,
    headline_metric="default_us",
    higher_is_better=False,
    uses_model=False,
    default_timeout_s=300.0,
    workload_knobs=("group", "shape", "rows", "length", "vocab", "kv_dtype"),
))
