"""GPU check of the constraint runtime (issue 4): validity on the device, CUDA-graph capture, step cost.

    PYTHONPATH=src python scripts/gpu/constraint_check.py --out OUT            # CUDA, < 2 minutes
    PYTHONPATH=src python scripts/gpu/constraint_check.py --device cpu --quick --out OUT

Parts (each isolated: a failure prints its traceback and the others still run):
  validity  the reference decode loop on the device (adversarial logits, greedy / T=1 / top-k+top-p /
            top-p) for the qwen3-chem tokenizer (if found) and the built-in Llama-3-style one; every
            constrained row checked with `re` and the tokenizer; one unconstrained row per batch.
  graph     mask -> sample -> choose -> advance captured in one CUDA graph (default mask: the Triton kernel)
            against the same steps run eagerly with the torch mask: equal token by token and state by
            state; the eager steps run under torch.cuda.set_sync_debug_mode("warn") and count host syncs.
  timing    microseconds per step at B = 16, 64, 256 and V = 151936, each variant in its own CUDA graph:
            sampling only (greedy, and T=1 full-vocabulary sampling) vs mask + sampling + choose + advance
            (default mask); the mask alone (Triton kernel and torch); choose + advance alone; the copy of
            the logits every variant starts with; and the torch mask for three table layouts (bool
            [S+1, V] as used, class-indirect via [S, C] and [V], bit-packed [S+1, V/32]).
Writes OUT/results.json and prints a compact summary at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from inferlab.constraints.program import compile_program  # noqa: E402
from inferlab.engine.constraints.runtime import ConstraintRuntime  # noqa: E402
from inferlab.constraints.simulate import (  # noqa: E402
    AdversarialLogits,
    ReferenceSampling,
    check_output,
    reference_decode,
    sample_tokens,
    synthetic_conformer_segments,
)
from inferlab.constraints.token_automaton import grammar_set_for  # noqa: E402

VOCAB = 151936  # the qwen3-chem models' padded embedding
LURE_TEXTS = [">", ">[", ">(", "]<", "<", "<-", "a", "C", "..", "-.", ",,", " ", "[/CONFORMER]"]
SAMPLINGS = {
    "greedy": ReferenceSampling(0.0),
    "t1": ReferenceSampling(1.0),
    "t1-topk50-topp0.9": ReferenceSampling(1.0, top_k=50, top_p=0.9),
    "t1-topp0.95": ReferenceSampling(1.0, top_p=0.95),
}


def load_tokenizers() -> dict:
    from transformers import AutoTokenizer

    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    found = {"builtin-llama3": (build_builtin_tokenizer(), 2048)}
    try:
        found["qwen3-chem"] = (AutoTokenizer.from_pretrained(str(qwen3_chem_tokenizer_dir())), VOCAB)
    except Exception as e:  # noqa: BLE001 - reported, the built-in tokenizer still runs
        print(f"[note] qwen3-chem tokenizer unavailable, skipped: {e}")
    return found


def make_programs(tokenizer, count: int, atoms: tuple[int, int], seed: int) -> list:
    rng = random.Random(seed)
    grammars = ["coord3-fixed4", "coord3-stripped"]
    return [
        compile_program(synthetic_conformer_segments(rng.randint(*atoms), rng.choice(grammars), rng), tokenizer)
        for _ in range(count)
    ]


def lure_ids(tokenizer, vocab: int) -> list[int]:
    ids = {i for text in LURE_TEXTS for i in tokenizer(text, add_special_tokens=False).input_ids}
    return sorted(ids | {tokenizer.eos_token_id, len(tokenizer), vocab - 1})


def assign_rows(runtime: ConstraintRuntime, programs: list, batch: int, free_rows: int = 1) -> list:
    """Rows 0..batch-free_rows-1 get programs (cycled), the rest run unconstrained."""
    assigned = [programs[r % len(programs)] if r < batch - free_rows else None for r in range(batch)]
    for row, program in enumerate(assigned):
        runtime.assign(row, program)
    return assigned


# ---- part 1: validity -------------------------------------------------------------------------------------
def part_validity(args, tokenizers) -> dict:
    batch, unique, atoms = (6, 3, (1, 3)) if args.quick else (256, 32, (5, 40))
    report = {}
    for name, (tok, vocab) in tokenizers.items():
        gs = grammar_set_for(tok)
        programs = make_programs(tok, unique, atoms, seed=1)
        runtime = ConstraintRuntime(gs, batch, max(p.length for p in programs), vocab, args.device)
        varied = {t for info in gs.grammars.values() for t in info.candidate_tokens}
        for label, sampling in SAMPLINGS.items():
            assigned = assign_rows(runtime, programs, batch)
            generator = torch.Generator(device=args.device).manual_seed(7)
            logits = AdversarialLogits(batch, vocab, varied, lure_ids(tok, vocab), generator, args.device)
            steps = max(p.max_new_tokens for p in programs) + 2
            start = time.perf_counter()
            tokens = reference_decode(runtime, steps, logits, sampling, generator).cpu()
            seconds = time.perf_counter() - start
            errors = [
                (row, err) for row, p in enumerate(assigned)
                if p is not None and (err := check_output(p, tokens[row].tolist(), tok)) is not None
            ]  # fmt: skip
            checked = sum(p is not None for p in assigned)
            report[f"{name}/{label}"] = {
                "rows_checked": checked, "valid": checked - len(errors), "steps": steps,
                "decode_s": round(seconds, 3), "first_errors": errors[:3],
            }  # fmt: skip
            print(f"[validity] {name}/{label}: {checked - len(errors)}/{checked} valid, {steps} steps, {seconds:.2f}s")
    return {"cases": report, "all_valid": all(r["valid"] == r["rows_checked"] for r in report.values())}


# ---- part 2: CUDA graph == eager ----------------------------------------------------------------------------
def constrained_step(runtime, logits, sampling, uniform):
    masked = runtime.mask_logits(logits)
    tokens = runtime.choose(sample_tokens(masked, sampling, uniform=uniform))
    runtime.advance(tokens)
    return tokens


def part_graph(args, tokenizers) -> dict:
    if args.device == "cpu":
        return {"skipped": "CUDA graphs need a CUDA device"}
    name = "qwen3-chem" if "qwen3-chem" in tokenizers else "builtin-llama3"
    tok, vocab = tokenizers[name]
    gs = grammar_set_for(tok)
    batch = 64
    programs = make_programs(tok, 8, (3, 12), seed=2)
    length = max(p.length for p in programs)
    eager = ConstraintRuntime(gs, batch, length, vocab, args.device, mask_impl="torch")
    graphed = ConstraintRuntime(gs, batch, length, vocab, args.device)  # auto: the Triton kernel on CUDA
    sampling = SAMPLINGS["t1-topk50-topp0.9"]
    logits_buf = torch.zeros(batch, vocab, device=args.device)
    uniform_buf = torch.zeros(batch, 1, device=args.device)

    assign_rows(graphed, programs, batch)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (allocations, lazy inits) outside the capture
        for _ in range(3):
            constrained_step(graphed, logits_buf.clone(), sampling, uniform_buf)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tokens_out = constrained_step(graphed, logits_buf, sampling, uniform_buf)

    assigned = assign_rows(graphed, programs, batch)
    assign_rows(eager, programs, batch)
    generator = torch.Generator(device=args.device).manual_seed(3)
    varied = {t for info in gs.grammars.values() for t in info.candidate_tokens}
    source = AdversarialLogits(batch, vocab, varied, lure_ids(tok, vocab), generator, args.device)
    steps = max(p.max_new_tokens for p in programs) + 2
    mismatches = torch.zeros((), dtype=torch.int64, device=args.device)
    emitted, sync_warnings = [], []
    torch.cuda.synchronize()
    for step in range(steps):
        logits = source(step)
        uniform = torch.rand(batch, 1, generator=generator, device=args.device)
        logits_buf.copy_(logits)
        uniform_buf.copy_(uniform)
        graph.replay()
        torch.cuda.set_sync_debug_mode("warn")  # every host sync inside the eager step warns
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                eager_tokens = constrained_step(eager, logits, sampling, uniform)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        sync_warnings += [str(w.message) for w in caught]
        mismatches += (eager_tokens != tokens_out).sum() + (eager.ptr != graphed.ptr).sum()
        mismatches += (eager.state != graphed.state).sum()
        emitted.append(tokens_out.clone())
    tokens = torch.stack(emitted, dim=1).cpu()
    invalid = sum(
        p is not None and check_output(p, tokens[row].tolist(), tok) is not None for row, p in enumerate(assigned)
    )
    result = {
        "tokenizer": name, "graphed_mask": graphed.mask_impl, "eager_mask": eager.mask_impl, "batch": batch,
        "steps": steps, "mismatches": int(mismatches), "invalid_rows": invalid,
        "host_syncs_in_eager_steps": len(sync_warnings), "first_sync_warnings": sorted(set(sync_warnings))[:3],
    }  # fmt: skip
    print(f"[graph] {result}")
    return result


# ---- part 3: timing -------------------------------------------------------------------------------------------
def timed(fn, device: str, repeats: int) -> float:
    """Microseconds per call: a CUDA graph of `fn` replayed `repeats` times (CUDA), or eager calls (CPU)."""
    if device == "cpu":
        fn()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - start) / repeats * 1e6
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(10):
        graph.replay()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(repeats):
        graph.replay()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / repeats * 1e3


def mask_layouts(runtime: ConstraintRuntime, gs, device: str) -> dict:
    """The three table layouts as functions rows [B] -> forbidden [B, V] (exit handling left out)."""
    token_class = runtime.token_class
    allowed_by_class = torch.cat([gs.transitions != 0, torch.ones(1, gs.num_classes, dtype=torch.bool)]).to(device)
    allowed = ~runtime.forbidden  # [S+1, V]
    pad = (-allowed.shape[1]) % 32
    bits = torch.nn.functional.pad(allowed.to(torch.int64), (0, pad)).view(allowed.shape[0], -1, 32)
    packed = (bits << torch.arange(32, device=device)).sum(-1).to(torch.int32)  # [S+1, V/32] (bit 31 wraps)
    word = torch.arange(allowed.shape[1], device=device) // 32
    bit = (torch.arange(allowed.shape[1], device=device) % 32).to(torch.int32)
    return {
        "bool-table": lambda rows: runtime.forbidden.index_select(0, rows),
        "class-indirect": lambda rows: ~allowed_by_class.index_select(0, rows).index_select(1, token_class),
        "bit-packed": lambda rows: ((packed.index_select(0, rows).index_select(1, word) >> bit) & 1) == 0,
    }


def part_timing(args, tokenizers) -> dict:
    name = "qwen3-chem" if "qwen3-chem" in tokenizers else "builtin-llama3"
    tok, _ = tokenizers[name]
    gs = grammar_set_for(tok)
    batches, repeats = ((4, 16), 3) if args.quick else ((16, 64, 256), 200)
    programs = make_programs(tok, 8, (40, 40) if not args.quick else (3, 3), seed=4)
    rows = {}
    for batch in batches:
        length = max(p.length for p in programs)
        runtime = ConstraintRuntime(gs, batch, length, VOCAB, args.device)
        by_torch = ConstraintRuntime(gs, batch, length, VOCAB, args.device, mask_impl="torch")
        for rt in (runtime, by_torch):
            assign_rows(rt, programs, batch, free_rows=0)
        source = torch.randn(batch, VOCAB, device=args.device)
        work = torch.empty_like(source)
        uniform = torch.rand(batch, 1, device=args.device)
        greedy, t1 = SAMPLINGS["greedy"], SAMPLINGS["t1"]
        sampled = torch.zeros(batch, dtype=torch.int64, device=args.device)
        mask_rows = torch.randint(0, gs.num_states + 1, (batch,), device=args.device)
        variants = {
            "greedy": lambda: sample_tokens(work.copy_(source), greedy),
            "greedy+constraint": lambda: constrained_step(runtime, work.copy_(source), greedy, uniform),
            "t1": lambda: sample_tokens(work.copy_(source), t1, uniform=uniform),
            "t1+constraint": lambda: constrained_step(runtime, work.copy_(source), t1, uniform),
            f"mask/{runtime.mask_impl}": lambda: runtime.mask_logits(work.copy_(source)),
            "mask/torch": lambda: by_torch.mask_logits(work.copy_(source)),
            "copy_only": lambda: work.copy_(source),
            "choose+advance": lambda: runtime.advance(runtime.choose(sampled)),  # cost does not depend on data
        }
        layouts = mask_layouts(by_torch, gs, args.device)
        for layout, f in layouts.items():  # the same mask, three ways
            assert torch.equal(f(mask_rows), layouts["bool-table"](mask_rows)), layout
        variants |= {
            f"mask_layout/{layout}": (lambda f=f: work.copy_(source).masked_fill_(f(mask_rows), float("-inf")))
            for layout, f in layouts.items()
        }
        rows[batch] = {}
        for label, fn in variants.items():
            for rt in (runtime, by_torch):  # long programs: rows stay mid-program, in holes and copies alike
                assign_rows(rt, programs, batch, free_rows=0)
                for _ in range(5):
                    constrained_step(rt, torch.randn_like(source), greedy, None)
            rows[batch][label] = round(timed(fn, args.device, repeats), 2)
        line = ", ".join(f"{k} {v}" for k, v in rows[batch].items())
        print(f"[timing] B={batch} (us/step): {line}")
    return {"tokenizer": name, "vocab": VOCAB, "mode": "cuda-graph" if args.device != "cpu" else "eager", "us": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (CPU smoke run)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    results = {
        "env": {
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if args.device != "cpu" else "cpu",
            "quick": args.quick,
        },
        "parts": {},
    }
    tokenizers = load_tokenizers()
    for name, part in (("validity", part_validity), ("graph", part_graph), ("timing", part_timing)):
        start = time.perf_counter()
        try:
            results["parts"][name] = {"status": "ok", **part(args, tokenizers)}
        except Exception:  # noqa: BLE001 - one failing part must not hide the others
            traceback.print_exc()
            results["parts"][name] = {"status": "error", "error": traceback.format_exc()}
        results["parts"][name]["seconds"] = round(time.perf_counter() - start, 1)
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str))

    print("\n==== constraint_check summary ====")
    print(f"env: {results['env']}")
    for name, res in results["parts"].items():
        if res["status"] != "ok":
            print(f"{name}: ERROR ({res['seconds']}s) - see traceback above")
        elif name == "validity":
            print(f"validity: all_valid={res['all_valid']} ({res['seconds']}s)")
            for case, r in res["cases"].items():
                print(f"  {case}: {r['valid']}/{r['rows_checked']} valid")
        elif name == "graph":
            print(f"graph: {({k: v for k, v in res.items() if k != 'status'})}")
        else:
            print(f"timing ({res['mode']}, us/step, V={res['vocab']}, {res['tokenizer']}):")
            for batch, row in res["us"].items():
                over_t1 = row["t1+constraint"] - row["t1"]
                over_greedy = row["greedy+constraint"] - row["greedy"]
                print(f"  B={batch}: t1 {row['t1']} -> {row['t1+constraint']} (+{over_t1:.1f}); greedy "
                      f"{row['greedy']} -> {row['greedy+constraint']} (+{over_greedy:.1f}); "
                      + ", ".join(f"{k} {v}" for k, v in row.items() if k.startswith("mask/"))
                      + f" (copy {row['copy_only']}); choose+advance {row['choose+advance']}; layouts "
                      + ", ".join(f"{k.split('/')[1]} {v}" for k, v in row.items() if k.startswith("mask_layout")))
    ok = all(r["status"] == "ok" for r in results["parts"].values())
    ok = ok and results["parts"]["validity"].get("all_valid", False)
    graph = results["parts"]["graph"]
    ok = ok and graph.get("mismatches", 0) == 0 and graph.get("invalid_rows", 0) == 0
    ok = ok and graph.get("host_syncs_in_eager_steps", 0) == 0
    print(f"overall: {'PASS' if ok else 'FAIL'}; full results in {args.out / 'results.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
