"""Shared pieces of scripts/gpu/workloads_check.py: the profiles (GPU and CPU-quick sizes), the run context
(environment, budget, checkpoints, lab-style result rows), cell status from an exception, the CPU stand-in
for a small device, and the Markdown summary."""

from __future__ import annotations

import gc
import json
import platform
import subprocess
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers

from inferlab.errors import UnsupportedError
from inferlab.models.checkpoint_init import init_checkpoint
from inferlab.workloads.oom import is_oom_error


@dataclass(frozen=True)
class Profile:
    name: str
    cls_preset: str
    cls_texts: int
    cls_tokens: tuple[int, int]
    cls_batches: tuple[int, ...]
    cls_dtypes: tuple[str, ...]
    cls_attns: tuple[str, ...]
    cls_quants: tuple[str, ...]
    min_seconds: float
    max_seconds: float
    hid_preset: str
    hid_texts: int
    hid_tokens: tuple[int, int]
    hid_layers: tuple[int, ...]
    hid_batches: tuple[int, ...]
    oom_preset: str
    oom_prompts: int
    oom_tokens: tuple[int, int]
    oom_max_length: int
    oom_batch: int
    oom_layers: tuple[int, ...]
    gen_prompts: int
    gen_new_tokens: int
    simulated_memory_tokens: int | None  # CPU only: a batch over this many padded tokens raises OOM


PROFILES = {
    "gpu": Profile(
        "gpu", "qwen2-cls", 256, (100, 2000), (1, 8, 16, 32, 64), ("float16", "bfloat16"), ("sdpa", "eager"),
        ("none", "int8", "fp8"), 1.0, 2.5,
        "llama-380m", 512, (100, 1000), (4, 8, 16), (8, 32, 64),
        "gemma-2b", 4096, (512, 1024), 1024, 4096, (6,), 2048, 8, None,
    ),
    "quick": Profile(
        "quick", "tiny-qwen2-cls", 24, (8, 120), (1, 8), ("float32", "bfloat16"), ("sdpa", "eager"),
        ("none", "int8", "fp8"), 0.05, 0.5,
        "tiny", 32, (8, 100), (1, 2), (4, 16),
        "tiny", 64, (16, 64), 128, 4096, (1,), 32, 4, 600,
    ),
}


def _environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": torch.__version__, "transformers": transformers.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "device": str(device),
    }
    try:
        import torchao

        env["torchao"] = torchao.__version__
    except Exception as e:  # noqa: BLE001
        env["torchao"] = f"unavailable ({type(e).__name__})"
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        env["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    env["commit"] = _run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"])
    return env


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        return None


@dataclass
class CheckContext:
    profile: Profile
    device: torch.device
    out: Path
    scratch: Path  # checkpoints (kept between runs) and work files; large, so never under `out`
    deadline: float  # perf_counter time after which no new cell starts
    rows: dict[str, list[dict]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S"))

    def __post_init__(self) -> None:
        self.env = _environment(self.device)

    def over_budget(self) -> bool:
        return time.perf_counter() > self.deadline

    def work_dir(self) -> Path:
        path = self.scratch / "work"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def checkpoint(self, preset: str) -> Path:
        path = self.scratch / "models" / preset
        if not (path / "config.json").exists():
            start = time.perf_counter()
            init_checkpoint(preset, path, seed=0, dtype="bfloat16")
            print(f"  made {preset} checkpoint in {time.perf_counter() - start:.1f} s", flush=True)
        return path

    def record(self, file: str, scenario: str, model: str, batch_size: int | None, status: str, message: str,
               config: dict, metrics: dict) -> dict:
        row = {"run_id": self.run_id, "scenario": scenario, "backend": "hf", "model": model, "batch_size": batch_size,
               "status": status, "message": message, "config": config, "env": self.env, "metrics": metrics}
        self.rows.setdefault(file, []).append(row)
        with (self.out / file).open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str) + "\n")
        return row


def status_of(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, UnsupportedError):
        return "unavailable", str(exc)
    if is_oom_error(exc):
        return "error", "out of memory: " + str(exc).splitlines()[0][:200]
    traceback.print_exception(type(exc), exc, exc.__traceback__)
    return "error", f"{type(exc).__name__}: {str(exc)[:300]}"


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class SimulatedMemory(torch.nn.Module):
    """CPU stand-in for a device with little memory: a batch of more than `tokens` padded tokens raises the
    same OutOfMemoryError CUDA would."""

    def __init__(self, inner, tokens: int) -> None:
        super().__init__()
        self.inner, self.tokens = inner, tokens
        self.config, self.generation_config = inner.config, getattr(inner, "generation_config", None)

    def _check(self, input_ids):
        if input_ids.numel() > self.tokens:
            raise getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)("CUDA out of memory (simulated)")

    def forward(self, input_ids=None, **kw):
        self._check(input_ids)
        return self.inner(input_ids=input_ids, **kw)

    def generate(self, input_ids=None, **kw):
        self._check(input_ids)
        return self.inner.generate(input_ids=input_ids, **kw)


def limit_memory_if_cpu(ctx: CheckContext, loaded) -> str:
    if ctx.device.type == "cuda":
        return "device"
    loaded.model = SimulatedMemory(loaded.model, ctx.profile.simulated_memory_tokens)
    return f"simulated ({ctx.profile.simulated_memory_tokens} padded tokens, cpu)"


def write_summary(ctx: CheckContext) -> str:
    lines = [f"# workloads check ({ctx.profile.name}, {ctx.env.get('gpu', ctx.device)})", "",
             f"env: `{json.dumps(ctx.env, default=str)}`", ""]
    cls = ctx.rows.get("classify.jsonl", [])
    if cls:
        batches = sorted({r["batch_size"] for r in cls})
        lines += ["## classify: samples/s, p95 batch latency (ms)", "",
                  "| dtype | attn | quantization | bucketed | " + " | ".join(f"bs {b}" for b in batches) + " |",
                  "|---" * (4 + len(batches)) + "|"]
        keys = []
        for r in cls:
            key = (r["config"]["dtype"], r["config"]["attn"], r["config"]["quantization"], r["config"]["bucket_by_length"])
            keys += [key] if key not in keys else []
        for key in keys:
            cells = {r["batch_size"]: r for r in cls if (r["config"]["dtype"], r["config"]["attn"],
                                                         r["config"]["quantization"], r["config"]["bucket_by_length"]) == key}
            lines.append("| " + " | ".join(map(str, key)) + " | " + " | ".join(_md_cell(cells.get(b)) for b in batches) + " |")
        lines.append("")
    for file, title in (("hidden_states.jsonl", "hidden states"), ("oom.jsonl", "OOM back-off")):
        rows = ctx.rows.get(file, [])
        if rows:
            lines += [f"## {title}", ""]
            for r in rows:
                m = {k: _round(r["metrics"][k]) for k in SUMMARY_KEYS if k in r["metrics"]}
                lines.append(f"- {r['scenario']} bs {r['batch_size']}: **{r['status']}** {r['message']} {m}")
            lines.append("")
    if ctx.failures:
        lines += [f"parts that raised: {', '.join(ctx.failures)} (tracebacks above)", ""]
    text = "\n".join(lines)
    (ctx.out / "summary.md").write_text(text, encoding="utf-8")
    return text


SUMMARY_KEYS = ("requests_per_s", "prompts_per_s", "input_tokens_per_s", "tokens_per_s", "output_tokens_per_s",
                "latency_ms", "peak_memory_gb", "rows_expected", "rows_written_once", "oom_events",
                "largest_ok_batch_rows", "oom_source", "wall_s")


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items() if k in ("p50", "p95", "p99")}
    return value


def _md_cell(row: dict | None) -> str:
    if row is None:
        return ""
    if row["status"] != "ok":
        return row["status"]
    m = row["metrics"]
    return f"{m['requests_per_s']:.1f}/s, {m['latency_ms']['p95']:.0f}"
