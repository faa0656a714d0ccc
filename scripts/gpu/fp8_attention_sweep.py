"""The fused decode attention with an FP8 KV cache against the bf16 cache, kernel alone, in one device call:

  qwen3   qwen3-0.6b's attention (16 query heads on 8 kv heads, head_dim 128, q/k norms), 256 rows at lengths
          330 and 629 (the middle and the end of the 29 + 600-token benchmark): the bf16 kernel at its default
          config and two others, the fp8 kernel over QWEN3_FP8_GRID (the default first) and its two best with
          two splits per row, plus any variant modules (--variants: EDITS names, the engine's file with text
          edits, or paths of other versions of triton_attention.py, timed at their defaults).
  gemma   head_dim 256: a Gemma 2 global layer (8 on 4 kv heads, soft-cap 50, 128 rows) and a Gemma 3 sliding
          layer (4 on 1, window 512, (1 + w) q/k norms, 256 rows), 1,000 positions: bf16 vs fp8 configs.
  ncu     Nsight Compute on the fastest fp8 config and the bf16 default at length 330 (if ncu is installed).

Every cell is first checked against the torch fp32 reference (attention.decode_rope_attention_torch, which
dequantizes an fp8 cache) on fresh random inputs, with the output's memory poisoned with NaN before the
launch: max |err| must stay under 2% of max |out| (the kernels round q and p for their dots) and the merge
counters must be back at zero. Timing, per layer over 8 layers' distinct caches: replays of a CUDA graph of
the launches (kernel_sweep.graph_us, as the engine runs them and engine_check times them) and, beside it,
triton.testing.do_bench's median of eager launches (L2 flushed; it includes whatever host launch time the
device does not hide). GB/s counts K, V and the fp8 scales of the positions read. Writes results.json,
table.txt (printed last) and ncu.txt under --out. On CPU (with TRITON_INTERPRET=1) tiny shapes in fp32, timed
by the wall clock: a plumbing check only.

    PYTHONPATH=src:scripts/gpu python scripts/gpu/fp8_attention_sweep.py --out $OUT [--parts qwen3,gemma,ncu]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from dataclasses import astuple
from types import ModuleType
from typing import Any, Callable

import torch

SRC = Path(__file__).resolve().parents[2] / "src" / "inferlab" / "engine" / "kernels" / "triton_attention.py"
LAYERS = 8


def load_module(name: str, source: str) -> ModuleType:
    """A copy of triton_attention.py as its own module (Triton reads kernel source from a real file)."""
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# Diagnostic text edits of triton_attention.py's fp8 tile (their outputs are wrong, so they are timed unchecked):
# "vt" reads each V tile as K's are read (the same contiguous BLOCK_N x head_dim bytes as a [head_dim, BLOCK_N]
# n-major matrix, unmasked: what a transposed V cache would cost); "loads" only loads the tiles and scales (its
# loads are not pipelined through shared memory as the dots' are: a different load path, not a floor).
V_LOAD = ("    v = tl.load(V + n[:, None] * stride_kn + dv[None, :], mask=nmask[:, None] & dvmask[None, :], "
          "other=0.0).to(DOT_TY)\n")
DIAG_VT = [(V_LOAD, "    v = tl.load(V + n0 * stride_kn + dv[None, :] * BLOCK_N + tl.arange(0, BLOCK_N)[:, None])"
                    ".to(DOT_TY)\n")]  # fmt: skip
K_POINTERS = "    k_ptr = K + n[:, None] * stride_kn + d[None, :]\n"
DIAG_LOADS = [(K_POINTERS, K_POINTERS + '''    u8 = tl.pointer_type(tl.uint8)
    kmask = nmask[:, None] & dmask[None, :]
    k1 = tl.load(k_ptr.to(u8), mask=kmask, other=0)
    k2 = tl.load(k_ptr.to(u8) + half, mask=kmask, other=0)
    v = tl.load((V + n[:, None] * stride_kn + dv[None, :]).to(u8), mask=nmask[:, None] & dvmask[None, :], other=0)
    scales = tl.load(K_SCALE + n, mask=nmask, other=0.0) + tl.load(V_SCALE + n, mask=nmask, other=0.0)
    x = (tl.max(k1, axis=0) ^ tl.max(k2, axis=0)).to(tl.float32)
    acc = acc + tl.max(v, axis=0).to(tl.float32)[None, :] + tl.sum(x) + tl.sum(scales)
    return m, denom, acc, v_unit
''')]
EDITS = {"diag_vt": DIAG_VT, "diag_loads": DIAG_LOADS}


def variant_modules(names: list[str]) -> dict[str, ModuleType]:
    """'engine' (the installed file) + each name: an EDITS key or a path to another triton_attention.py."""
    from inferlab.engine.kernels import triton_attention

    out = {"engine": triton_attention}
    source = SRC.read_text()
    for name in names:
        if name in EDITS:
            text = source
            for old, new in EDITS[name]:
                assert old in text, f"variant {name}: edit target not found: {old[:60]!r}"
                text = text.replace(old, new)
            out[name] = load_module(f"attention_{name}", text)
        else:
            out[Path(name).stem] = load_module(f"attention_{Path(name).stem}", Path(name).read_text())
    return out


class Shape:
    def __init__(self, name, rows, heads, kv_heads, head_dim, lengths, max_len, qk_norm=True, window=0, softcap=None,
                 offset=False):  # fmt: skip
        self.name, self.rows, self.heads, self.kv_heads, self.head_dim = name, rows, heads, kv_heads, head_dim
        self.lengths, self.max_len, self.qk_norm, self.offset = lengths, max_len, qk_norm, offset
        self.variant = dict(window=window, softcap=softcap, qk_norm_offset=offset)


def shapes(quick: bool) -> dict[str, list[Shape]]:
    if quick:
        return {"qwen3": [Shape("qwen3", 3, 4, 2, 32, (20, 37), 64)],
                "gemma": [Shape("gemma2", 2, 4, 2, 32, (40,), 48, qk_norm=False, softcap=50.0),
                          Shape("gemma3", 2, 4, 1, 32, (40,), 48, window=16, offset=True)]}  # fmt: skip
    return {"qwen3": [Shape("qwen3-0.6b", 256, 16, 8, 128, (330, 629), 640)],
            "gemma": [Shape("gemma2-global", 128, 8, 4, 256, (1000,), 1024, qk_norm=False, softcap=50.0),
                      Shape("gemma3-sliding", 256, 4, 1, 256, (1000,), 1024, window=512, offset=True)]}  # fmt: skip


class Bench:
    """One shape's inputs: LAYERS distinct bf16 caches and their fp8 quantization (K/V + scales)."""

    def __init__(self, shape: Shape, device: torch.device, dtype: torch.dtype, layers: int = LAYERS) -> None:
        from inferlab.engine.kv_quant import quantize
        from inferlab.models.config import RopeSpec
        from inferlab.models.rope import RotaryTables

        s = self.shape = shape
        self.device, self.dtype = device, dtype
        self.layers = 2 if device.type == "cpu" else layers
        self.tables = RotaryTables.build(RopeSpec(theta=1000000.0), s.head_dim, s.max_len, device)
        size = (s.rows, s.kv_heads, s.max_len, s.head_dim)
        self.bf16 = [(torch.randn(size, device=device, dtype=dtype), torch.randn(size, device=device, dtype=dtype))
                     for _ in range(self.layers)]  # fmt: skip
        self.fp8 = [tuple(t for x in layer for t in quantize(x)) for layer in self.bf16]  # (k8, k_scale, v8, v_scale)
        self.slots = torch.arange(s.rows, device=device)
        self.counters = torch.zeros(s.rows * s.kv_heads, dtype=torch.int32, device=device)
        self.scale = s.head_dim**-0.5

    def inputs(self, length: int, seed: int) -> tuple:
        s = self.shape
        g = torch.Generator(device=self.device).manual_seed(seed)
        width = (s.heads + 2 * s.kv_heads) * s.head_dim
        qkv = torch.randn(s.rows, width, generator=g, device=self.device).to(self.dtype)
        norms = [(torch.randn(s.head_dim, generator=g, device=self.device) * (0.3 if s.offset else 1.0)).to(self.dtype)
                 if s.qk_norm or s.offset else None for _ in range(2)]  # fmt: skip
        positions = torch.full((s.rows,), length - 1, device=self.device, dtype=torch.int64)
        return (qkv, positions, self.tables.cos, self.tables.sin, *norms, 1e-6)

    def call(self, module: ModuleType, args: tuple, cache: tuple, fp8: bool, config, splits) -> torch.Tensor:
        s = self.shape
        if fp8:
            k8, ks, v8, vs = cache
            return module.decode_rope_attention(*args, k8, v8, self.slots, s.heads, self.scale, self.counters,
                                                config=config, splits=splits, k_scale=ks, v_scale=vs, **s.variant)  # fmt: skip
        k, v = cache
        return module.decode_rope_attention(*args, k, v, self.slots, s.heads, self.scale, self.counters, config=config,
                                            splits=splits, **s.variant)  # fmt: skip

    def check(self, module: ModuleType, length: int, fp8: bool, config, splits) -> dict[str, Any]:
        """The kernel vs the torch fp32 reference on fresh inputs and a copy of layer 0, output memory poisoned."""
        from inferlab.engine.attention import decode_rope_attention_torch

        s = self.shape
        args = self.inputs(length, seed=1000 + length)
        layer = self.fp8[0] if fp8 else self.bf16[0]
        mine, ref = [t.clone() for t in layer], [t.clone() for t in layer]
        poison = torch.full((s.rows * s.heads * s.head_dim,), float("nan"), dtype=self.dtype, device=self.device)
        del poison  # the caching allocator hands this NaN block to the kernel's output next
        got = self.call(module, args, tuple(mine), fp8, config, splits).float()
        scales = dict(k_scale=ref[1], v_scale=ref[3]) if fp8 else {}
        cache = (ref[0], ref[2]) if fp8 else tuple(ref)
        want = decode_rope_attention_torch(*args, *cache, self.slots, s.heads, self.scale, **scales, **s.variant)
        want = want.float()
        err, top = (got - want).abs().max().item(), want.abs().max().item()
        ok = bool(err <= 0.02 * max(top, 1e-6) and torch.isfinite(got).all().item() and not self.counters.any().item())
        return {"max_abs_err": err, "max_abs": top, "ok": ok}

    def time_us(self, module: ModuleType, length: int, fp8: bool, config, splits) -> dict[str, float]:
        """us per layer: replays of a CUDA graph of the layers' launches (as the engine runs them, and as
        engine_check times them) and triton.testing.do_bench's median of eager launches (L2 flushed)."""
        args = self.inputs(length, seed=length)
        caches = self.fp8 if fp8 else self.bf16
        calls = [lambda c=c: self.call(module, args, c, fp8, config, splits) for c in caches]
        if self.device.type != "cuda":
            t0 = time.perf_counter()
            for call in calls:
                call()
            return {"us": 1e6 * (time.perf_counter() - t0) / len(calls)}
        import triton
        from kernel_sweep import graph_us  # beside this file

        def layers() -> None:
            for call in calls:
                call()

        eager = 1e3 * triton.testing.do_bench(layers, warmup=25, rep=100, return_mode="median") / len(calls)
        return {"us": graph_us(calls, replays=20), "us_do_bench": eager}

    def kv_bytes(self, length: int, fp8: bool) -> int:
        s = self.shape
        span = min(length, s.variant["window"]) if s.variant["window"] else length
        per_position = s.head_dim * (1 if fp8 else 2) + (4 if fp8 else 0)
        return s.rows * s.kv_heads * span * 2 * per_position


def run_cell(bench: Bench, module: ModuleType, label: str, fp8: bool, config, splits, cells: dict) -> None:
    """Check then time one (module, config, splits) at every length of the shape; errors recorded, not raised."""
    for length in bench.shape.lengths:
        key = f"{label} len={length}"
        try:
            diagnostic = label.startswith("fp8 diag")
            if diagnostic:
                cell = {"ok": True, "max_abs_err": float("nan")}
            else:
                cell = bench.check(module, length, fp8, config, splits)
            if cell["ok"]:
                cell |= bench.time_us(module, length, fp8, config, splits)
                cell["gb_per_s"] = bench.kv_bytes(length, fp8) / cell["us"] / 1e3
        except Exception as e:  # a variant that fails to compile or run must not hide the others
            cell = {"error": f"{type(e).__name__}: {str(e)[:400]}", "ok": False}
            traceback.print_exc()
        cells[key] = cell
        print(f"  {bench.shape.name} {key}: " + (f"{cell['us']:.1f} us (do_bench {cell.get('us_do_bench', 0):.1f}), "
              f"{cell['gb_per_s']:.0f} GB/s, err {cell['max_abs_err']:.4f}" if "us" in cell else json.dumps(cell)[:300]),
              flush=True)  # fmt: skip


def label_of(config) -> str:
    """'n32 w1 s3' (+ ' p4' programs per SM when not 1, ' r168' with a register cap)."""
    text = f"n{config.block_n} w{config.num_warps} s{config.num_stages}"
    return text + (f" p{config.programs_per_sm}" if config.programs_per_sm != 1 else "") + (
        f" r{config.maxnreg}" if config.maxnreg else "")


# AttentionConfig fields (block_n, warps, stages, programs_per_sm, maxnreg)
QWEN3_FP8_GRID = [(32, 1, 3, 4, None), (32, 1, 3, 4, 168), (16, 1, 4, 4, None), (16, 1, 4, 4, 168), (32, 1, 4, 4, None),
                  (64, 2, 3, 4, None), (32, 2, 3, 4, 168), (64, 1, 3, 4, None), (64, 4, 3, 1, None)]  # fmt: skip
QWEN3_BF16_GRID = [(64, 4, 3), (128, 4, 2), (32, 4, 3)]
WIDE_FP8_GRID = [(32, 4, 3), (32, 4, 2), (16, 4, 3), (64, 8, 2), (16, 2, 3, 1, None), (16, 2, 3, 1, 168)]
WIDE_BF16_GRID = [(32, 4, 3), (32, 8, 2), (64, 8, 2)]


def sweep_qwen3(modules: dict[str, ModuleType], device, dtype, quick: bool, deadline: float) -> dict[str, Any]:
    engine = modules["engine"]
    bench = Bench(shapes(quick)["qwen3"][0], device, dtype)
    cells: dict[str, Any] = {}
    configs: dict[str, Any] = {}
    for fields in QWEN3_BF16_GRID[: 1 if quick else None]:
        run_cell(bench, engine, f"bf16 engine {label_of(engine.AttentionConfig(*fields))}", False,
                 engine.AttentionConfig(*fields), None, cells)  # fmt: skip
    for name, module in modules.items():
        if name != "engine" and not hasattr(module, "_fp8_tile"):  # another version of the file: its defaults
            run_cell(bench, module, f"bf16 {name} default", False, None, None, cells)
            run_cell(bench, module, f"fp8 {name} default", True, None, None, cells)
    for fields in QWEN3_FP8_GRID[:2] if quick else QWEN3_FP8_GRID:
        config = engine.AttentionConfig(*fields)
        label = f"fp8 engine {label_of(config)}"
        configs[label] = config
        if time.time() < deadline:
            run_cell(bench, engine, label, True, config, None, cells)
    best = _best(cells, "fp8 engine ")
    for name, module in modules.items():  # edited variants at the two best configs (tiles of <= 128 positions)
        if name == "engine" or not hasattr(module, "_fp8_tile"):
            continue
        for label in [b for b in best if configs[b].block_n <= 128][:2]:
            if time.time() < deadline:
                run_cell(bench, module, label.replace("engine", name.replace("_", " ")), True, configs[label], None,
                         cells)  # fmt: skip
    for label in best[:2]:  # more programs per row at 256 rows
        if time.time() < deadline:
            run_cell(bench, engine, f"{label} splits=2", True, configs[label], 2, cells)
    return {"cells": cells, "best_fp8": best, "best_fp8_fields": [list(astuple(configs[b])) for b in best]}


def sweep_gemma(modules: dict[str, ModuleType], device, dtype, quick: bool, deadline: float) -> dict[str, Any]:
    engine = modules["engine"]
    out: dict[str, Any] = {}
    for shape in shapes(quick)["gemma"]:
        if time.time() > deadline:
            break
        bench = Bench(shape, device, dtype)
        cells: dict[str, Any] = {}
        for fields in WIDE_BF16_GRID[: 1 if quick else None]:
            config = engine.AttentionConfig(*fields)
            run_cell(bench, engine, f"bf16 engine {label_of(config)}", False, config, None, cells)
        for name, module in modules.items():
            if name != "engine" and not hasattr(module, "_fp8_tile"):
                run_cell(bench, module, f"fp8 {name} default", True, None, None, cells)
        for fields in WIDE_FP8_GRID[: 2 if quick else None]:
            config = engine.AttentionConfig(*fields)
            if time.time() < deadline:
                run_cell(bench, engine, f"fp8 engine {label_of(config)}", True, config, None, cells)
        out[shape.name] = {"cells": cells, "best_fp8": _best(cells, "fp8 engine ")}
        del bench
        torch.cuda.empty_cache() if device.type == "cuda" else None
    return out


def _best(cells: dict[str, Any], prefix: str) -> list[str]:
    """Labels (without the length) of cells starting with prefix, by their summed us over all lengths."""
    totals: dict[str, float] = {}
    for key, cell in cells.items():
        if key.startswith(prefix) and "splits" not in key:
            label = key.rsplit(" len=", 1)[0]
            totals[label] = totals.get(label, 0.0) + cell.get("us", float("inf"))
    return sorted((k for k in totals if totals[k] < float("inf")), key=totals.get)


def profile(out_dir: Path, best_fp8: list, timeout_s: float) -> dict[str, Any]:
    """Nsight Compute on the bf16 default and the best fp8 cell (length 330), in a child process."""
    ncu = shutil.which("ncu") or next((str(p) for p in Path("/usr/local/cuda/bin").glob("ncu")), None)
    if ncu is None:
        return {"skipped": "ncu not found"}
    sections = ["SpeedOfLight", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "Occupancy", "LaunchStats",
                "WarpStateStats", "SchedulerStats", "InstructionStats"]  # fmt: skip
    cmd = [ncu, "--clock-control", "none", "-k", "regex:_rope_attention", "--launch-skip", "2", "--launch-count", "2"]
    cmd += [a for s in sections for a in ("--section", s)]
    cmd += [sys.executable, __file__, "--ncu-target", ",".join(str(f) for f in best_fp8)]
    t0 = time.time()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        (out_dir / "ncu.txt").write_text(done.stdout[-2_000_000:] + "\n--- stderr ---\n" + done.stderr[-20_000:])
        return {"returncode": done.returncode, "seconds": round(time.time() - t0, 1)}
    except subprocess.TimeoutExpired:
        return {"error": f"ncu timed out after {timeout_s:.0f} s"}


def ncu_target(fields: str) -> None:
    """The child of profile(): warm up (compile) the two kernels, then launch each once more to be profiled."""
    device = torch.device("cuda")
    modules = variant_modules([])
    engine = modules["engine"]
    bench = Bench(shapes(False)["qwen3"][0], device, torch.bfloat16, layers=1)
    args = bench.inputs(330, seed=330)
    config = engine.AttentionConfig(*(None if f == "None" else int(f) for f in fields.split(",")))
    for _ in range(2):  # launches 1-2 compile and warm; 3-4 are profiled (--launch-skip 2)
        bench.call(engine, args, bench.bf16[0], False, engine.AttentionConfig(), None)
        bench.call(engine, args, bench.fp8[0], True, config, None)
        torch.cuda.synchronize()


def table(results: dict[str, Any]) -> str:
    lines = []
    for shape_cells in ({"qwen3-0.6b": results.get("qwen3", {})}, results.get("gemma", {})):
        for shape, res in shape_cells.items():
            cells = res.get("cells", {})
            if not cells:
                continue
            lines.append(f"== {shape}: us per layer in CUDA graphs (do_bench's eager median), GB/s of K/V + scales "
                         "read, max |err| vs the fp32 reference; x: over the first bf16 engine row (the default)")
            bf16: dict[str, float] = {}
            for key, cell in cells.items():  # the grids list the bf16 default first
                if key.startswith("bf16 engine") and "us" in cell:
                    bf16.setdefault(key.rsplit(" len=", 1)[1], cell["us"])
            for key, cell in cells.items():
                length = key.rsplit(" len=", 1)[1]
                if "us" in cell:
                    ratio = f" = {cell['us'] / bf16[length]:.2f}x" if bf16.get(length) else ""
                    lines.append(f"{key:44s} {cell['us']:7.1f} us ({cell.get('us_do_bench', float('nan')):6.1f}) "
                                 f"{cell['gb_per_s']:5.0f} GB/s err {cell['max_abs_err']:.4f}{ratio}")  # fmt: skip
                else:
                    lines.append(f"{key:48s} FAILED {cell.get('error') or cell}"[:200])
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=False)
    parser.add_argument("--parts", default="qwen3,gemma,ncu")
    parser.add_argument("--variants", default="", help="comma-separated: EDITS names or paths of other versions")
    parser.add_argument("--budget", type=float, default=400.0, help="seconds for the whole run (ncu gets the rest)")
    parser.add_argument("--ncu-target", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ncu_target:
        ncu_target(args.ncu_target)
        return 0
    start = time.time()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32  # the interpreter's bf16 tl.dot is broken
    quick = not cuda
    parts = args.parts.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    modules = variant_modules([v for v in args.variants.split(",") if v])
    results: dict[str, Any] = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__}
    try:
        import triton

        results["triton"] = triton.__version__
    except ImportError:
        pass

    def save() -> None:
        (args.out / "results.json").write_text(json.dumps(results, indent=1))

    ncu_s = 75.0 if "ncu" in parts and cuda else 0.0
    if "qwen3" in parts:
        share = 0.72 if "gemma" in parts else 1.0
        results["qwen3"] = sweep_qwen3(modules, device, dtype, quick, start + share * (args.budget - ncu_s))
        save()
    if "gemma" in parts:
        results["gemma"] = sweep_gemma(modules, device, dtype, quick, start + args.budget - ncu_s)
        save()
    if "ncu" in parts and cuda and results.get("qwen3", {}).get("best_fp8"):
        torch.cuda.empty_cache()
        results["ncu"] = profile(args.out, results["qwen3"]["best_fp8_fields"][0],
                                 max(30.0, start + args.budget - time.time()))
    results["seconds"] = round(time.time() - start, 1)
    save()
    text = table(results)
    (args.out / "table.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
