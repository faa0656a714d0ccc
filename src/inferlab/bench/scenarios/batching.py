"""Scenario `batching`: continuous against static batching in our engine, on requests whose output
lengths differ (the workload where the two differ).

`num_requests` requests of random prompts (`prompt_tokens` long), each asked for exactly L new tokens
with L drawn uniformly from [min_new_tokens, max_new_tokens] (seeded: the same lengths for every cell),
served by one engine with `batch_size` rows (slots). `batching=static` admits a full batch of rows and waits for its
longest row before admitting the next; `continuous` refills a row as soon as its request finishes.
Protocol: the engine is built (timed as load_s), one warm-up call over `batch_size` requests of a few tokens
(the first call's lazy work), then the timed call over every request. Figures: output tok/s and
requests/s over the timed call, decode steps and how busy the rows were (the engine's own counters).
"""

from __future__ import annotations

import random
from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import TOKENIZER_KNOB, Knob, common_knobs, dtype_knob, sampling_knobs
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.errors import ConfigError

KNOBS = (
    Knob("batching", str, "continuous", "engine batching mode", choices=("continuous", "static")),
    Knob("batch_size", int, 128, "concurrent rows (slots) of the engine", minimum=1),
    Knob("num_requests", int, 512, "requests in the timed call", minimum=1),
    Knob("prompt_tokens", int, 48, "prompt length (random token ids)", minimum=1),
    Knob("min_new_tokens", int, 200, "shortest output length drawn", minimum=1),
    Knob("max_new_tokens", int, 1000, "longest output length drawn", minimum=1),
    *sampling_knobs(top_p=1.0),
    dtype_knob(),
    TOKENIZER_KNOB,
    *common_knobs(min_repeats=1, min_duration_s=0.0, warmup=1, repeats_help="timed calls over all requests"),
)


def validate(cell: Cell) -> None:
    c = cell.config
    if c["min_new_tokens"] > c["max_new_tokens"]:
        raise ConfigError(f"min_new_tokens={c['min_new_tokens']} > max_new_tokens={c['max_new_tokens']}; swap them")
    if not 0.0 < c["top_p"] <= 1.0:
        raise ConfigError(f"top_p={c['top_p']} must be in (0, 1]; use 1.0 to disable it")
    assert cell.model is not None
    if model_refs.model_task(cell.model) != "causal-lm":
        raise ConfigError(f"model {cell.model} is not a causal LM; the batching scenario needs one")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Start-up (~20 s on a GPU: load, Triton JIT, GEMM choice, capture) plus the decode steps of a static
    schedule at ~2.5 ms (GPU) or ~30 ms (CPU) each."""
    c = cell.config
    waves = -(-c["num_requests"] // c["batch_size"])
    steps = waves * c["max_new_tokens"]
    return (20.0 if accelerator else 8.0) + steps * (0.0025 if accelerator else 0.03)


def output_lengths(c: dict[str, Any]) -> list[int]:
    rng = random.Random(c["seed"])
    return [rng.randint(c["min_new_tokens"], c["max_new_tokens"]) for _ in range(c["num_requests"])]


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    import torch

    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device
    from inferlab.bench.scenarios.generate import make_prompts
    from inferlab.bench.timing import device_synchronizer, measure, timed
    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams

    c = cell.config
    assert ctx.model_path is not None
    device = resolve_device(c["device"])
    sync = device_synchronizer(device)
    lengths = output_lengths(c)
    prompts = make_prompts(ctx.model_path, c["num_requests"], c["prompt_tokens"], c["seed"]).tolist()
    reset_peak_memory(device)
    with timed(sync) as load:
        engine = Engine(EngineConfig(
            model=str(ctx.model_path), device=str(device), dtype=c["dtype"], max_slots=c["batch_size"],
            max_seq_len=c["prompt_tokens"] + c["max_new_tokens"], batching=c["batching"], seed=c["seed"],
            decode_text=False,
        ))

    def requests(tag: str, lengths_: list[int]) -> list[Request]:
        return [Request(id=f"{tag}-{i}", prompt_ids=tuple(prompts[i % len(prompts)]),
                        sampling=SamplingParams(temperature=c["temperature"], top_p=c["top_p"], max_new_tokens=n,
                                                min_new_tokens=n, ignore_eos=True))
                for i, n in enumerate(lengths_)]

    with engine, torch.no_grad():  # the engine's life ends with the measurement
        with timed(sync) as first:
            engine.generate(requests("warm", [8] * min(c["batch_size"], c["num_requests"])))
        calls = iter(range(10**9))
        before = engine.stats.as_dict()
        produced: list[int] = []
        m = measure(lambda: engine.generate(requests(f"t{next(calls)}", lengths)), warmup=0,
                    min_repeats=c["min_repeats"], min_duration_s=c["min_duration_s"], sync=sync,
                    on_result=lambda results: produced.append(sum(len(r.token_ids) for r in results)))
    after = engine.stats.as_dict()
    steps = after["decode_steps"] - before["decode_steps"]
    row_steps = after["row_steps"] - before["row_steps"]
    output_tokens = sum(produced)
    return {
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / m.total_s,
        "requests_per_s": m.stats.n * c["num_requests"] / m.total_s,
        "load_s": load.seconds,
        "first_call_s": first.seconds,
        "steady_s": m.total_s,
        "steady_calls": m.stats.n,
        "call_s_stats": m.stats.to_dict(),
        "spread": m.stats.spread,
        "decode_steps": steps,
        "prefill_s": after["prefill_s"] - before["prefill_s"],
        # of the rows the decode steps computed, the share that held a live request (each request's first
        # token comes from its prefill, not from a decode step)
        "rows_busy_fraction": (output_tokens - m.stats.n * c["num_requests"]) / row_steps if row_steps else None,
        "mean_new_tokens": sum(lengths) / len(lengths),
        "engine": after,
        "device": str(device),
        **peak_memory(device),
    }


SCENARIO = Scenario(
    "batching", "continuous vs static batching in the inferlab engine, output lengths drawn from a range",
    KNOBS, run, validate, estimate_s,
    workload_knobs=("batch_size", "num_requests", "min_new_tokens", "max_new_tokens", "prompt_tokens"),
)
