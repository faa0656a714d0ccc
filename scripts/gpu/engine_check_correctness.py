"""engine_check parts on correctness: Triton kernels vs torch, graph replay vs eager.

Tolerances (stated here, reported with every number):
- kernels: max abs error relative to the reference's largest magnitude: fp32 <= 1e-5, bf16 <= 2^-6 (the
  kernels round once where eager torch rounds after every operation; on CPU the Triton interpreter also
  truncates instead of rounding; the skinny GEMM is held to a fp32 matmul of the same bf16 inputs).
  Sampling race (bf16 and fp32 logits, greedy rows among them): the same token on >= 99% of rows (only
  near-ties may flip through 1-ulp differences in log2 or 1/T). Thresholds (min-p, top-p, top-k + top-p;
  16- and 32-bit keys): the same kept set as the sort-based reference on >= 99% of rows (the masses are
  summed in another order).
- graphs: identical tokens (replay runs the very same kernels as the eager step).
(hf_logits, against transformers: engine_check_hf.py; the kernels' Gemma variants: engine_check_gemma_kernels.py.)
"""

from __future__ import annotations

from typing import Any

import torch

PROMPT_LEN = 48
GRAPH_PROMPT_LEN = 64  # graph_vs_eager: a prefill graph length bucket, so both engines pad to one shape


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def hf_dtype(dtype: torch.dtype) -> dict[str, Any]:
    """from_pretrained's dtype keyword: `dtype` since transformers 4.56, `torch_dtype` before."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|."""
    return _err(a, b) / max(b.float().abs().max().item(), 1e-30)


def part_kernels(ctx) -> dict[str, Any]:
    from engine_check_gemma_kernels import gemma_kernel_cases

    from inferlab.engine import step, torch_ops
    from inferlab.engine.attention import decode_rope_attention_torch
    from inferlab.engine.collection import CollectLayer
    from inferlab.engine.kernels import (
        triton_attention,
        triton_collect,
        triton_filter,
        triton_norm,
        triton_rope,
        triton_sampling,
        triton_step,
    )
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig, skinny_linear
    from inferlab.engine.rows import RowState
    from inferlab.engine.steering import SteerLayer
    from inferlab.engine.sampler import (
        FILTER_MIN_P,
        FILTER_TOP_K,
        FILTER_TOP_P,
        filter_threshold,
        float_key,
        race_argmax_torch,
    )
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    dev, res = ctx.device, {}
    g = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, device=dev).to(dtype)

    dtypes = [torch.float32, torch.bfloat16]
    tol = {torch.float32: 1e-5, torch.bfloat16: 2**-6}
    worst: dict[str, float] = {}

    def note(name: str, dtype: torch.dtype, error: float) -> None:
        key = f"{name} {str(dtype).removeprefix('torch.')}"
        worst[key] = max(worst.get(key, 0.0), error)

    hidden = 1024 if not ctx.quick else 96
    for dtype in dtypes:
        x, r, w = randn(64, hidden, dtype=dtype), randn(64, hidden, dtype=dtype), randn(hidden, dtype=dtype)
        note("rms_norm", dtype, _rel(triton_norm.rms_norm(x, w, 1e-5), torch_ops.rms_norm(x, w, 1e-5)))
        a, s = triton_norm.add_rms_norm(x, r, w, 1e-5)
        ra, rs = torch_ops.add_rms_norm(x, r, w, 1e-5)
        note("add_rms_norm", dtype, max(_rel(a, ra), _rel(s, rs)))
        # steering: half the rows steered (slots into a 5-vector table), decode (row = token) and prefill maps
        slot = torch.where(torch.arange(64, device=dev) % 2 == 0, torch.arange(64, device=dev) % 5, -1).int()
        for token_rows in (None, torch.arange(64, device=dev).flip(0)):
            steer = SteerLayer(randn(5, hidden, dtype=dtype), slot, randn(64), token_rows)
            a, s = triton_norm.add_steer_rms_norm(x, r, w, 1e-5, steer)
            ra, rs = torch_ops.add_steer_rms_norm(x, r, w, 1e-5, steer)
            note("add_steer_rms_norm", dtype, max(_rel(a, ra), _rel(s, rs)))
        flags = torch.arange(64, device=dev)  # every mode, live / idle / finished, n_out inside and past the cap
        for rows in (None, torch.arange(0, 64, 2, device=dev)):
            n = 64 if rows is None else 32
            ours, ref = (CollectLayer(torch.zeros(64, hidden, device=dev),
                                      torch.zeros(64, 3, hidden, dtype=dtype, device=dev), (flags % 4).int(),
                                      flags % 7 != 0, flags % 5 == 0, (flags // 2) % 5, rows) for _ in range(2))
            triton_collect.collect_rows(x[:n], ours)
            torch_ops.collect_rows(x[:n], ref)
            note("collect_rows", dtype, max(_rel(ours.acc, ref.acc), _rel(ours.all, ref.all)))
        gu = randn(64, 2 * hidden, dtype=dtype)
        note("silu_mul", dtype, _rel(triton_norm.silu_mul(gu), torch_ops.silu_mul(gu)))
        rope_shapes = [(16, 8, 64, False), (16, 8, 128, True), (32, 8, 128, False)]
        for heads, kv_heads, head_dim, qk_norm in rope_shapes[:2] if ctx.quick else rope_shapes:
            tables = RotaryTables.build(RopeSpec(theta=500000.0), head_dim, 2048, dev)
            tokens = 40
            qkv = randn(tokens, (heads + 2 * kv_heads) * head_dim, dtype=dtype)
            pos = torch.randperm(2048, generator=g, device=dev)[:tokens]  # distinct: no two writes to one place
            slots = torch.randint(0, 6, (tokens,), generator=g, device=dev)
            qn, kn = (randn(head_dim, dtype=dtype), randn(head_dim, dtype=dtype)) if qk_norm else (None, None)
            caches = [torch.zeros(6, kv_heads, 2048, head_dim, dtype=dtype, device=dev) for _ in range(4)]
            args = (qkv, pos, tables.cos, tables.sin, qn, kn, 1e-6)
            q, k, v = triton_rope.rope_qkv(*args, caches[0], caches[1], slots, heads, return_kv=True)
            rq, rk, rv = torch_ops.rope_qkv(*args, caches[2], caches[3], slots, heads)
            note("rope_qkv", dtype, max(_rel(q, rq), _rel(k, rk), _rel(v, rv)))
        attention_dtypes = dtypes if ctx.cuda else [torch.float32]  # the interpreter's bf16 tl.dot is broken
        if dtype in attention_dtypes:
            shapes = [(16, 8, 64, 2048), (256, 8, 64, 1100), (8, 8, 128, 4096), (3, 2, 128, 300)]
            for rows, kv_heads, head_dim, max_len in [(3, 2, 16, 40), (2, 1, 32, 70)] if ctx.quick else shapes:
                heads = 2 * kv_heads
                tables = RotaryTables.build(RopeSpec(theta=500000.0), head_dim, max_len, dev)
                caches = [randn(rows + 2, kv_heads, max_len, head_dim, dtype=dtype) for _ in range(2)]
                ref_caches = [c.clone() for c in caches]
                qkv = randn(rows, (heads + 2 * kv_heads) * head_dim, dtype=dtype)
                qk_norm = head_dim == 128
                norms = [randn(head_dim, dtype=dtype) if qk_norm else None for _ in range(2)]
                slots = torch.randperm(rows + 2, generator=g, device=dev)[:rows]
                positions = torch.randint(0, max_len, (rows,), generator=g, device=dev)
                positions[0], positions[-1] = 0, max_len - 1
                args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
                counters = torch.zeros((rows + 2) * kv_heads, dtype=torch.int32, device=dev)
                ref = decode_rope_attention_torch(*args, *ref_caches, slots, heads, head_dim**-0.5)
                for splits in (None, 1, 5):
                    out = triton_attention.decode_rope_attention(
                        *args, *caches, slots, heads, head_dim**-0.5, counters, splits=splits
                    )
                    cache_err = max(_rel(c, r) for c, r in zip(caches, ref_caches))
                    note("decode_rope_attention", dtype, max(_rel(out, ref), cache_err))
                    note("decode_rope_attention counters reset (0 = yes)", dtype, float(counters.any()))
    for dtype in dtypes:  # the embedding gather + first norm, and the skinny GEMM (fused SwiGLU too)
        embed, w = randn(1000, hidden, dtype=dtype), randn(hidden, dtype=dtype)
        tokens = torch.randint(0, 1000, (48,), generator=g, device=dev)
        pair, ref_pair = (
            triton_norm.embed_rms_norm(tokens, embed, w, 1e-5),
            torch_ops.embed_rms_norm(tokens, embed, w, 1e-5),
        )
        note("embed_rms_norm", dtype, max(_rel(a, b) for a, b in zip(pair, ref_pair)))
        if dtype in attention_dtypes:  # tl.dot: bf16 only on the device
            gemm_shapes = [(2048, 1024, False), (1024, 4096, True), (96, 200, False)]
            for n, k, swiglu in [(96, 200, False), (64, 96, True)] if ctx.quick else gemm_shapes:
                weight = randn(n, k, dtype=dtype) * 0.05
                for rows in (1, 16, 48, 64):
                    x = randn(rows, 2 * k if swiglu else k, dtype=dtype)
                    ref = ((torch_ops.silu_mul(x) if swiglu else x).float() @ weight.float().T).to(dtype)
                    for config in (SkinnyConfig(32, 128 if rows <= 32 else 64, 1), SkinnyConfig(64, 64, 4)):
                        note("skinny_gemm", dtype, _rel(skinny_linear(x, weight, config, swiglu=swiglu), ref))
    gemma_kernel_cases(ctx, randn, note, dtypes, attention_dtypes, g)  # the Gemma flags of the same kernels
    vocab = 128256 if not ctx.quick else 5000
    base = randn(64, vocab) * 3
    temp = torch.rand(64, generator=g, device=dev) + 0.5
    temp[::7] = 0.0  # greedy rows
    seeds = torch.randint(0, 2**62, (64,), generator=g, device=dev)
    index = torch.randint(0, 1000, (64,), generator=g, device=dev)
    top_k = torch.tensor([0, 1, 40, 1000], device=dev).repeat(16)
    top_p = torch.tensor([0.9, 1.0, 0.5, 0.95, 0.1, 0.99, 1.0, 0.8], device=dev).repeat(8)
    min_p = torch.tensor([0.0, 0.05], device=dev).repeat(32)
    same, agree = [], {}
    for dtype in (torch.bfloat16, torch.float32):
        logits = base.to(dtype)
        keys = float_key(logits.float())
        tau = float_key(
            torch.where(torch.arange(64, device=dev) % 2 == 0, float("-inf"), logits.float().max(-1).values - 2)
        )
        for t in (None, tau):
            ours = triton_sampling.race_argmax(logits, temp, t, seeds, index)
            same.append((ours == race_argmax_torch(logits, temp, t, seeds, index)).float().mean().item())
        for level in (FILTER_MIN_P, FILTER_TOP_P, FILTER_TOP_K):
            k = top_k if level == FILTER_TOP_K else torch.zeros_like(top_k)
            args = (temp, k, top_p, min_p, level)
            ours = triton_filter.filter_threshold(logits, *args)
            ref = filter_threshold(logits.float(), *args)
            name = f"{str(dtype).removeprefix('torch.')} level {level}"
            agree[name] = (keys >= ours[:, None]).eq(keys >= ref[:, None]).all(dim=1).float().mean().item()
    res["race_same_token_fraction"] = min(same)
    res["filter_same_kept_set_fraction"] = agree
    rows = RowState.allocate(64, 4, 32, dev)
    rows.active[:] = True
    rows.max_new[:] = torch.randint(1, 32, (64,), generator=g, device=dev)
    rows.min_new[:] = torch.randint(0, 3, (64,), generator=g, device=dev)
    rows.stop_ids[:] = torch.randint(0, 50, (64, 4), generator=g, device=dev)
    rows.n_stop[:] = 4
    rows.n_eos[:] = 1
    twin = RowState(**{n: t.clone() for n, t in vars(rows).items()})
    small = randn(64, 50)
    step_ok = torch.equal(
        triton_step.mask_stops_before_min(small.clone(), rows), step.mask_stops_before_min(small.clone(), twin)
    )
    for _ in range(4):
        toks = torch.randint(0, 50, (64,), generator=g, device=dev)
        step_ok &= torch.equal(triton_step.record_tokens(toks, rows), step.record_tokens(toks, twin))
    step_ok &= all(torch.equal(t, getattr(twin, n)) for n, t in vars(rows).items())
    res["step_kernels_equal"] = bool(step_ok)
    res["max_abs_error"] = worst
    for key, error in worst.items():
        dtype = torch.float32 if key.endswith("float32") else torch.bfloat16
        ctx.row("kernels", f"{key} max rel err", error, "ok" if error <= tol[dtype] else f"FAIL > {tol[dtype]}")
    ctx.row(
        "kernels",
        "race: same token as reference",
        res["race_same_token_fraction"],
        "ok" if res["race_same_token_fraction"] >= 0.99 else "FAIL < 0.99",
    )
    ctx.row("kernels", "step kernels == torch bookkeeping", step_ok, "ok" if step_ok else "FAIL")
    for name, fraction in agree.items():
        ctx.row(
            "kernels",
            f"thresholds: kept set == sorted reference ({name})",
            fraction,
            "ok" if fraction >= 0.99 else "FAIL < 0.99",
        )
    return res


def _requests(n: int, new_tokens: int, vocab: int, seed: int = 0, prompt_len: int = PROMPT_LEN, **sampling):
    from inferlab.types import Request, SamplingParams

    g = torch.Generator().manual_seed(seed)
    return [
        Request(
            id=f"r{i}",
            prompt_ids=tuple(torch.randint(10, min(vocab, 1000), (prompt_len,), generator=g).tolist()),
            sampling=SamplingParams(max_new_tokens=new_tokens, seed=1000 + i, **sampling),
        )
        for i in range(n)
    ]


def graph_vs_eager(ctx, part: str, preset: str) -> dict[str, Any]:
    """16 requests (greedy, top-p, min-p, plain sampling) on a graph engine and an eager one: identical tokens;
    the graph engine's prefill replayed from a prefill graph. 16 rows and 64-token prompts: one prefill of
    16 lanes x 64 on both engines, so the GEMMs see the same shapes and any difference is the graphs'."""
    from inferlab.engine import Engine, EngineConfig

    path = ctx.checkpoint(preset)
    tokens, res = {}, {}
    for graphs in (True, False):
        # cuBLAS in both: the GEMM plan is timed per engine and may differ between two engines (other
        # rounding, other tokens); what is compared here is graph replay against eager steps
        engine = Engine(EngineConfig(model=path, max_slots=16, max_seq_len=192, cuda_graphs=graphs, gemm="cublas"))
        vocab, n = engine.spec.vocab_size, GRAPH_PROMPT_LEN
        batch = (
            _requests(4, 64, vocab, prompt_len=n, temperature=0.0)
            + _requests(4, 64, vocab, seed=1, prompt_len=n, temperature=1.0, top_p=0.9)
            + _requests(4, 64, vocab, seed=2, prompt_len=n, temperature=0.8, min_p=0.1)
            + _requests(4, 64, vocab, seed=3, prompt_len=n, temperature=1.0)
        )
        at_startup = engine.stats.prefill_graphs  # the warm-up's largest shapes
        tokens[graphs] = [r.token_ids for r in engine.generate(batch)]
        if graphs:
            res[f"{preset}_capture_s"] = engine.stats.capture_s
            # the prompts' own prefill buckets (Gemma 2/3: the windowed attention inside the capture)
            res[f"{preset}_prefill_graphs_new"] = new = engine.stats.prefill_graphs - at_startup
            ctx.row(part, f"{preset}: prefill graphs captured for the requests", new,
                    "ok" if new else "FAIL (the requests' prefills ran eagerly)")
        engine.close()
        ctx.free()
    mismatched = sum(a != b for a, b in zip(tokens[True], tokens[False]))
    res[f"{preset}_mismatched_requests"] = mismatched
    verdict = "ok" if mismatched == 0 else "FAIL"
    ctx.row(part, f"{preset}: requests differing, graph vs eager (of 16)", mismatched, verdict)
    return res


def part_graphs(ctx) -> dict[str, Any]:
    """Graph replay vs eager steps on two engines with the same GEMMs (cuBLAS); then whether two engines that
    tune their GEMM plan choose the same one (if not, their tokens may differ by rounding)."""
    from inferlab.engine import Engine, EngineConfig

    if not ctx.cuda:
        ctx.row("graphs", "graph replay vs eager", "skipped (needs CUDA)")
        return {"skipped": "needs CUDA"}
    res = {}
    for preset in ["tiny", "llama-380m"]:
        res |= graph_vs_eager(ctx, "graphs", preset)
    plans = []
    for _ in range(2):
        engine = Engine(EngineConfig(model=ctx.checkpoint("llama-380m"), max_slots=64, max_seq_len=192))
        plans.append(engine.stats.gemm_choices)
        engine.close()
        ctx.free()
    same = sum(plans[0][key] == plans[1].get(key) for key in plans[0])
    res["gemm_plans"] = plans
    ctx.row("graphs", "llama-380m: GEMM choices equal in two engines", f"{same} of {len(plans[0])}",
            "ok" if same == len(plans[0]) else "DIFFER (tokens may differ by rounding between engines)")  # fmt: skip
    return res
