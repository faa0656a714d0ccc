"""Scenario `decode-profile`: where one decode step of the engine spends its time, kernel by kernel.

Two engines on the cell's model, both through the public API, one after the other:
1. CUDA graphs (the engine as users run it): a warm-up call, then one call of `batch_size` requests with
   exactly `new_tokens` tokens each; `graph_step_us` = the engine's device-clock decode time / decode steps
   of that call.
2. Eager steps (`cuda_graphs=False`, the same kernels launched one by one): a short call (one token per
   row: the prefill) and a long one (1 + `new_tokens`) under torch.profiler; their difference per kernel,
   divided by the long call's extra decode steps, is each kernel's device time and launches per decode
   step (`kernels`: the `top` largest; the prefill cancels out). `kernel_us_per_step` sums every kernel,
   `eager_step_us` is the eager engine's own decode step time.
`graph_step_us` - `kernel_us_per_step` is what a step costs beyond its kernels' own time (gaps between
kernels inside the graph). On CPU the table lists aten ops by their CPU time instead of kernels.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.errors import ConfigError

KNOBS = (
    Knob("batch_size", int, 16, "rows decoding together (the engine's slots)", minimum=1),
    Knob("prompt_tokens", int, 48, "prompt length (random token ids)", minimum=1),
    Knob("new_tokens", int, 64, "decode steps timed and profiled per row", minimum=2),
    Knob("temperature", float, 1.0, "sampling temperature (0 = greedy)", minimum=0.0),
    Knob("top_p", float, 0.9, "nucleus sampling threshold (1.0: no top-p filter in the step)", minimum=0.0),
    Knob("kv_dtype", str, "auto", "KV cache: auto (the model dtype) or fp8", choices=("auto", "fp8")),
    Knob("dtype", str, "bfloat16", "weights and activations", choices=("bfloat16", "float16", "float32")),
    Knob("top", int, 15, "kernels listed, largest device time first", minimum=1),
    Knob("tokenizer", str, "", "tokenizer folder for building a preset model ('' = the preset's own)"),
    Knob("device", str, "auto", "where to run: auto picks cuda when available", choices=("auto", "cuda", "cpu")),
    Knob("seed", int, 0, "seed for the prompts and sampling", minimum=0),
    Knob("cpu_threads", int, 0, "torch intra-op threads (0 = torch's default)", minimum=0),
)


def validate(cell: Cell) -> None:
    if not 0.0 < cell.config["top_p"] <= 1.0:
        raise ConfigError(f"top_p={cell.config['top_p']} must be in (0, 1]; use 1.0 to disable it")
    assert cell.model is not None
    if model_refs.model_task(cell.model) != "causal-lm":
        raise ConfigError(f"model {cell.model} is not a causal LM; decode-profile needs one")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Two engine start-ups (~20 s each on a GPU) and three calls of new_tokens steps (eager ~5 ms a step)."""
    steps = cell.config["new_tokens"]
    return (45.0 + steps * 0.02) if accelerator else (10.0 + steps * 0.05 * cell.config["batch_size"])


def kernel_times(prof, on_cuda: bool) -> tuple[Counter[str], Counter[str]]:
    """Microseconds and launches per kernel (on CPU: per aten op) of one profiled call."""
    from torch.autograd import DeviceType

    us, calls = Counter(), Counter()
    for event in prof.key_averages():
        if on_cuda and getattr(event, "device_type", None) != DeviceType.CUDA:
            continue
        time = (getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0)
                if on_cuda else event.self_cpu_time_total)
        if time > 0:
            us[event.key[:120]] += time
            calls[event.key[:120]] += event.count
    return us, calls


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from inferlab.bench.devices import resolve_device
    from inferlab.bench.scenarios.generate import make_prompts
    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams

    c = cell.config
    assert ctx.model_path is not None
    device = resolve_device(c["device"])
    on_cuda = device.type == "cuda"
    prompts = make_prompts(ctx.model_path, c["batch_size"], c["prompt_tokens"], c["seed"]).tolist()

    def requests(tag: str, new: int) -> list[Request]:
        sampling = SamplingParams(temperature=c["temperature"], top_p=c["top_p"], max_new_tokens=new,
                                  min_new_tokens=new, ignore_eos=True)
        return [Request(id=f"{tag}-{i}", prompt_ids=tuple(p), sampling=sampling) for i, p in enumerate(prompts)]

    def engine(graphs: bool) -> Engine:
        return Engine(EngineConfig(model=str(ctx.model_path), device=str(device), dtype=c["dtype"],
                                   max_slots=c["batch_size"], max_seq_len=c["prompt_tokens"] + c["new_tokens"] + 8,
                                   cuda_graphs=graphs and on_cuda, kv_dtype=c["kv_dtype"], seed=c["seed"],
                                   decode_text=False))  # fmt: skip

    def step_us(e: Engine, call: list[Request]) -> tuple[float, int]:
        before = e.stats.as_dict()
        e.generate(call)
        after = e.stats.as_dict()
        steps = after["decode_steps"] - before["decode_steps"]
        return 1e6 * (after["decode_s"] - before["decode_s"]) / max(steps, 1), steps

    with engine(graphs=True) as graphed, torch.no_grad():
        graphed.generate(requests("warm", 4))
        graph_step_us, _ = step_us(graphed, requests("graph", c["new_tokens"]))
    activities = [ProfilerActivity.CUDA if on_cuda else ProfilerActivity.CPU]  # kernels only: fewer events to parse
    with engine(graphs=False) as eager, torch.no_grad():
        eager.generate(requests("warm", 4))
        profiled = []
        for tag, new in (("short", 1), ("long", 1 + c["new_tokens"])):
            with profile(activities=activities) as prof:
                us, steps = step_us(eager, requests(tag, new))
                if on_cuda:
                    torch.cuda.synchronize(device)
            profiled.append((kernel_times(prof, on_cuda), steps, us))
    ((short_us, short_calls), short_steps, _), ((long_us, long_calls), long_steps, eager_step_us) = profiled
    steps = max(long_steps - short_steps, 1)
    table = [{"kernel": name, "us_per_step": (us - short_us[name]) / steps,
              "calls_per_step": (long_calls[name] - short_calls[name]) / steps}
             for name, us in long_us.items() if us > short_us[name]]  # fmt: skip
    table.sort(key=lambda row: -row["us_per_step"])
    kernel_us = sum(row["us_per_step"] for row in table)
    return {
        "graph_step_us": graph_step_us,
        "eager_step_us": eager_step_us,
        "kernel_us_per_step": kernel_us,
        "launches_per_step": sum(row["calls_per_step"] for row in table),
        "beyond_kernels_us": graph_step_us - kernel_us,
        "profiled_steps": steps,
        "kernels": table[: c["top"]],
        "profiled": "cuda kernels" if on_cuda else "cpu aten ops",
        "device": str(device),
    }


SCENARIO = Scenario(
    name="decode-profile",
    description="the engine's decode step kernel by kernel (torch.profiler over eager steps) beside its graph step time",
    knobs=KNOBS,
    run=run,
    validate=validate,
    estimate_s=estimate_s,
    headline_metric="graph_step_us",
    higher_is_better=False,
    workload_knobs=("batch_size", "prompt_tokens", "new_tokens", "temperature", "top_p"),
    default_timeout_s=300.0,
)
