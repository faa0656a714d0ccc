"""engine_check part `fp8_kv`: the FP8 KV cache (EngineConfig.kv_dtype="fp8") against the model-dtype cache
on qwen3-0.6b-shaped random weights (tiny-qwen3 with --quick), in five steps, each apart (a failure is
recorded and the next step runs; a step not started within the part's budget is skipped):

  accuracy     teacher-forced: the bf16-cache engine's greedy tokens fed to bf16, fp8 and fp32 engines (16
               rows, 29-token prompts, 200 decode steps; Triton kernels, no graphs): max and mean |logit diff|
               of fp8 vs bf16 (also relative to max |logit|), top-1 agreement; the same for bf16 vs fp32 as the
               yardstick of plain bf16 rounding, and fp8 vs fp32. Prefill attends over unquantized K/V, so the
               first step must agree exactly.
  kernel       the decode attention kernel alone at the qwen3-0.6b shape, 256 rows, lengths 330 and 629, bf16
               cache (default config) vs fp8 cache over a few configs, each timed in a CUDA graph over 8
               layers' caches: us per layer, GB/s of K/V (+ scales) read (--quick on CPU: tiny shapes
               through the Triton interpreter, fp32, timed by the wall clock: a plumbing check only).
  gemma        the fp8 kernel at Gemma shapes (head_dim 256, windows, soft-cap, (1 + w) q/k norms) against the
               reference, and tiny-gemma2 / tiny-gemma3 teacher-forced as in accuracy (engine_check_fp8_gemma.py)
  speed        batch 256, 29-token prompts, exactly 600 new tokens, T=1 (the conformer job's top-p 1.0): tok/s,
               ms/step, decode GB/s of the bf16-cache and the fp8 engine (graphs, gemm=cublas for both: the
               same GEMMs, start-up without the GEMM timing; max_seq_len 1400 for both); if the kernel step
               found an fp8 config >5% faster than the default, the fp8 engine is measured with it too (the
               default patched in this process only): then make it triton_attention.FP8_ATTENTION_CONFIG.
  constrained  qwen3-chem conformers of NCI molecules (<= 30 heavy atoms; 96 x 3 = 288 requests: T=1 top-p
               1.0, top-k 50 + top-p 0.9, greedy) on the fp8 engine of the speed step: every output must pass
               the template check and decode to its molecule (100%); constrained tok/s.
About 3.5 minutes on an H100 (the engine start-ups dominate).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

PROMPT_LEN, NEW_TOKENS, STEPS = 29, 600, 200
PART_BUDGET_S = 240.0
OTHER_FP8_CONFIGS = ((64, 4, 3), (64, 8, 3), (32, 4, 3), (128, 4, 2), (128, 8, 3))  # (block_n, warps, stages)


def _fp8_configs() -> list[tuple[int, int, int]]:
    """The fp8 default (triton_attention.FP8_ATTENTION_CONFIG) first, then the others."""
    from inferlab.engine.kernels.triton_attention import FP8_ATTENTION_CONFIG as c

    default = (c.block_n, c.num_warps, c.num_stages)
    return [default] + [x for x in OTHER_FP8_CONFIGS if x != default]


def _requests(n: int, new_tokens: int, vocab: int, seed: int, **sampling):
    from inferlab.types import Request, SamplingParams

    g = torch.Generator().manual_seed(seed)
    return [
        Request(id=f"r{i}", prompt_ids=tuple(torch.randint(10, min(vocab, 1000), (PROMPT_LEN,), generator=g).tolist()),
                sampling=SamplingParams(max_new_tokens=new_tokens, min_new_tokens=new_tokens, ignore_eos=True,
                                        seed=seed * 100_000 + i, **sampling))
        for i in range(n)
    ]  # fmt: skip


def _engine(ctx, preset: str, **options):
    from inferlab.engine import Engine, EngineConfig

    return Engine(EngineConfig(model=ctx.checkpoint(preset), device=str(ctx.device), gemm="cublas", **options))


def step_accuracy(ctx, preset: str) -> dict[str, Any]:
    rows, steps = (4, 20) if ctx.quick else (16, STEPS)
    logits: dict[str, list[torch.Tensor]] = {}
    prompts = None
    for name, dtype, kv in (("bf16", "bfloat16", "auto"), ("fp8", "bfloat16", "fp8"), ("fp32", "float32", "auto")):
        engine = _engine(ctx, preset, dtype=dtype, kv_dtype=kv, max_slots=rows, max_seq_len=PROMPT_LEN + steps + 8,
                         cuda_graphs=False)  # fmt: skip
        model, cache = engine.runner.model, engine.runner.cache
        if prompts is None:
            g = torch.Generator().manual_seed(0)
            prompts = torch.randint(10, min(engine.spec.vocab_size, 1000), (rows, PROMPT_LEN), generator=g)
            prompts = prompts.to(ctx.device)
        slots, lengths = torch.arange(rows, device=ctx.device), torch.full((rows,), PROMPT_LEN, device=ctx.device)
        with torch.inference_mode():
            out = [model.prefill(prompts, lengths, slots, cache).float()]
            for step in range(steps):
                token = (logits["bf16"][step] if "bf16" in logits else out[step]).argmax(-1)  # bf16's greedy tokens
                positions = torch.full((rows,), PROMPT_LEN + step, device=ctx.device)
                out.append(model.decode(token, positions, slots, cache, PROMPT_LEN + step + 1).float())
        logits[name] = out
        del engine, model, cache
        ctx.free()
    stacked = {k: torch.stack(v) for k, v in logits.items()}  # [steps + 1, rows, vocab]
    top = stacked["bf16"].abs().max().item()

    def compare(a: str, b: str) -> dict[str, float]:
        diff = (stacked[a][1:] - stacked[b][1:]).abs()
        return {"max_abs": diff.max().item(), "mean_abs": diff.mean().item(), "max_rel_to_max_logit": diff.max().item() / top,
                "top1_agreement": (stacked[a][1:].argmax(-1) == stacked[b][1:].argmax(-1)).float().mean().item()}  # fmt: skip

    res = {"rows": rows, "steps": steps, "max_abs_logit": top, "prefill_equal": bool(torch.equal(stacked["fp8"][0],
           stacked["bf16"][0])), "fp8_vs_bf16": compare("fp8", "bf16"), "bf16_vs_fp32": compare("bf16", "fp32"),
           "fp8_vs_fp32": compare("fp8", "fp32")}  # fmt: skip
    f, y = res["fp8_vs_bf16"], res["bf16_vs_fp32"]
    ctx.row("fp8_kv", f"{preset} fp8 vs bf16 cache: max |logit diff| ({steps} steps x {rows} rows)",
            f"{f['max_abs']:.4f} ({100 * f['max_rel_to_max_logit']:.2f}% of max |logit| {top:.2f})",
            ("ok" if f["max_rel_to_max_logit"] <= 0.1 else "CHECK > 10%") + f"; mean {f['mean_abs']:.5f}")  # fmt: skip
    ctx.row("fp8_kv", f"{preset} fp8 vs bf16 cache: top-1 agreement", f"{f['top1_agreement']:.4f}",
            f"yardstick bf16 vs fp32: top-1 {y['top1_agreement']:.4f}, max |diff| {y['max_abs']:.4f}; fp8 vs fp32: "
            f"top-1 {res['fp8_vs_fp32']['top1_agreement']:.4f}")  # fmt: skip
    ctx.row("fp8_kv", f"{preset} prefill logits equal (unquantized prompt K/V)", res["prefill_equal"],
            "ok" if res["prefill_equal"] else "FAIL")  # fmt: skip
    return res


def _wall_us(calls) -> float:
    """CPU stand-in for kernel_sweep.graph_us: wall microseconds per call (interpreter: meaningless as speed)."""
    t0 = time.perf_counter()
    for call in calls:
        call()
    return 1e6 * (time.perf_counter() - t0) / len(calls)


def step_kernel(ctx) -> dict[str, Any]:
    from kernel_sweep import graph_us  # beside this file

    from inferlab.engine.attention import decode_rope_attention_torch
    from inferlab.engine.kernels import triton_attention
    from inferlab.engine.kv_quant import quantize
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    if ctx.quick:
        heads, kv_heads, head_dim, rows, layers, max_len, lengths = 4, 2, 32, 4, 2, 64, (20, 53)
    else:
        heads, kv_heads, head_dim, rows, layers = 16, 8, 128, 256, 8
        max_len, lengths = PROMPT_LEN + NEW_TOKENS + 11, (330, PROMPT_LEN + NEW_TOKENS)
    configs = _fp8_configs()[: 2 if ctx.quick else None]
    default = "fp8 n{} w{} s{}".format(*configs[0])
    time_us = graph_us if ctx.cuda else _wall_us
    dev, dtype = ctx.device, torch.bfloat16 if ctx.cuda else torch.float32  # the interpreter's bf16 dot is broken
    tables = RotaryTables.build(RopeSpec(theta=1000000.0), head_dim, max_len, dev)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * head_dim, device=dev, dtype=dtype)
    norms = [torch.randn(head_dim, device=dev, dtype=dtype) for _ in range(2)]
    slots, counters = torch.arange(rows, device=dev), torch.zeros(rows * kv_heads, dtype=torch.int32, device=dev)
    shape = (rows, kv_heads, max_len, head_dim)
    bf16 = [(torch.randn(shape, device=dev, dtype=dtype), torch.randn(shape, device=dev, dtype=dtype))
            for _ in range(layers)]  # fmt: skip
    fp8 = [tuple(t for x in layer for t in quantize(x)) for layer in bf16]  # (k8, k_scale, v8, v_scale)
    res: dict[str, Any] = {}
    for length in lengths:
        positions = torch.full((rows,), length - 1, device=dev, dtype=torch.int64)
        args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
        cells: dict[str, Any] = {}

        def run(label: str, caches, config, fp8_cache: bool) -> None:
            def call(c):
                if fp8_cache:
                    return triton_attention.decode_rope_attention(
                        *args, c[0], c[2], slots, heads, head_dim**-0.5, counters, config=config, k_scale=c[1],
                        v_scale=c[3])  # fmt: skip
                return triton_attention.decode_rope_attention(*args, *c, slots, heads, head_dim**-0.5, counters,
                                                              config=config)  # fmt: skip
            try:
                us = time_us([lambda c=c: call(c) for c in caches])
                kv_bytes = rows * length * 2 * kv_heads * (head_dim * (1 if fp8_cache else 2) + (4 if fp8_cache else 0))
                cells[label] = {"us": us, "gb_per_s": kv_bytes / us / 1e3}
            except Exception as e:  # a config that fails must not hide the others
                cells[label] = {"error": repr(e)[:300]}

        # the fp8 kernel (default config) against the torch reference on copies of layer 0's fp8 cache
        mine, ref = [t.clone() for t in fp8[0]], [t.clone() for t in fp8[0]]
        got = triton_attention.decode_rope_attention(*args, mine[0], mine[2], slots, heads, head_dim**-0.5, counters,
                                                     k_scale=mine[1], v_scale=mine[3]).float()  # fmt: skip
        want = decode_rope_attention_torch(*args, ref[0], ref[2], slots, heads, head_dim**-0.5, k_scale=ref[1],
                                           v_scale=ref[3]).float()  # fmt: skip
        same = [torch.equal(a.view(torch.uint8), b.view(torch.uint8)) if a.dtype == torch.float8_e4m3fn
                else torch.equal(a, b) for a, b in zip(mine, ref)]  # fmt: skip
        cells["fp8 vs reference"] = {"max_abs_err": (got - want).abs().max().item(), "max_abs": want.abs().max().item(),
                                     "cache_identical": all(same)}  # fmt: skip
        del mine, ref
        run("bf16 default", bf16, triton_attention.AttentionConfig(), False)
        for block_n, warps, stages in configs:  # configs[0]: the fp8 default
            run(f"fp8 n{block_n} w{warps} s{stages}", fp8, triton_attention.AttentionConfig(block_n, warps, stages), True)
        res[f"len={length}"] = cells
        check = cells["fp8 vs reference"]
        ok = check["max_abs_err"] <= 0.02 * max(check["max_abs"], 1e-6)
        ctx.row("fp8_kv", f"fp8 attention kernel vs torch reference, len {length}: max |err| (of max |out|)",
                f"{check['max_abs_err']:.4f} ({check['max_abs']:.3f})", ("ok" if ok else "FAIL > 2%") +
                f"; new K/V + scales stored bit-identically: {check['cache_identical']} (rope rounding may differ)")
        timed = {k: v["us"] for k, v in cells.items() if "us" in v}
        ctx.row("fp8_kv", f"attention us/layer, {rows} rows, len {length}: bf16 | fp8 default",
                f"{timed.get('bf16 default', float('nan')):.1f} | {timed.get(default, float('nan')):.1f}",
                "fp8: " + ", ".join(f"{k[4:]} {v:.1f}" for k, v in timed.items() if k.startswith("fp8")))  # fmt: skip
    totals = {c: sum(res[k][f"fp8 n{c[0]} w{c[1]} s{c[2]}"].get("us", float("inf")) for k in res) for c in configs}
    # (res holds only the "len=..." cells here)
    best = min(totals, key=totals.get)
    res["best_fp8_config"] = best
    res["cuda"] = ctx.cuda
    res["best_over_default"] = totals[configs[0]] / totals[best]
    del bf16, fp8
    ctx.free()
    return res


@contextlib.contextmanager
def _default_attention_config(config):
    """In this process only: decode_rope_attention's default `config` (positional default index 1)."""
    from inferlab.engine.kernels import triton_attention

    fn = triton_attention.decode_rope_attention
    saved = fn.__defaults__
    fn.__defaults__ = (saved[0], config) + saved[2:]
    try:
        yield
    finally:
        fn.__defaults__ = saved


def step_speed(ctx, preset: str, engines: dict, best_config) -> dict[str, Any]:
    from engine_check_speed import timed  # beside this file

    from inferlab.engine.kernels.triton_attention import AttentionConfig

    batch, new_tokens = (4, 24) if ctx.quick else (256, NEW_TOKENS)
    res: dict[str, Any] = {}
    variants = [("bf16", "auto", None)]
    if best_config is not None:
        variants.append((f"fp8 n{best_config[0]} w{best_config[1]} s{best_config[2]}", "fp8", best_config))
    variants.append(("fp8", "fp8", None))  # last: kept for the constrained step (one engine in memory at a time)
    for name, kv, config in variants:
        patch = _default_attention_config(AttentionConfig(*config)) if config else contextlib.nullcontext()
        with patch:
            t0 = time.perf_counter()
            engine = _engine(ctx, preset, kv_dtype=kv, max_slots=batch, max_seq_len=512 if ctx.quick else 1400)
            startup = time.perf_counter() - t0
            vocab = engine.spec.vocab_size
            timed(ctx, engine, _requests(batch, 16, vocab, seed=7, temperature=1.0))  # warm-up
            cell = timed(ctx, engine, _requests(batch, new_tokens, vocab, seed=1, temperature=1.0, top_p=1.0))
        cell |= {"startup_s": startup, "kv_dtype": engine.stats.kv_dtype, "kv_cache_bytes": engine.stats.kv_cache_bytes}
        res[name] = cell
        ok = cell["errors"] == 0 and cell["tokens"] == cell["tokens_expected"]
        ctx.row("fp8_kv", f"{preset} B={batch} {new_tokens} new, {PROMPT_LEN}-token prompts, {name} cache: tok/s",
                cell["tok_per_s"], ("" if ok else "FAIL: wrong token count; ") + f"{cell['ms_per_step']:.3f} ms/step, "
                f"{cell['gb_per_s']:.0f} GB/s, start-up {startup:.1f} s")  # fmt: skip
        if name == "fp8":
            engines[name] = engine
        else:
            del engine
            ctx.free()
    for name in [k for k in res if k != "bf16"]:
        ratio = res[name]["tok_per_s"] / res["bf16"]["tok_per_s"]
        res[f"{name}_over_bf16"] = ratio
        ctx.row("fp8_kv", f"{name} / bf16 cache tok/s at B={batch}", ratio,
                f"ms/step {res['bf16']['ms_per_step']:.3f} -> {res[name]['ms_per_step']:.3f}")  # fmt: skip
    return res


def step_constrained(ctx, preset: str, engines: dict) -> dict[str, Any]:
    from engine_check_constrained import check_output, conformer_requests, nci_molecules
    from engine_check_speed import timed

    n_molecules, per_molecule, max_atoms = (4, 2, 6) if ctx.quick else (96, 3, 30)
    molecules = nci_molecules(n_molecules, max_atoms)
    samplings = [dict(temperature=1.0, top_p=1.0), dict(temperature=1.0, top_k=50, top_p=0.9), dict(temperature=0.0)]
    engine = engines["fp8"]
    cases = conformer_requests(engine, molecules, per_molecule, samplings)
    engine.generate([c[0] for c in cases[:4]])  # builds the constraint runtime and its graphs
    cell, results = timed(ctx, engine, [c[0] for c in cases], keep_results=True)
    invalid = {r.id: check_output(r, t, s) for r, (_, t, s) in zip(results, cases) if check_output(r, t, s)}
    cell |= {"molecules": len(molecules), "per_molecule": per_molecule, "invalid": len(invalid),
             "invalid_examples": dict(list(invalid.items())[:3]), "constraint_setup_s": engine.stats.constraint_setup_s,
             "mean_output_tokens": cell["tokens"] / max(len(results), 1)}  # fmt: skip
    ctx.row("fp8_kv", f"{preset} constrained conformers, fp8 cache: valid", f"{len(results) - len(invalid)} of "
            f"{len(results)}", ("ok" if not invalid else f"FAIL {list(invalid.values())[:1]}") +
            f"; {cell['tok_per_s']:,.0f} tok/s constrained")  # fmt: skip
    return cell


def part_fp8_kv(ctx) -> dict[str, Any]:
    from engine_check_fp8_gemma import step_gemma  # beside this file

    preset = "tiny-qwen3" if ctx.quick else "qwen3-0.6b"
    deadline = ctx.elapsed() + PART_BUDGET_S
    threads = torch.get_num_threads()
    if not ctx.cuda:
        torch.set_num_threads(1)  # tiny steps on a shared CPU: intra-op threads only add barriers (20x slower)
    res: dict[str, Any] = {}
    engines: dict[str, Any] = {}
    steps = [("accuracy", lambda: step_accuracy(ctx, preset)), ("kernel", lambda: step_kernel(ctx)),
             ("gemma", lambda: step_gemma(ctx)),
             ("speed", lambda: step_speed(ctx, preset, engines, _better_config(res))),
             ("constrained", lambda: step_constrained(ctx, preset, engines))]  # fmt: skip
    for name, step in steps:
        if ctx.elapsed() > deadline:
            res[name] = {"skipped": f"the part's {PART_BUDGET_S:.0f} s budget is spent"}
            ctx.row("fp8_kv", f"{name}: skipped", "budget spent")
            continue
        t0 = time.perf_counter()
        try:
            res[name] = step()
        except Exception:
            import traceback

            res[name] = {"error": traceback.format_exc()}
            traceback.print_exc()
            ctx.row("fp8_kv", f"{name}: ERROR", res[name]["error"].strip().splitlines()[-1][:100], "FAIL")
        if isinstance(res[name], dict):
            res[name]["seconds"] = round(time.perf_counter() - t0, 1)
    engines.clear()
    ctx.free()
    torch.set_num_threads(threads)
    return res


def _better_config(res: dict[str, Any]):
    """The kernel step's fastest fp8 config when it beat the default by more than 5% on the GPU, else None."""
    kernel = res.get("kernel") or {}
    if kernel.get("cuda") and kernel.get("best_over_default", 1.0) > 1.05:
        return kernel["best_fp8_config"]
    return None
