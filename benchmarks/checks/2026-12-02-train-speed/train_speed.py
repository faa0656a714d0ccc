"""Where a step of the reference recipe's training goes on the device, and what two levers give:
    python benchmarks/checks/2026-12-02-train-speed/train_speed.py .refdata/data OUT_DIR
1. the recipe's step (deterministic algorithms, the one-hot loss) under torch.profiler: kernels by CUDA time;
2. the same steps timed with deterministic algorithms off; 3. with torch.compile (default mode) on.
Each timing: 10 warm steps, then 20 timed, synchronised."""

import json
import sys
import time
from pathlib import Path

import torch

from inferlab.workloads.conformers.training import reference_training as rt
from inferlab.workloads.conformers.training.batches import training_batches
from inferlab.workloads.conformers.training.model_shape import REFERENCE_SHAPE
from inferlab.workloads.conformers.training.train_loop import RECIPE, _autocast, _batch, make_optimizer, token_loss_sums

data, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
run = rt._prepare(data, REFERENCE_SHAPE, "cuda")
pad = run.tokenizer.eos_token_id
results = {}


def steps(model, optimizer, batches, n):
    for _ in range(n):
        batch = _batch(run.train_store, next(batches), pad, run.device)
        with _autocast(run.device):
            sums = token_loss_sums(model, *batch)
        sums.objective(1.0).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def timed(label, compile_model=False, deterministic=True, profile=False):
    torch.use_deterministic_algorithms(deterministic)
    model, _ = rt._new_model(REFERENCE_SHAPE, run.tokenizer, 27, run.device)
    optimizer = make_optimizer(model, RECIPE, run.device)
    batches = training_batches(run.train_store, RECIPE.tokens_per_batch, 27)
    target = torch.compile(model, dynamic=True) if compile_model else model
    with rt._sdpa_backend(run.attention):
        started = time.perf_counter()
        steps(target, optimizer, batches, 10)
        torch.cuda.synchronize()
        warm_s = time.perf_counter() - started
        started = time.perf_counter()
        if profile:
            from torch.profiler import ProfilerActivity, profile as prof
            with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                steps(target, optimizer, batches, 20)
                torch.cuda.synchronize()
            table = p.key_averages().table(sort_by="self_cuda_time_total", row_limit=30)
            (out / "profile.txt").write_text(table)
            print(table)
        else:
            steps(target, optimizer, batches, 20)
            torch.cuda.synchronize()
        step_s = (time.perf_counter() - started) / 20
    results[label] = {"warm_10_steps_s": round(warm_s, 2), "step_ms": round(step_s * 1e3, 2),
                      "padded_tokens_per_s": round(RECIPE.tokens_per_batch / step_s)}
    print(label, results[label], flush=True)


timed("recipe (profiled)", profile=True)
timed("recipe")
timed("deterministic off", deterministic=False)
timed("torch.compile", compile_model=True)
prompt = run.train_store.prompt_lengths.sum() / run.train_store.lengths.sum()
results["prompt_token_share"] = round(float(prompt), 4)
(out / "speed.json").write_text(json.dumps(results, indent=1))
print(json.dumps(results))
