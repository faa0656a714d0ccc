"""Device check of the decode step against its bound (issue 19, build point 2), in one call of < 7 minutes:

  sampling   the sampling kernels at 256 and 16 rows over qwen3-0.6b's and llama-380m's vocabularies: first
             correct (the race and top-p by rejection against the torch reference on the same logits; the
             distribution of 200,000 draws from the kernels over the whole vocabulary against the softmax they must
             follow), then timed
             in CUDA graphs beside the kernels before the change (sampling_before.py), a few tiles of the race,
             the race with exact logarithms, and one read of the logits (torch amax; and the copy bandwidth)
  gemm       the decode step's projections at 256 rows (qwen3-0.6b and llama-380m shapes): cuBLAS against the
             skinny Triton GEMM's kernel with all 256 rows in one program (the engine's GEMM plan stops at 64),
             each over 8 copies of the weight (no L2 reuse), against max(bytes, FLOPs) at the device's copy
             bandwidth and matrix rate
  roofline   the decode-roofline lab preset (scenario decode-profile: the per-family table of one decode step
             for qwen3-0.6b and llama-380m at 256 and 16 rows, bf16 and fp8 KV; the engine's qwen3-0.6b run at
             256 rows, 600 new tokens) within what is left of --budget-s, and its report

    python scripts/gpu/roofline_check.py --out $OUT                       # sampling and roofline (~4 min, H200)
    python scripts/gpu/roofline_check.py --out $OUT --parts gemm          # the GEMM probe alone (~30 s)
    python scripts/gpu/roofline_check.py --out $OUT --parts roofline --only scenario=decode-profile
    python scripts/gpu/roofline_check.py --out /tmp/rc --cpu-smoke        # CPU: tiny shapes, the interpreter

Writes into --out (flat: what the device returns): sampling.json, gemm.json, results.jsonl, report.md,
decode-roofline.png, profiles.json (each case's kernels in order, with their families), summary.txt; prints the
short tables last.
"""

from __future__ import annotations

import os
import sys

if "--cpu-smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the kernels on CPU, through the interpreter

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from inferlab.cli import main as inferlab  # noqa: E402

VOCABS = {"qwen3-0.6b": 151936, "llama-380m": 128256}
DRAWS = 200_000  # draws of the distribution checks
GROUPS = 64  # logit levels of the distribution checks' row (token i has level i % GROUPS)


# ---- sampling -------------------------------------------------------------------------------------------------
def _inputs(rows: int, vocab: int, device: torch.device, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(seed)
    return {
        "logits": (torch.randn(rows, vocab, generator=g, device=device) * 2).bfloat16(),
        "temperature": torch.ones(rows, device=device),
        "seeds": torch.randint(0, 2**62, (rows,), generator=g, device=device),
        "index": torch.randint(0, 1000, (rows,), generator=g, device=device),
    }


def check_agreement(device: torch.device, rows: int, vocab: int) -> dict[str, Any]:
    """The kernels' tokens against the torch reference's on the same logits (the GPU's lg2.approx may differ
    from the exact logarithm where two race values lie within ~1e-5: a few draws per million)."""
    from inferlab.engine.kernels import triton_sampling, triton_top_p
    from inferlab.engine.sampler import float_key, race_argmax_torch, top_p_by_rejection

    x = _inputs(rows, vocab, device, 1)
    greedy = torch.arange(rows, device=device) % 8 == 3
    t = torch.where(greedy, 0.0, torch.rand(rows, device=device) + 0.5)
    tau = float_key(torch.where(torch.arange(rows, device=device) % 3 == 0, float("-inf"),
                                torch.randn(rows, device=device) + 2.0))  # fmt: skip
    out: dict[str, Any] = {}
    same, total = 0, 0
    for index_shift in range(4):
        index = x["index"] + index_shift
        for threshold in (None, tau):
            ours = triton_sampling.race_argmax(x["logits"], t, threshold, x["seeds"], index)
            ref = race_argmax_torch(x["logits"], t, threshold, x["seeds"], index)
            same += int((ours == ref).sum())
            total += rows
            assert torch.equal(ours[greedy], ref[greedy]), "greedy rows must take the reference's argmax"
    out["race_agreement"] = same / total
    top_p = torch.where(torch.arange(rows, device=device) % 4 == 0, 1.0, 0.9)
    min_p = torch.where(torch.arange(rows, device=device) % 5 == 0, 0.05, 0.0)
    ours = triton_top_p.top_p_by_rejection(x["logits"], t, top_p, min_p, x["seeds"], x["index"])
    ref = top_p_by_rejection(x["logits"], t, top_p, min_p, x["seeds"], x["index"])
    out["top_p_agreement"] = float((ours == ref).float().mean())
    return out


def check_distribution(device: torch.device, vocab: int, top_p: float, min_p: float, n: int) -> dict[str, Any]:
    """n draws from one row whose every token competes: token i has logit level[i % GROUPS] (GROUPS random levels),
    so a winner's noise comes from the far tail of 100k+ uniforms (where a coarse logarithm would bias it), and the
    draws are counted per group against the softmax the filters keep (the rows read the row through a stride-0
    view)."""
    from inferlab.engine.kernels import triton_sampling, triton_top_p
    from inferlab.engine.sampler import FILTER_TOP_P, filter_threshold, float_key

    g = torch.Generator(device=device).manual_seed(7)
    levels = torch.randn(GROUPS, generator=g, device=device) * 1.5
    group = torch.arange(vocab, device=device) % GROUPS
    row = levels[group].bfloat16()
    logits = row[None, :].expand(n, vocab)
    t = torch.ones(n, device=device)
    seeds = torch.arange(n, device=device) * 7919 + 11
    index = torch.zeros(n, dtype=torch.long, device=device)
    if top_p < 1.0 or min_p > 0:
        p, m = torch.full((n,), top_p, device=device), torch.full((n,), min_p, device=device)
        tokens = triton_top_p.top_p_by_rejection(logits, t, p, m, seeds, index)
        tau = filter_threshold(row.float()[None], t[:1], index[:1], p[:1], m[:1], FILTER_TOP_P)
        kept = float_key(row.float()) >= tau[0]
    else:
        tokens = triton_sampling.race_argmax(logits, t, None, seeds, index)
        kept = torch.ones(vocab, dtype=torch.bool, device=device)
    expected = torch.zeros(GROUPS, dtype=torch.float64, device=device).index_add_(
        0, group, torch.where(kept, row.float(), float("-inf")).softmax(-1).double())
    freq = torch.bincount(group[tokens], minlength=GROUPS).double() / n
    sigma = (expected * (1 - expected) / n).sqrt().clamp_min(1e-12)
    z = ((freq - expected).abs() / sigma)[expected > 0]
    chi2 = float((((freq - expected) ** 2) / expected.clamp_min(1e-30))[expected > 0].sum() * n)
    dof = int((expected > 0).sum()) - 1
    outside = int((~kept[tokens]).sum())
    return {"top_p": top_p, "min_p": min_p, "draws": n, "vocab": vocab, "outside_kept": outside,
            "max_z": float(z.max()), "chi2_per_dof": chi2 / max(dof, 1), "dof": dof,
            "ok": bool(outside == 0 and float(z.max()) < 5.0)}  # fmt: skip


def graph_us(fn: Callable[[torch.Tensor], Any], inputs: list[torch.Tensor], replays: int = 20) -> float:
    """Device time per call of fn(logits) in a CUDA graph, rotating over several logits buffers (L2 misses)."""
    for x in inputs:
        fn(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for x in inputs:
            fn(x)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * len(inputs))


def _exact_log_race(logits, t, seeds, index) -> torch.Tensor:
    """The engine's race kernel with the exact logarithms (FAST_LOG off): what the hardware lg2 saves."""
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


def time_variants(device: torch.device, rows: int, vocab: int, copy_gbps: float) -> list[dict[str, Any]]:
    import sampling_before as before

    from inferlab.engine.kernels import triton_sampling, triton_top_p

    x = _inputs(rows, vocab, device, 3)
    buffers = [x["logits"]] + [_inputs(rows, vocab, device, 10 + i)["logits"] for i in range(2)]
    t, seeds, index = x["temperature"], x["seeds"], x["index"]
    p9, m0 = torch.full((rows,), 0.9, device=device), torch.zeros(rows, device=device)
    variants: dict[str, Callable[[torch.Tensor], Any]] = {
        "one read (torch amax)": lambda lg: lg.amax(dim=-1),
        "before: race": lambda lg: before.race_argmax(lg, t, None, seeds, index),
        "race (engine: 4096 x 4 warps)": lambda lg: triton_sampling.race_argmax(lg, t, None, seeds, index),
        "race, exact log2": lambda lg: _exact_log_race(lg, t, seeds, index),
        "race 4096 x 8 warps": lambda lg: triton_sampling.race_argmax(lg, t, None, seeds, index, num_warps=8),
        "race 2048 x 2 warps": lambda lg: triton_sampling.race_argmax(lg, t, None, seeds, index, block=2048,
                                                                      num_warps=2),
        "before: top-p 0.9": lambda lg: before.top_p_by_rejection(lg, t, p9, m0, seeds, index),
        "top-p 0.9 (engine)": lambda lg: triton_top_p.top_p_by_rejection(lg, t, p9, m0, seeds, index),
        "top-p 0.9, 8 warps": lambda lg: triton_top_p.top_p_by_rejection(lg, t, p9, m0, seeds, index, num_warps=8),
    }  # fmt: skip
    read_us = rows * vocab * 2 / (copy_gbps * 1e3)
    out = []
    for name, fn in variants.items():
        try:
            us = graph_us(fn, buffers)
            out.append({"rows": rows, "vocab": vocab, "variant": name, "us": us,
                        "gb_per_s": rows * vocab * 2 / (us * 1e3), "logit_reads": us / read_us})  # fmt: skip
        except Exception as e:  # a tile that does not compile here is a finding, not the end of the check
            out.append({"rows": rows, "vocab": vocab, "variant": name, "error": f"{type(e).__name__}: {e}"[:300]})
    return out


def part_sampling(out: Path, smoke: bool) -> list[str]:
    from inferlab.bench.bandwidth import measure_copy_gb_per_s

    device = torch.device("cpu" if smoke else "cuda")
    res: dict[str, Any] = {"device": torch.cuda.get_device_name() if not smoke else "cpu"}
    lines = []
    shapes = [(4, 3000)] if smoke else [(256, VOCABS["qwen3-0.6b"]), (16, VOCABS["qwen3-0.6b"]),
                                        (256, VOCABS["llama-380m"]), (16, VOCABS["llama-380m"])]  # fmt: skip
    res["agreement"] = {f"{r}x{v}": check_agreement(device, r, v) for r, v in shapes[:1]}
    for key, a in res["agreement"].items():
        lines.append(f"agreement with the torch reference at {key}: race {a['race_agreement']:.5f}, "
                     f"top-p {a['top_p_agreement']:.4f}")
    vocab, draws = shapes[0][1], 2000 if smoke else DRAWS
    res["distribution"] = [check_distribution(device, vocab, p, m, draws)
                           for p, m in ((1.0, 0.0), (0.9, 0.0), (0.8, 0.05))]
    for d in res["distribution"]:
        lines.append(f"distribution top_p={d['top_p']} min_p={d['min_p']}: {'ok' if d['ok'] else 'FAIL'} "
                     f"(max z {d['max_z']:.2f}, chi2/dof {d['chi2_per_dof']:.2f}, outside the kept set "
                     f"{d['outside_kept']})")
    if not smoke:
        copy = measure_copy_gb_per_s(device)
        res["copy_gb_per_s"] = copy
        res["timings"] = [v for r, vv in shapes for v in time_variants(device, r, vv, copy)]
        lines.append(f"copy bandwidth {copy:.0f} GB/s; us per call (logit reads at that bandwidth):")
        for v in res["timings"]:
            figure = f"{v['us']:8.1f} us ({v['logit_reads']:.2f} reads)" if "us" in v else v["error"][:80]
            lines.append(f"  {v['rows']:>3} x {v['vocab']:>6}  {v['variant']:<32} {figure}")
    (out / "sampling.json").write_text(json.dumps(res, indent=1))
    return lines


# ---- gemm -------------------------------------------------------------------------------------------------------
SHAPES = {  # projection -> (N, K) of the weight
    "qwen3-0.6b": {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072),
                   "lm_head": (151936, 1024)},
    "llama-380m": {"qkv": (2048, 1024), "o": (1024, 1024), "gate_up": (8192, 1024), "down": (1024, 4096),
                   "lm_head": (128256, 1024)},
}  # fmt: skip
TILES = ((256, 64, 64, 1, 8), (256, 128, 64, 1, 8), (256, 32, 64, 1, 4), (256, 64, 64, 2, 8),
         (256, 64, 64, 4, 8))  # (BLOCK_M, BLOCK_N, BLOCK_K, split-K, warps): every row in one program


def _skinny(x: torch.Tensor, w: torch.Tensor, tile: tuple, counters: torch.Tensor) -> torch.Tensor:
    """The engine's skinny GEMM kernel launched with BLOCK_M rows per program (its wrapper stops at 64 rows)."""
    import triton

    from inferlab.engine.kernels.triton_gemm import _skinny_kernel

    block_m, block_n, block_k, split, warps = tile
    m, k = x.shape
    n = w.shape[0]
    out = torch.empty((m, n), dtype=w.dtype, device=w.device)
    part = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=w.device)
    k_blocks = triton.cdiv(triton.cdiv(k, split), block_k)
    grid = (triton.cdiv(n, block_n), split)
    assert m <= block_m
    _skinny_kernel[grid](
        x, w, out, part, counters, m, n, k, x.stride(0), w.stride(0), out.stride(0), k_blocks,
        PARTIALS=split > 1, SWIGLU=False, GATED=False, IEEE=False, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        GELU_TANH=False, num_warps=warps, num_stages=3,
    )  # fmt: skip
    return out


def part_gemm(out: Path, copy_gbps: float, tflops: float, rows: int = 256) -> list[str]:
    device = torch.device("cuda")
    counters = torch.zeros(4096, dtype=torch.int32, device=device)
    res, lines = [], [f"GEMMs at {rows} rows (us; % of max(bytes at {copy_gbps:.0f} GB/s, FLOPs at {tflops:.0f} "
                      "TFLOP/s)):"]  # fmt: skip
    for model, shapes in SHAPES.items():
        for name, (n, k) in shapes.items():
            copies = 1 if name == "lm_head" else 8  # the LM head alone is larger than the L2
            weights = [torch.randn(n, k, device=device).bfloat16() for _ in range(copies)]
            x = torch.randn(rows, k, device=device).bfloat16()
            bound_us = max((n * k + rows * k + rows * n) * 2 / (copy_gbps * 1e3), 2 * rows * n * k / (tflops * 1e6))
            entry = {"model": model, "projection": name, "rows": rows, "n": n, "k": k, "bound_us": bound_us,
                     "cublas_us": graph_us(lambda w: torch.nn.functional.linear(x, w), weights)}  # fmt: skip
            best = None
            for tile in TILES if name != "lm_head" else ():
                try:
                    us = graph_us(lambda w, tile=tile: _skinny(x, w, tile, counters), weights)
                    ref = torch.nn.functional.linear(x, weights[0])
                    err = float((_skinny(x, weights[0], tile, counters).float() - ref.float()).abs().max())
                    entry[f"triton {tile}"] = {"us": us, "max_abs_err": err}
                    if err < 0.5 and (best is None or us < best[1]):
                        best = (tile, us)
                except Exception as e:  # a tile that does not fit (registers, shared memory) is a finding
                    entry[f"triton {tile}"] = {"error": f"{type(e).__name__}: {e}"[:200]}
            res.append(entry)
            line = (f"  {model:<11} {name:<8} bound {bound_us:6.1f}  cuBLAS {entry['cublas_us']:6.1f} "
                    f"({100 * bound_us / entry['cublas_us']:3.0f}%)")
            if best is not None:
                line += f"  best Triton {best[1]:6.1f} ({100 * bound_us / best[1]:3.0f}%) {best[0]}"
            lines.append(line)
            del weights
    (out / "gemm.json").write_text(json.dumps(res, indent=1))
    return lines


# ---- roofline ---------------------------------------------------------------------------------------------------
SMOKE_ARGS = ["--model", "tiny", "--only", "scenario=decode-profile", "--only", "kv_dtype=auto",
              "--set", "batch_size=4", "--set", "context_tokens=24", "--set", "dtype=float32",
              "--set", "min_duration_s=0", "--set", "min_repeats=3", "--set", "warmup=1", "--set", "cpu_threads=1",
              "--set", "new_tokens=8"]  # the filtered-out generate sweep validates too: tiny has 512 positions


def part_roofline(out: Path, runs: Path, budget_s: float, only: list[str], smoke: bool) -> list[str]:
    from inferlab.bench.results import load_rows

    argv = ["bench", "--preset", "decode-roofline", "--run-dir", str(runs), "--limit-seconds", str(int(budget_s)),
            "--no-report", *(SMOKE_ARGS if smoke else []), *[a for o in only for a in ("--only", o)]]  # fmt: skip
    print(f"\n=== inferlab {' '.join(argv)}", flush=True)
    code = inferlab(argv)
    lines = [f"inferlab bench exited {code}"]
    if not (runs / "results.jsonl").is_file():
        return lines
    inferlab(["report", str(runs), "--out", str(runs / "report")])
    shutil.copyfile(runs / "results.jsonl", out / "results.jsonl")
    for name, source in (("report.md", runs / "report" / "report.md"),
                         ("decode-roofline.png", runs / "report" / "plots" / "decode-roofline.png")):
        if source.is_file():
            shutil.copyfile(source, out / name)
    profiles = {p.stem: json.loads(p.read_text()) for p in sorted((runs / "profiles").glob("*.json"))}
    (out / "profiles.json").write_text(json.dumps(profiles))
    return lines + summary_lines(load_rows([runs]))


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    from inferlab.bench.report_roofline import case_name

    lines = []
    for r in rows:
        m = r.get("metrics") or {}
        if r.get("scenario") == "generate":
            frac = (m.get("engine_decode_gb_per_s") or 0) / (m.get("device_bandwidth_gb_per_s") or math.inf)
            lines.append(f"generate {r.get('model')} {r['config'].get('batch_size')} rows kv={r['config'].get('kv_dtype')}"
                         f": {r['status']} {m.get('output_tokens_per_s', 0):,.0f} tok/s, engine decode "
                         f"{m.get('engine_decode_gb_per_s', 0):,.0f} GB/s = {100 * frac:.0f}% of copy")
            continue
        if r.get("status") != "ok" or not m.get("families"):
            lines.append(f"{r.get('model')} {r.get('config', {}).get('batch_size')}: {r.get('status')} "
                         f"{(r.get('message') or '')[:200]}")
            continue
        lines.append(f"{case_name(r)}: step {m['step_us']:,.0f} us, {m['step_gb_per_s']:,.0f} GB/s "
                     f"({100 * (m['step_bandwidth_fraction'] or 0):.0f}% of copy), {m['profile_source']}")
        for f in m["families"]:
            share = 100 * (f.get("share") or 0)
            pct = "-" if f.get("pct_of_bound") is None else f"{100 * f['pct_of_bound']:.0f}%"
            lines.append(f"   {f['family']:<13} {f['us']:8.1f} us {share:5.1f}%  {pct:>5} of {f.get('limit')}"
                         f"{'' if f.get('meets') else '  BELOW'}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="sampling,roofline", help="sampling, gemm, roofline (comma-separated)")
    ap.add_argument("--budget-s", type=float, default=400.0, help="the whole call; the lab gets what is left")
    ap.add_argument("--only", action="append", default=[], help="passed to inferlab bench --only")
    ap.add_argument("--runs", default="/tmp/roofline-runs", help="the lab's run directory (kept out of --out)")
    ap.add_argument("--cpu-smoke", action="store_true")
    args = ap.parse_args()
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    summary: list[str] = [f"torch {torch.__version__}, device "
                          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'}"]
    if "sampling" in parts:
        try:
            summary += part_sampling(out, args.cpu_smoke)
        except Exception:
            traceback.print_exc()
            summary.append("sampling: FAILED (traceback above)")
        summary.append(f"[sampling done at {time.monotonic() - started:.0f} s]")
    if "gemm" in parts and not args.cpu_smoke:
        try:
            from inferlab.bench.bandwidth import device_bandwidth_gb_per_s
            from inferlab.bench.device_limits import device_limits

            cache = Path(args.runs) / "cache"  # the lab's cells read these ceilings from there
            cache.mkdir(parents=True, exist_ok=True)
            limits = device_limits(torch.device("cuda"), torch.bfloat16, cache)
            copy = device_bandwidth_gb_per_s(torch.device("cuda"), cache)
            summary += part_gemm(out, copy, limits["matmul_tflops"])
        except Exception:
            traceback.print_exc()
            summary.append("gemm: FAILED (traceback above)")
        summary.append(f"[gemm done at {time.monotonic() - started:.0f} s]")
    if "roofline" in parts:
        try:
            left = args.budget_s - (time.monotonic() - started) - 25  # the report and the copies
            summary += part_roofline(out, Path(args.runs), left, args.only, args.cpu_smoke)
        except Exception:
            traceback.print_exc()
            summary.append("roofline: FAILED (traceback above)")
    summary.append(f"[done at {time.monotonic() - started:.0f} s]")
    text = "\n".join(summary)
    (out / "summary.txt").write_text(text + "\n")
    print("\n" + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
