"""Host cost of one prefill batch, measured on CPU: where admission + prefill spend their time and ops.

    PYTHONPATH=$PWD/src python scripts/prefill_host_cpu.py --model /path/to/checkpoint [--prompts 256]

The steering job's shape of work (prompts of 400-1,200 random tokens, 256 slots, max_seq_len 1,350, a few
new tokens) through Engine.generate on CPU, then per prefill batch (runner.admit + runner.prefill, as
loop.py times them into stats.prefill_host_s):
- host ms per batch (stats.prefill_host_s / prefill_batches; on CPU this includes the forward's compute,
  so use a narrow model: a tiny Gemma of 18 layers has gemma-2b's op count and almost no arithmetic);
- the tokens the forward computed (prefill_padded_tokens) against the prompt tokens: padding is device
  work on a GPU;
- host ms per batch outside the model's forward (admit + prefill minus the forward: what stays on the
  host when the forward is one graph replay);
- ATen ops per batch, split into the model's forward (one CUDA-graph replay where a bucket serves it) and
  everything around it (admission, staging, K/V copies, sampling, row bookkeeping: eager on a GPU, each
  op one kernel launch or more), counted by a dispatch mode over one batch of the job's size;
- with --graphs, the runner's prefill-graph path (captures replaced by eager runs, as the unit tests do),
  so the bucket choice and its padding show as on CUDA;
- the top of a cProfile of those batches (--profile).
Not measured here: kernel time on a GPU (scripts/gpu/engine_check.py --parts prefill does that).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import time
from collections import Counter
from contextlib import nullcontext
from types import SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


class _EagerCapturer:
    """graphs.Capturer without CUDA (as tests/unit/engine/test_engine_prefill_graphs.py): a 'graph' replays
    the forward eagerly."""

    def capture(self, fn, around_warmup=None):
        with around_warmup() if around_warmup is not None else nullcontext():
            fn()
        return SimpleNamespace(replay=fn, reset=lambda: None)


def requests(n: int, vocab: int, lo: int, hi: int, new: int, seed: int = 0):
    from inferlab.types import Request, SamplingParams

    rng = random.Random(seed)
    return [Request(id=f"r{i}", prompt_ids=tuple(rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))),
                    sampling=SamplingParams(temperature=0.0, max_new_tokens=new)) for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--min-len", type=int, default=400)
    ap.add_argument("--max-len", type=int, default=1200)
    ap.add_argument("--new", type=int, default=4)
    ap.add_argument("--slots", type=int, default=256)
    ap.add_argument("--max-prefill-tokens", type=int, default=8192)
    ap.add_argument("--graphs", action="store_true", help="the prefill-graph path (eager 'replays')")
    ap.add_argument("--fifo", action="store_true", help="prefill batches in queue order (prefill_by_length off)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)

    from inferlab.engine import Engine, EngineConfig
    from inferlab.engine.prefill_graphs import PrefillGraphs

    order = {"prefill_by_length": not args.fifo} if args.fifo else {}  # (older engines lack the knob)
    engine = Engine(EngineConfig(model=args.model, device="cpu", max_slots=args.slots,
                                 max_seq_len=args.max_len + args.new + 2, max_prefill_tokens=args.max_prefill_tokens,
                                 **order))
    runner = engine.runner
    if args.graphs:
        runner.prefill_graphs = PrefillGraphs(runner.model, runner.cache, runner.rows.slots,
                                              min(runner.num_rows, engine.max_prefill_tokens), runner.cache.max_len,
                                              engine.max_prefill_tokens, _EagerCapturer(), runner.hook_tables)
    batch = requests(args.prompts, engine.spec.vocab_size, args.min_len, args.max_len, args.new)
    engine.generate(batch[:8])  # first-use costs out of the way
    before = engine.stats.as_dict()

    # ops of one batch: wrap model.prefill to split the forward from the rest
    real_prefill, real_runner_prefill = runner.model.prefill, runner.prefill
    counts: list[tuple[Counter, Counter]] = []

    def counted_forward(*a, **k):
        outer = counts[-1][1]
        with _OpCounter() as inner:
            out = real_prefill(*a, **k)
        counts[-1][0].update(inner.ops)
        outer.subtract(inner.ops)  # the outer mode saw them too
        return out

    def counted_runner_prefill(rows, items):
        counts.append((Counter(), Counter()))
        with _OpCounter() as outer:
            done = real_runner_prefill(rows, items)
        counts[-1][1].update(outer.ops)
        return done

    prof = cProfile.Profile() if args.profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    engine.generate(batch)
    if prof:
        prof.disable()
    wall = time.perf_counter() - t0
    after = engine.stats.as_dict()
    d = {k: after[k] - before[k] for k in after
         if isinstance(after[k], (int, float)) and not isinstance(after[k], bool)}
    runner.model.prefill, runner.prefill = counted_forward, counted_runner_prefill
    engine.generate(batch[: min(len(batch), 32)])
    del runner.model.prefill, runner.prefill
    # host ms of a batch apart from the forward (admission, staging, K/V copies, sampling, bookkeeping)
    times: list[list[float]] = []
    real_admit = runner.admit

    def timed_forward(*a, **k):
        t = time.perf_counter()
        out = real_prefill(*a, **k)
        times[-1][1] += time.perf_counter() - t
        return out

    def timed_admit(rows, items):
        times.append([time.perf_counter(), 0.0])
        real_admit(rows, items)

    def timed_runner_prefill(rows, items):
        done = real_runner_prefill(rows, items)
        times[-1][0] = time.perf_counter() - times[-1][0]
        return done

    runner.model.prefill, runner.prefill, runner.admit = timed_forward, timed_runner_prefill, timed_admit
    engine.generate(batch)
    del runner.model.prefill, runner.prefill, runner.admit
    around_ms = 1e3 * sum(total - fwd for total, fwd in times) / max(len(times), 1)
    forward = sum(sum(c.values()) for c, _ in counts) / max(len(counts), 1)
    around = sum(sum(c.values()) for _, c in counts) / max(len(counts), 1)
    top_around = sum((c for _, c in counts), Counter()).most_common(12)
    batches = max(d["prefill_batches"], 1)
    out = {
        "prompts": len(batch), "wall_s": round(wall, 3), "prefill_batches": d["prefill_batches"],
        "prefill_host_ms_per_batch": round(1e3 * d["prefill_host_s"] / batches, 2),
        "prompt_tokens": d["prompt_tokens"], "prefill_tokens": d["prefill_tokens"],
        "prefill_padded_tokens": d.get("prefill_padded_tokens"),
        "tokens_per_batch": round(d["prefill_tokens"] / batches),
        "host_ms_per_batch_around_forward": round(around_ms, 2),
        "ops_per_batch_forward": round(forward), "ops_per_batch_around": round(around),
        "top_ops_around": top_around,
    }  # fmt: skip
    print(json.dumps(out))
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
