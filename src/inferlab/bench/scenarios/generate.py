"""Scenario `generate`: batched text generation through a backend (backends.BACKENDS), measured the same
way for every backend.

The scenario owns the protocol; backends only load and run batches:
1. prompts: `num_prompts` rows of exactly `prompt_tokens` random non-special token ids (seeded), so no
   padding is needed; every backend gets the same ids, `new_tokens` (min == max) and sampling settings;
2. load (timed), then the first call on one batch (timed: includes compile / graph capture), then the
   remaining warm-up calls; the first call never enters steady-state figures. Warm-up calls keep every
   shape of a real call (same max_new_tokens, so HF sizes a static cache the same) but stop after
   `warmup_steps` decode steps: they compile and capture the same graphs in a fraction of the time. The
   same short call is then timed once more warm, so `first_call_extra_s` (compile, capture, lazy init)
   compares like with like;
3. steady state: batches in order, repeated until `min_repeats` passes over all prompts AND
   `min_duration_s` are met, or ended early once `max_duration_s` of calls are timed (every batch has the
   same shape, so part of a pass measures the same thing); every call is timed (device-synchronised) and
   its tokens counted per row up to the first EOS, never padding; peak memory is read here; graphs
   compiled while the clock ran are counted (a warning if any);
4. last, so they cannot disturb the figures: one short profiled call (the same shapes, stopped after
   `profile_steps` decode steps) says which attention kernel ran, and the device's copy bandwidth is
   measured once per run. The figures are saved before the profile, so a profiler crash keeps them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import TOKENIZER_KNOB, Knob, common_knobs, dtype_knob, sampling_knobs
from inferlab.bench.scenarios.base import CellContext, Scenario, completed
from inferlab.errors import ConfigError

KNOBS = (
    Knob("batch_size", int, 16, "prompts per generate call", minimum=1),
    Knob("num_prompts", int, 64, "prompts per pass (a multiple of batch_size)", minimum=1),
    Knob("prompt_tokens", int, 48, "tokens per prompt (random ids, all rows equally long)", minimum=1),
    Knob("new_tokens", int, 128, "tokens generated per row (min_new_tokens == max_new_tokens)", minimum=1),
    dtype_knob(),
    *sampling_knobs(top_p=0.9, do_sample="sample (true) or greedy (false)", temperature_help="sampling temperature"),
    Knob("top_k", int, 0, "top-k filter (0 disables)", minimum=0),
    TOKENIZER_KNOB,
    Knob("profile_kernels", bool, True, "profile one short call to see which attention kernel ran"),
    Knob("profile_steps", int, 4, "decode steps of the profiled call", minimum=1),
    Knob("warmup_steps", int, 16, "decode steps of each warm-up call with a static KV cache (every shape kept, so "
         "the same graphs are compiled and captured); 0 = full-length warm-up calls. A dynamic cache always warms "
         "up over the full length: each KV length is a new shape (cuDNN SDPA builds one plan per shape)",
         minimum=0),
    Knob("max_duration_s", float, 0.0, "end the timed calls once this many seconds are timed, even mid-pass (at least "
         "one call; every batch has the same shape); 0 = off", minimum=0.0),
    *common_knobs(min_repeats=1, min_duration_s=0.0, warmup=1,
                  repeats_help="timed passes over all prompts (at least; more if min_duration_s needs them)"),
)


def validate(cell: Cell) -> None:
    c = cell.config
    if c["num_prompts"] % c["batch_size"]:
        raise ConfigError(
            f"num_prompts={c['num_prompts']} is not a multiple of batch_size={c['batch_size']}: a short last batch "
            "would change shapes (and recompile a static cache) inside the timed loop; set num_prompts to a multiple"
        )
    if c["warmup"] < 1:
        raise ConfigError("warmup=0: the first call carries compile and lazy initialisation; use warmup >= 1")
    if c["do_sample"] and c["temperature"] <= 0:
        raise ConfigError("temperature must be > 0 when do_sample=true; use do_sample=false for greedy")
    if not 0.0 < c["top_p"] <= 1.0:
        raise ConfigError(f"top_p={c['top_p']} must be in (0, 1]; use 1.0 to disable it")
    if c["max_duration_s"] and c["max_duration_s"] < c["min_duration_s"]:
        raise ConfigError(f"max_duration_s={c['max_duration_s']:g} is below min_duration_s={c['min_duration_s']:g}; "
                          "raise it, or set max_duration_s=0 (no cap)")
    assert cell.model is not None
    model_refs.check_text_model(cell.model, c["tokenizer"], "generate")
    config = model_refs.model_config(cell.model)
    config = config.get("text_config", config)
    limit = config.get("max_position_embeddings")
    if limit and c["prompt_tokens"] + c["new_tokens"] > limit:
        raise ConfigError(
            f"prompt_tokens + new_tokens = {c['prompt_tokens'] + c['new_tokens']} exceeds the model's "
            f"max_position_embeddings={limit}; lower new_tokens or prompt_tokens"
        )


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Rough seconds: process start + load (~8 s on a GPU host) + the kernel profile (~2 s), compilation
    (~25 s), warm-up calls of `warmup_steps` steps (and the warm repeat of one), then the timed calls: passes
    over all prompts, cut at `max_duration_s`. The GPU step of the Llama-380M shape: dynamic cache ~9 ms,
    static ~3 ms, +0.055 ms per row, the Python processor +0.04 ms per row; other models and devices differ."""
    from inferlab.bench.backends import backend_estimate_s

    own = backend_estimate_s(cell, accelerator)
    if own is not None:
        return own
    c = cell.config
    rows = c["batch_size"]
    if accelerator:
        step_ms = (3.0 if c.get("kv_cache") == "static" else 9.0) + 0.055 * rows
        fixed = 8.0 + (2.0 if c["profile_kernels"] else 0.0) + (25.0 if c.get("compile") else 0.0)
    else:
        step_ms = 4.0 + 0.02 * rows
        fixed = 6.0
    if c.get("processor") == "python":
        step_ms += 0.04 * rows
    return planned_seconds(c, step_ms, fixed)


def planned_seconds(c: dict, step_ms: float, fixed_s: float) -> float:
    """A cell's seconds from its decode step time and its fixed costs (start, load, compile): warm-up calls,
    the warm repeat of a short one, then the timed calls (passes, cut at max_duration_s, at least one)."""
    call_s = c["new_tokens"] * step_ms / 1000
    short = _short_warmup_steps(c)
    warm_steps = short or c["new_tokens"]
    warm_calls = c["warmup"] + (1 if short else 0)
    timed_calls = c["min_repeats"] * c["num_prompts"] // c["batch_size"]
    timed_s = max(timed_calls * call_s, c["min_duration_s"])
    if c["max_duration_s"]:
        timed_s = min(timed_s, max(call_s, math.ceil(c["max_duration_s"] / call_s) * call_s))
    return fixed_s + warm_calls * warm_steps * step_ms / 1000 + timed_s


def _short_warmup_steps(c: dict) -> int | None:
    """Decode steps of a warm-up call, or None for full-length warm-ups. A dynamic cache meets a new KV
    length at every step, and some kernels build per-shape state on first sight (cuDNN SDPA plans one per
    shape), so only a full-length warm-up reaches the steady state there."""
    if c.get("kv_cache") == "dynamic" or not 0 < c["warmup_steps"] < c["new_tokens"]:
        return None
    return c["warmup_steps"]


def make_prompts(model_dir: Any, num_prompts: int, prompt_tokens: int, seed: int) -> Any:
    """[num_prompts, prompt_tokens] int64 of ids drawn from the tokenizer's non-special vocabulary
    (the model's vocabulary when the checkpoint has no tokenizer)."""
    import json

    import torch

    vocab = json.loads((model_dir / "config.json").read_text()).get("vocab_size")
    special: set[int] = set()
    try:
        from inferlab.models.tokenizer_loading import load_hf_tokenizer

        tok = load_hf_tokenizer(model_dir)
        vocab = min(vocab or len(tok), len(tok))
        special = set(tok.all_special_ids)
    except (OSError, ValueError):
        pass
    allowed = torch.tensor([i for i in range(vocab) if i not in special], dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(allowed), (num_prompts, prompt_tokens), generator=gen)
    return allowed[picks]


class CallRequests:
    """Each call's requests, built as the call starts: ids `<call>-<row>` with `call` counting every generate call
    of the cell (warm-ups and the profile included), so an engine that seeds each request from its id draws
    fresh samples on every call."""

    def __init__(self, batches: list[list[tuple[int, ...]]], sampling: Any) -> None:
        self.batches = batches  # each: batch_size prompts of prompt_tokens ids
        self.sampling = sampling
        self.calls = 0

    def __call__(self, batch: int) -> list[Any]:
        from inferlab.types import Request

        self.calls += 1
        return [Request(id=f"{self.calls}-{i}", prompt_ids=ids, sampling=self.sampling)
                for i, ids in enumerate(self.batches[batch])]


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    import torch

    from inferlab.bench.backends import GenerateSpec, get_backend
    from inferlab.bench.compile_watch import compiled_graphs
    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device, torch_dtype
    from inferlab.bench.scenarios.decode_traffic import ModelTraffic, count_generated
    from inferlab.bench.timing import device_synchronizer, measure, timed, warm_up
    from inferlab.types import SamplingParams

    c = cell.config
    assert ctx.model_path is not None and cell.backend is not None
    device = resolve_device(c["device"])
    sync = device_synchronizer(device)
    backend = get_backend(cell.backend, "generate").create(dict(c), GenerateSpec(c["new_tokens"], c["seed"]))
    reset_peak_memory(device)
    with timed(sync) as load:
        backend.load(ctx.model_path, device, torch_dtype(c["dtype"]))
    prompts = make_prompts(ctx.model_path, c["num_prompts"], c["prompt_tokens"], c["seed"]).tolist()
    sampling = SamplingParams(temperature=c["temperature"] if c["do_sample"] else 0.0, top_p=c["top_p"],
                              top_k=c["top_k"], max_new_tokens=c["new_tokens"], min_new_tokens=c["new_tokens"])
    requests = CallRequests([[tuple(p) for p in prompts[i : i + c["batch_size"]]]
                             for i in range(0, len(prompts), c["batch_size"])], sampling)
    batches = len(requests.batches)
    traffic = ModelTraffic.from_checkpoint(ctx.model_path, c["dtype"])
    if hasattr(backend, "kv_bytes_per_position"):  # a cache stored otherwise than in the model dtype (fp8 KV)
        traffic = dataclasses.replace(traffic, kv_bytes_per_position=float(backend.kv_bytes_per_position()))
    warm_steps = _short_warmup_steps(c)  # None: full length

    def generate(batch: int, stop_after_steps: int | None = None) -> list[Any]:
        return completed(backend.generate(requests(batch), stop_after_steps))

    with torch.no_grad():
        warmups, warm_short_s = warm_up(lambda: generate(0, warm_steps), c["warmup"], warm_steps is not None, sync)
        order = iter(range(10**9))
        tokens_per_call: list[int] = []
        bytes_per_call: list[float] = []
        short_rows = 0

        def count(results: list[Any]) -> None:
            nonlocal short_rows
            rows = count_generated([r.token_ids for r in results], backend.eos_token_ids)
            short_rows += sum(1 for n in rows if n < c["new_tokens"])
            tokens_per_call.append(sum(rows))
            bytes_per_call.append(traffic.decode_bytes(c["prompt_tokens"], rows))

        graphs_before = compiled_graphs()
        m = measure(lambda: generate(next(order) % batches), warmup=0, min_repeats=c["min_repeats"] * batches,
                    min_duration_s=c["min_duration_s"], max_duration_s=c["max_duration_s"] or None, sync=sync,
                    on_result=count)
        compiled_while_timed = compiled_graphs() - graphs_before

    steady_s = m.total_s
    output_tokens = sum(tokens_per_call)
    call_stats = m.stats
    if short_rows:
        ctx.warn(f"{short_rows} rows of the timed calls ended before new_tokens (EOS)")
    if compiled_while_timed:
        ctx.warn(f"{compiled_while_timed} graph(s) were compiled during the timed calls: the figures include "
                 "compilation (a shape changed after the warm-up)")
    planned_calls = c["min_repeats"] * batches
    if call_stats.n < planned_calls:
        ctx.warn(f"timed {call_stats.n} of the {planned_calls} calls of min_repeats={c['min_repeats']} pass(es): "
                 f"max_duration_s={c['max_duration_s']:g} was reached (every batch has the same shape)")
    achieved = sum(bytes_per_call) / steady_s / 1e9
    steady_reference = warm_short_s if warm_short_s is not None else call_stats.median
    metrics: dict[str, Any] = {
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / steady_s,
        "requests_per_s": len(tokens_per_call) * c["batch_size"] / steady_s,
        "load_s": load.seconds,
        "first_call_s": warmups[0],
        "first_call_steps": warm_steps or c["new_tokens"],
        # compile / capture / lazy init: the first call minus the same call warm
        "first_call_extra_s": warmups[0] - steady_reference,
        "warmup_s": warmups,
        "warm_short_call_s": warm_short_s,
        "steady_s": steady_s,
        "steady_calls": call_stats.n,
        "prompts_timed": call_stats.n * c["batch_size"],
        "call_s_stats": call_stats.to_dict(),
        "latency_ms": call_stats.scaled(1000.0).latency_dict(),  # a request's latency = its batch call's
        "spread": call_stats.spread,
        "graphs_compiled_while_timed": compiled_while_timed,
        "tokens_per_row": c["new_tokens"],
        "achieved_gb_per_s": achieved,
        "weight_bytes": traffic.weight_bytes,
        "kv_bytes_per_position": traffic.kv_bytes_per_position,
        "device": str(device),
        **peak_memory(device),  # read before the profile and the bandwidth copy allocate anything
    }
    ctx.add_backend_metrics(metrics, backend)
    metrics.update(_after_measuring(cell, ctx, backend, lambda steps: generate(0, steps), device, metrics))
    backend.close()
    return metrics


def _after_measuring(cell: Cell, ctx: CellContext, backend: Any, short_call: Callable[[int], Any], device: Any,
                     metrics: dict[str, Any]) -> dict[str, Any]:
    """Steps that measure nothing the headline depends on, run last so they cannot disturb it: the
    profiled short call (which attention kernel ran) and the device's copy bandwidth."""
    import torch

    from inferlab.bench.bandwidth import device_bandwidth_gb_per_s
    from inferlab.bench.profiling import observe_attention

    extra: dict[str, Any] = {"attention_kernel_observed": None, "attention_kernels_profile": None}
    if cell.config["profile_kernels"] and getattr(backend, "kernels_visible", True):
        ctx.save_partial(metrics, "the kernel profile")
        try:
            with torch.no_grad():
                kernels = observe_attention(lambda: short_call(cell.config["profile_steps"]), device)
            extra.update(attention_kernel_observed=kernels.observed, attention_kernels_profile=kernels.to_json())
        except Exception as e:  # the profile is a diagnosis; the figures above stand without it
            ctx.warn(f"kernel profile failed: {type(e).__name__}: {e}")
    bandwidth = device_bandwidth_gb_per_s(device, ctx.cache_dir)
    extra["device_bandwidth_gb_per_s"] = bandwidth
    extra["bandwidth_fraction"] = (metrics["achieved_gb_per_s"] / bandwidth) if bandwidth else None
    return extra


SCENARIO = Scenario(
    "generate", "batched generation of equal-length outputs through a backend: tok/s, first call, memory, kernel",
    KNOBS, run, validate, estimate_s, uses_backends=True,
    workload_knobs=("batch_size", "num_prompts", "prompt_tokens", "new_tokens", "do_sample", "temperature", "top_p",
                    "top_k"),
)
