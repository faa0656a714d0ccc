"""GPU check of the inferlab engine, in one run: correctness, micro-benchmarks, speed (<= 8 min on an H200).

    python scripts/gpu/engine_check.py --out $OUT/engine               # CUDA, everything
    python scripts/gpu/engine_check.py --out $OUT/engine --parts speed,profile
    python scripts/gpu/engine_check.py --device cpu --quick --out /tmp/engine-check   # CPU smoke run

Parts, in order: the cheap and the micro-benchmarks first, so a late failure loses nothing (each part is
wrapped: a failure prints its traceback and the run goes on; results are written as each part ends;
startup, prefill, prefill_long and constraint_cost run only when named in --parts; hf_gemma comes last, so a full run
reaches it only with budget left):
  env                versions, GPU, measured device-to-device copy bandwidth
  kernels            every Triton kernel vs its torch reference (fp32 and bf16; on CPU through the
                     interpreter): norms, rope, attention, skinny GEMM (+ SwiGLU), race, thresholds, step
  sampling           (micro) top-p/top-k/min-p thresholds: torch sort vs the parallel radix chain (+ sweep);
                     the race on bf16 logits vs the old cast + fp32 race; rows 16 / 64 / 256, V = 128,256
  gemm               (micro) cuBLAS vs the skinny Triton GEMM per projection at llama-380m / qwen3-0.6b
                     shapes, 16 / 32 / 64 rows (the engine's own start-up timing)
  graphs             CUDA-graph replay vs eager steps: identical tokens (greedy and seeded sampling)
  constrained        constrained generation through the Engine on tiny checkpoints (both tokenizers):
                     valid outputs, unconstrained neighbours untouched, greedy graph == eager
  hf_logits          bf16 engine vs transformers: logits of prefill + 8 decode steps against an fp32
                     reference, and greedy token agreement, on tiny and llama-380m random checkpoints
  speed              llama-380m, 48-token prompts, exactly 1000 new tokens, batch 16/64/256, top-p 0.9 and
                     plain temperature 1; qwen3-0.6b at batch 256: tok/s, ms/step, GB/s, start-up, GEMM choices
  constrained_speed  qwen3-0.6b + qwen3-chem, NCI conformer templates at batch 256: constrained vs
                     unconstrained at equal output lengths (target >= 0.9x), all outputs valid
  batching           continuous vs static batching, output lengths drawn from 200-1000
  profile            per-kernel time of one decode step (torch.profiler, top 15) at batch 16 and 256
  fp8_kv             the FP8 KV cache vs the bf16 cache on qwen3-0.6b: logit error and top-1 agreement over
                     200 teacher-forced steps, the attention kernel per config, tok/s at batch 256 (600 new,
                     29-token prompts), constrained conformers' validity (engine_check_fp8.py; ~3 min)
  close              8 qwen3-0.6b engines made and closed in turn (and dropped with del, and with a stream
                     abandoned): each one's budget and memory_reserved before / with / after (~2 min)
  startup            engines in fresh processes: a fresh machine (empty start-up and Triton caches: Engine()
                     <= 8 s, the warm-up compiling nothing the precompile missed), the rerun with both caches
                     (<= 5 s, GEMM plan from the cache), a fresh machine with the precompile off; every
                     phase (engine_check_startup.py; ~1 min)
  prefill            (issue 11) the conformer job (400 NCI molecules of 20-50 atoms x 8, qwen3-0.6b, 256
                     rows), two calls: prefill share of the call's wall time (<= 3%), device vs host ms per
                     prefill batch, shared prompts, whether each prefill overlapped (engine_check_job.py);
                     then prefill_long
  prefill_long       gemma-2b, 512 prompts of 400-1,200 tokens, 256 slots: prefill batches in queue order vs
                     by prompt length: prefill_s and host ms per batch, padded tokens (by length ~1.03x of
                     the prompt tokens), overlap (engine_check_prefill_long.py; ~1.5 min)
  constraint_cost    (issue 11) 200 of those molecules x 8: constrained vs unconstrained at equal lengths,
                     both warm (>= 0.95x), every output valid (engine_check_job.py)
  hf_gemma           hf_logits for the Gemma family: gemma-2b, tiny-gemma2, tiny-gemma3 (windows shorter than
                     the prompts, soft-caps, q/k norms), then gemma-2b speed at batch 64, 150 new tokens
Writes <out>/<part>.json and <out>/summary.json, and prints a summary table at the end. Random checkpoints
(llama-380m, qwen3-0.6b, gemma-2b, the tiny presets) are built once into --cache (default
/tmp/inferlab-engine-check).
"""

from __future__ import annotations

import os
import sys

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1] == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels run on CPU through the interpreter

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_check_close as close  # noqa: E402
import engine_check_constrained as constrained  # noqa: E402
import engine_check_correctness as correctness  # noqa: E402
import engine_check_fp8 as fp8  # noqa: E402
import engine_check_hf as hf  # noqa: E402
import engine_check_job as job  # noqa: E402
import engine_check_micro as micro  # noqa: E402
import engine_check_prefill_long as prefill_long  # noqa: E402
import engine_check_profile as profile  # noqa: E402
import engine_check_speed as speed  # noqa: E402
import engine_check_startup as startup  # noqa: E402


@dataclass
class Ctx:
    device: torch.device
    quick: bool
    out: Path
    cache: Path  # random checkpoints (kept out of --out, which is copied back from the device)
    budget_s: float
    started: float = field(default_factory=time.perf_counter)
    checkpoints: dict[str, Path] = field(default_factory=dict)
    copy_gb_per_s: float | None = None
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def row(self, part: str, item: str, value: Any, verdict: str = "") -> None:
        text = f"{value:,.3f}" if isinstance(value, float) else str(value)
        self.rows.append((part, item, text, verdict))

    def checkpoint(self, preset: str, dtype: str = "bfloat16") -> Path:
        """A random-weight checkpoint of `preset`, built once per run."""
        key = f"{preset}-{dtype}"
        if key not in self.checkpoints:
            from inferlab.errors import InputError
            from inferlab.models.checkpoint_init import init_checkpoint
            from inferlab.models.presets import get_preset
            from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

            tokenizer = None
            if get_preset(preset).tokenizer == "qwen3-chem":
                try:
                    tokenizer = qwen3_chem_tokenizer_dir()
                except InputError:
                    tokenizer = None  # the built-in tokenizer fits any vocabulary: fine for random weights
            t0 = time.perf_counter()
            path = self.cache / key
            if not (path / "config.json").exists():
                init_checkpoint(preset, path, seed=0, dtype=dtype, tokenizer_dir=tokenizer)
            print(f"  checkpoint {key}: {time.perf_counter() - t0:.1f} s", flush=True)
            self.checkpoints[key] = path
        return self.checkpoints[key]

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def free(self) -> None:
        import gc

        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


def part_prefill(ctx: Ctx) -> dict[str, Any]:
    """The conformer job's prefill (engine_check_job.py), then long prompts by length vs in queue order
    (engine_check_prefill_long.py; also a part of its own), each failing alone."""
    res = job.part_prefill(ctx)
    try:
        res["long_prompts"] = prefill_long.part_prefill_long(ctx)
    except Exception:
        res["long_prompts"] = {"error": traceback.format_exc()}
        traceback.print_exc()
        ctx.row("prefill", "long prompts: ERROR", res["long_prompts"]["error"].strip().splitlines()[-1][:100], "FAIL")
    return res


def part_env(ctx: Ctx) -> dict[str, Any]:
    import transformers

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "device": str(ctx.device),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if ctx.cuda:
        props = torch.cuda.get_device_properties(ctx.device)
        info |= {
            "gpu": props.name,
            "sm_count": props.multi_processor_count,
            "memory_gb": round(props.total_memory / 1e9, 1),
            "cuda": torch.version.cuda,
        }
    nbytes = 2**30 if ctx.cuda else 2**26
    src = torch.ones(nbytes // 4, device=ctx.device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(10 if ctx.cuda else 3):
        ctx.sync()
        t0 = time.perf_counter()
        dst.copy_(src)
        ctx.sync()
        times.append(time.perf_counter() - t0)
    ctx.copy_gb_per_s = 2 * nbytes / sorted(times)[len(times) // 2] / 1e9  # read + write
    info["copy_gb_per_s"] = round(ctx.copy_gb_per_s, 1)
    del src, dst
    ctx.free()
    ctx.row("env", info.get("gpu", "cpu"), f"torch {info['torch']}, triton {info['triton']}")
    ctx.row("env", "measured copy bandwidth (GB/s)", info["copy_gb_per_s"])
    return info


PARTS: dict[str, Callable[[Ctx], dict[str, Any]]] = {
    "env": part_env,
    "kernels": correctness.part_kernels,
    "sampling": micro.part_sampling,
    "gemm": micro.part_gemm,
    "graphs": correctness.part_graphs,
    "constrained": constrained.part_constrained,
    "hf_logits": hf.part_hf_logits,
    "speed": speed.part_speed,
    "constrained_speed": constrained.part_constrained_speed,
    "batching": speed.part_batching,
    "profile": profile.part_profile,
    "fp8_kv": fp8.part_fp8_kv,
    "close": close.part_close,
    "startup": startup.part_startup,
    "prefill": lambda ctx: part_prefill(ctx),
    "prefill_long": prefill_long.part_prefill_long,
    "constraint_cost": job.part_constraint_cost,
    "hf_gemma": hf.part_hf_gemma,  # last: a full run reaches it only with budget left (it builds gemma-2b)
}
ISSUE_11_PARTS = ("startup", "prefill", "prefill_long", "constraint_cost")  # minutes each on an H100: asked for by name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the JSON results")
    parser.add_argument("--cache", default="/tmp/inferlab-engine-check", help="folder for the random checkpoints")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (for a CPU smoke run)")
    parser.add_argument("--parts", default=",".join(p for p in PARTS if p not in ISSUE_11_PARTS),
                        help="comma-separated subset of: " + ", ".join(PARTS) + " (default: all but "
                        + ", ".join(ISSUE_11_PARTS) + ")")
    parser.add_argument("--budget-s", type=float, default=450.0, help="parts that have not started by then are skipped")
    args = parser.parse_args()
    ctx = Ctx(
        device=torch.device(args.device),
        quick=args.quick,
        out=Path(args.out),
        cache=Path(args.cache),
        budget_s=args.budget_s,
    )
    ctx.out.mkdir(parents=True, exist_ok=True)
    unknown = [p for p in args.parts.split(",") if p not in PARTS]
    if unknown:
        parser.error(f"unknown parts {unknown}; choose from {', '.join(PARTS)}")
    status: dict[str, str] = {}
    for name in [p for p in PARTS if p in args.parts.split(",")]:
        if ctx.elapsed() > ctx.budget_s:
            status[name] = "skipped"
            ctx.row(name, "skipped", f"{ctx.elapsed():.0f} s used of the {ctx.budget_s:.0f} s budget")
            continue
        print(f"== {name} (t={ctx.elapsed():.0f} s)", flush=True)
        t0 = time.perf_counter()
        try:
            result = PARTS[name](ctx)
            status[name] = "ok"
        except Exception:
            result = {"error": traceback.format_exc()}
            status[name] = "error"
            traceback.print_exc()
            ctx.row(name, "ERROR", result["error"].strip().splitlines()[-1][:100], "FAIL")
        result["seconds"] = round(time.perf_counter() - t0, 2)
        (ctx.out / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
        (ctx.out / "summary.json").write_text(json.dumps({"status": status, "rows": ctx.rows}, indent=1))
        ctx.free()
    summary = {"status": status, "rows": ctx.rows, "total_s": round(ctx.elapsed(), 1)}
    (ctx.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print_summary(ctx, status)
    return 0 if all(s in ("ok", "skipped") for s in status.values()) else 1


def print_summary(ctx: Ctx, status: dict[str, str]) -> None:
    widths = [max(len(r[i]) for r in ctx.rows + [("part", "item", "value", "verdict")]) for i in range(4)]
    widths[1] = min(widths[1], 58)
    print("\n" + "=" * 100)
    print(
        f"engine_check summary ({ctx.elapsed():.0f} s, {ctx.device}, parts: "
        + ", ".join(f"{k}={v}" for k, v in status.items())
        + ")"
    )
    for part, item, value, verdict in [("part", "item", "value", "verdict")] + ctx.rows:
        print(f"{part:<{widths[0]}}  {item[:58]:<{widths[1]}}  {value:>{widths[2]}}  {verdict}")


if __name__ == "__main__":
    sys.exit(main())
