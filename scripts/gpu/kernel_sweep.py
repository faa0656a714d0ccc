"""Sweep the decode step's kernels at llama-380m's shapes, each timed inside a CUDA graph over 16 distinct
layers' tensors (so nothing is served from L2 that the real step would read from memory):

  attention  the fused rope + flash-decoding kernel at rows 16 / 64 / 256 and row lengths 550 and 1000 (the
             middle and the end of the 1000-token benchmark): programs per SM (-> splits), BLOCK_N, warps,
             stages; the default AttentionConfig for reference; bytes read -> GB/s.
  gemm       each projection at rows 16 / 64 / 256: F.linear on the stored [N, K] weight (the engine's
             path) vs x @ W^T stored [K, N] contiguous (another cuBLAS kernel family), with and without the
             cuBLASLt preference.
  skinny     the skinny Triton GEMM over a grid of tiles (BLOCK_N, BLOCK_K, split-K, warps, stages), rows 16, 64.

Writes sweep.json under --out and prints the best cells. Usage on the device:
  python scripts/gpu/kernel_sweep.py --out $OUT/sweep [--parts attention,gemm]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Callable

from dataclasses import dataclass

import torch
import torch.nn.functional as F

LAYERS = 16
HIDDEN, QKV, INTER = 1024, 2048, 4096  # llama-380m's projections
MAX_LEN = 1056


@dataclass(frozen=True)
class AttentionShape:
    heads: int
    kv_heads: int
    head_dim: int
    qk_norm: bool
    batch_sizes: tuple[int, ...]
    lengths: tuple[int, ...]  # row lengths timed: the middle and the end of the shape's benchmark


ATTENTION_SHAPES = {
    "llama-380m": AttentionShape(16, 8, 64, False, (16, 64, 256), (550, 1000)),  # 48 + 1000 tokens
    "qwen3-0.6b": AttentionShape(16, 8, 128, True, (256,), (330, 629)),  # 29 + 600 tokens, 256 rows
}


def graph_us(calls: list[Callable[[], object]], replays: int = 5) -> float:
    """Device microseconds per call of `calls` (one per layer), captured once and replayed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return 1e3 * start.elapsed_time(end) / (replays * len(calls))


def sweep_attention(device: torch.device, shape: str = "llama-380m") -> dict:
    from inferlab.engine.attention import decode_rope_attention_torch
    from inferlab.engine.kernels import triton_attention
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    a = ATTENTION_SHAPES[shape]
    tables = RotaryTables.build(RopeSpec(theta=500000.0), a.head_dim, MAX_LEN, device)
    scale = a.head_dim**-0.5
    out: dict = {}
    for rows in a.batch_sizes:
        caches = [
            (
                torch.randn(rows, a.kv_heads, MAX_LEN, a.head_dim, device=device, dtype=torch.bfloat16),
                torch.randn(rows, a.kv_heads, MAX_LEN, a.head_dim, device=device, dtype=torch.bfloat16),
            )
            for _ in range(LAYERS)
        ]
        qkv = torch.randn(rows, (a.heads + 2 * a.kv_heads) * a.head_dim, device=device, dtype=torch.bfloat16)
        slots = torch.arange(rows, device=device)
        counters = torch.zeros(rows * a.kv_heads, dtype=torch.int32, device=device)
        norms = [torch.randn(a.head_dim, device=device, dtype=torch.bfloat16) if a.qk_norm else None for _ in range(2)]
        for length in a.lengths:
            positions = torch.full((rows,), length - 1, device=device, dtype=torch.int64)
            args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
            kv_bytes = rows * length * 2 * a.kv_heads * a.head_dim * 2
            ref = decode_rope_attention_torch(*args, *[c.clone() for c in caches[0]], slots, a.heads, scale).float()
            cells = {}

            def run(label: str, config) -> None:
                try:
                    got = triton_attention.decode_rope_attention(
                        *args, *caches[0], slots, a.heads, scale, counters, config=config
                    )
                    err = (got.float() - ref).abs().max().item()
                    us = graph_us(
                        [
                            lambda k=k, v=v: triton_attention.decode_rope_attention(
                                *args, k, v, slots, a.heads, scale, counters, config=config
                            )
                            for k, v in caches
                        ]
                    )
                    cells[label] = {"us": us, "gb_per_s": kv_bytes / us / 1e3, "max_abs_err": err}
                except Exception as e:  # a config that does not compile must not hide the others
                    cells[label] = {"error": repr(e)[:300]}

            run("default", triton_attention.AttentionConfig())
            for mult, block_n, warps, stages in itertools.product((1, 2, 4, 8), (32, 64, 128), (4, 8), (2, 3, 4)):
                config = triton_attention.AttentionConfig(block_n, warps, stages, mult)
                run(f"x{mult} n{block_n} w{warps} s{stages}", config)
            timed = {k: v for k, v in cells.items() if "us" in v}
            best = sorted(timed, key=lambda k: timed[k]["us"])[:5]
            out[f"rows={rows} len={length}"] = {"cells": cells, "best": best}
            print(
                f"attention rows={rows} len={length}: default {timed['default']['us']:.1f} us "
                f"({timed['default']['gb_per_s']:.0f} GB/s, err {timed['default']['max_abs_err']:.3f}); best "
                + "; ".join(f"{k} {timed[k]['us']:.1f} us ({timed[k]['gb_per_s']:.0f} GB/s)" for k in best[:3]),
                flush=True,
            )
        caches.clear()  # free this batch size's caches before the next one
        torch.cuda.empty_cache()
    return out


def sweep_gemm(device: torch.device) -> dict:
    from inferlab.engine.kernels.triton_norm import silu_mul

    shapes = {"qkv": (QKV, HIDDEN), "o": (HIDDEN, HIDDEN), "gate_up": (2 * INTER, HIDDEN), "down": (HIDDEN, INTER)}
    out: dict = {}
    for name, (n, k) in shapes.items():
        weights = [(torch.randn(n, k, device=device) * 0.02).to(torch.bfloat16) for _ in range(LAYERS)]
        transposed = [w.t().contiguous() for w in weights]  # [K, N]
        for rows in (16, 64, 256):
            x = torch.randn(rows, 2 * k if name == "down" else k, device=device).to(torch.bfloat16)

            def a_operand():
                return silu_mul(x) if name == "down" else x

            cells = {}
            for lib in ("default", "cublaslt"):
                torch.backends.cuda.preferred_blas_library(lib if lib == "cublaslt" else "cublas")
                cells[f"linear [N,K] {lib}"] = graph_us([lambda w=w: F.linear(a_operand(), w) for w in weights])
                cells[f"matmul [K,N] {lib}"] = graph_us([lambda t=t: a_operand() @ t for t in transposed])
            torch.backends.cuda.preferred_blas_library("cublas")
            ideal = n * k * 2 / 4.15e6  # us at 4.15 TB/s
            out[f"{name}@{rows}"] = {"us": cells, "ideal_us": ideal}
            print(
                f"gemm {name}@{rows} (ideal {ideal:.1f} us): " + "; ".join(f"{k} {v:.1f}" for k, v in cells.items()),
                flush=True,
            )
    return out


def sweep_skinny(device: torch.device) -> dict:
    """The skinny Triton GEMM (engine/kernels/triton_gemm.py) over a grid of tiles at rows 16 and 64."""
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig, skinny_linear, tile_counters
    from inferlab.engine.kernels.triton_norm import silu_mul

    shapes = {"qkv": (QKV, HIDDEN), "o": (HIDDEN, HIDDEN), "gate_up": (2 * INTER, HIDDEN), "down": (HIDDEN, INTER)}
    out: dict = {}
    for name, (n, k) in shapes.items():
        weights = [(torch.randn(n, k, device=device) * 0.02).to(torch.bfloat16) for _ in range(LAYERS)]
        for rows in (16, 64):
            x = torch.randn(rows, 2 * k if name == "down" else k, device=device).to(torch.bfloat16)
            swiglu = name == "down"
            cells = {}
            grid = itertools.product((16, 32, 64, 128), (64, 128, 256), (1, 2, 4, 8), (4, 8), (3, 4))
            for block_n, block_k, split, warps, stages in grid:
                if k // split < block_k or (block_n == 128 and block_k == 256):
                    continue
                config = SkinnyConfig(block_n, block_k, split, warps, stages)
                counters = tile_counters(n, block_n, device)
                try:
                    cells[f"n{block_n} k{block_k} split{split} w{warps} s{stages}"] = graph_us(
                        [lambda w=w, c=config: skinny_linear(x, w, c, swiglu, counters) for w in weights]
                    )
                except Exception as e:  # a tile that does not compile must not hide the others
                    cells[f"n{block_n} k{block_k} split{split} w{warps} s{stages}"] = repr(e)[:200]
            timed = {c: v for c, v in cells.items() if isinstance(v, float)}
            best = sorted(timed, key=timed.get)[:5]
            out[f"{name}@{rows}"] = {"us": cells, "best": best}
            print(f"skinny {name}@{rows}: " + "; ".join(f"{c} {timed[c]:.1f}" for c in best), flush=True)
            with torch.no_grad():
                ref = F.linear(silu_mul(x) if swiglu else x, weights[0]).float()
                got = skinny_linear(x, weights[0], SkinnyConfig(32, 128, 4), swiglu).float()
                out[f"{name}@{rows}"]["max_rel_err"] = ((got - ref).abs().max() / ref.abs().max()).item()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--parts", default="attention,gemm")
    parser.add_argument("--shape", default="llama-380m", choices=list(ATTENTION_SHAPES), help="attention only")
    args = parser.parse_args()
    device = torch.device("cuda")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    result = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__}
    parts = {"attention": sweep_attention, "gemm": sweep_gemm, "skinny": sweep_skinny}
    for name in args.parts.split(","):
        t0 = time.perf_counter()
        result[name] = parts[name](device, args.shape) if name == "attention" else parts[name](device)
        print(f"== {name}: {time.perf_counter() - t0:.0f} s", flush=True)
        Path(args.out, "sweep.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
