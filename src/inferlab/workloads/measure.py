"""Measured passes of the transformers-backed workloads over a sample, for the lab's `classify` and
`hidden-states` scenarios and `inferlab tune`.

Owns: synthetic texts of chosen token lengths, batches of a sample at one batch size (length-bucketed as
the real commands run, or consecutive in input order), and the timed loop: the first call timed apart,
warm-up (every batch once at least), then every batch timed between device synchronisations until a minimum count and a minimum
duration are both met (or a maximum duration runs out), with peak device memory; latency per request (a
batch's time, once for each of its rows) and per batch. Metrics use the lab's
field names. Does not own: processes, timeouts, environment, result files (the lab's launcher).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from inferlab.errors import ConfigError
from inferlab.workloads.batching import BatchLimits, plan_batches
from inferlab.workloads.stats import latency_summary_ms

# Plain English words; joined at random they tokenise like ordinary prose in any tokenizer.
_WORDS = (
    "the of and to in is was for on that with as by at from his an were are which this be or has had not "
    "but first one their its new after who they have her she two been other when there all during into "
    "school time may years more most only over city some world would where later up such used many can "
    "state about national out known university united then made well area being group family between "
    "model sample protein cell result method data value system study analysis energy structure reaction"
).split()


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high))))))


# How token counts spread over [min, max]: uniformly, or log-uniformly (as many texts between 100 and 200
# tokens as between 1000 and 2000: more short texts than long ones, as in most document collections).
LENGTH_DISTRIBUTIONS: dict[str, Callable[[random.Random, int, int], int]] = {
    "uniform": lambda rng, low, high: rng.randint(low, high),
    "log-uniform": _log_uniform,
}


def synthetic_texts(tokenizer, n: int, min_tokens: int, max_tokens: int, seed: int = 0,
                    distribution: str = "uniform") -> list[str]:
    """`n` texts whose token counts (with the tokenizer's special tokens) spread over [min_tokens,
    max_tokens] as `distribution` says: random prose cut at a drawn token count and decoded back to text."""
    if not 1 <= min_tokens <= max_tokens:
        raise ConfigError(f"token lengths [{min_tokens}, {max_tokens}] must satisfy 1 <= min <= max")
    if distribution not in LENGTH_DISTRIBUTIONS:
        raise ConfigError(f"length distribution {distribution!r} is unknown; use one of {', '.join(LENGTH_DISTRIBUTIONS)}")
    draw = LENGTH_DISTRIBUTIONS[distribution]
    rng = random.Random(seed)
    special = len(tokenizer("x")["input_ids"]) - len(tokenizer("x", add_special_tokens=False)["input_ids"])
    texts = []
    for _ in range(n):
        target = max(1, draw(rng, min_tokens, max_tokens) - special)
        words: list[str] = []
        ids: list[int] = []
        while len(ids) < target:  # tokens per word differ between tokenizers: grow until long enough
            words += [rng.choice(_WORDS) for _ in range(max(8, target // 2))]
            ids = tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]
        texts.append(tokenizer.decode(ids[:target]))
    return texts


@dataclass(frozen=True)
class MeasureSpec:
    batch_size: int
    bucket_by_length: bool = True  # as the commands run; False: consecutive rows in input order
    warmup_batches: int = 2  # at least: any warm-up covers every batch of the sample once (measure_batches)
    min_batches: int = 10
    min_seconds: float = 1.0
    max_seconds: float = 20.0
    seed: int = 0  # order of batches in the timed loop (shuffled so any prefix is a fair mix of lengths)

    def __post_init__(self) -> None:
        BatchLimits(self.batch_size)
        if self.min_batches < 1 or self.min_seconds < 0 or self.max_seconds <= 0:
            raise ConfigError("min_batches must be >= 1, min_seconds >= 0 and max_seconds > 0")


def sample_batches(token_ids: Sequence[list[int]], spec: MeasureSpec) -> list[list[list[int]]]:
    """The sample cut into batches of `spec.batch_size` rows, in a seeded shuffled order."""
    if spec.bucket_by_length:
        groups = plan_batches([len(t) for t in token_ids], BatchLimits(spec.batch_size))
    else:
        groups = [list(range(i, min(i + spec.batch_size, len(token_ids)))) for i in range(0, len(token_ids), spec.batch_size)]
    random.Random(spec.seed).shuffle(groups)
    return [[list(token_ids[i]) for i in g] for g in groups]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_batches(run: Callable[[list[list[int]]], Any], batches: list[list[list[int]]], spec: MeasureSpec,
                    device: torch.device, work: Callable[[list[list[int]]], float] | None = None,
                    pads: bool = True) -> dict[str, Any]:
    """Time `run` over `batches`: first call apart, warm-up, then whole passes (cut at max_seconds). The
    warm-up (when warmup_batches > 0) runs every batch once, more if warmup_batches asks (within
    max_seconds): a backend's first call of a shape (its kernels' selection, the allocator's new blocks)
    belongs to no steady figure, and a timed pass that met shapes for the first time would count it in
    whichever cell timed one pass only (a job of many batches runs in that steady state). Latency:
    per request (each row of a batch waits for the whole batch) and per batch. `work(batch)`: its FLOPs, summed
    over the timed batches into `flops_timed`. `pads`: whether `run` pads a batch to its longest row (packed
    batches do not: padding_fraction 0)."""
    if not batches:
        raise ConfigError("no batches to measure: the sample is empty")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    start = time.perf_counter()
    run(batches[0])
    _sync(device)
    first_call_s = time.perf_counter() - start
    warm_start = time.perf_counter()
    warmup = max(spec.warmup_batches, len(batches)) if spec.warmup_batches > 0 else 0
    warmed = 0
    while warmed < warmup and time.perf_counter() - warm_start < spec.max_seconds:
        run(batches[(warmed + 1) % len(batches)])
        warmed += 1
    _sync(device)
    seconds: list[float] = []
    request_seconds: list[float] = []
    rows = tokens = padded = 0
    flops = 0.0
    loop_start = time.perf_counter()
    while True:
        for batch in batches:
            t0 = time.perf_counter()
            run(batch)
            _sync(device)
            seconds.append(time.perf_counter() - t0)
            request_seconds += [seconds[-1]] * len(batch)
            flops += work(batch) if work is not None else 0.0
            rows += len(batch)
            tokens += sum(len(b) for b in batch)
            padded += len(batch) * max(len(b) for b in batch)
            if time.perf_counter() - loop_start >= spec.max_seconds:
                break
        elapsed = time.perf_counter() - loop_start
        if elapsed >= spec.max_seconds or (len(seconds) >= spec.min_batches and elapsed >= spec.min_seconds):
            break
    steady_s = sum(seconds)
    metrics: dict[str, Any] = {
        "first_call_s": round(first_call_s, 4),
        "warmup_batches": warmed,
        "steady_s": round(steady_s, 4),
        "batches_timed": len(seconds),
        "rows_timed": rows,
        "requests_per_s": rows / steady_s,
        "input_tokens_per_s": tokens / steady_s,
        "padding_fraction": 1.0 - tokens / padded if pads else 0.0,
        "latency_ms": latency_summary_ms(request_seconds),
        "batch_latency_ms": latency_summary_ms(seconds),
        "whole_passes": len(seconds) >= len(batches),
    }
    if work is not None:
        metrics["flops_timed"] = flops
    if device.type == "cuda":
        metrics["peak_memory_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
        metrics["peak_reserved_gb"] = torch.cuda.max_memory_reserved(device) / 1e9
    return metrics
