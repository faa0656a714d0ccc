"""Every Triton kernel of the engine against its torch reference on CUDA, in fp32 and bf16 (the Gemma
variants: test_kernels_gemma_gpu.py; the fp8 cache's: test_fp8_cache_gpu.py).

Tolerance: max |error| relative to the reference's largest magnitude, fp32 <= 1e-5 and bf16 <= 2^-6 (a
kernel rounds once where eager torch rounds after every operation; the skinny GEMM is held to an fp32
matmul of the same bf16 inputs). The sampling race picks the reference's token on >= 99% of rows (a 1-ulp
difference in log2 or 1/T flips near-ties only); the radix thresholds keep the sorted reference's set on
>= 98% of rows (the masses are summed in another order). Quick: fewer shapes and a 5,000-token
vocabulary; full: the decode shapes of llama-380m / qwen3-0.6b and the 128,256-token vocabulary. The
same kernels run on CPU through the Triton interpreter in tests/unit/engine/triton_interpreter_cases.py.
"""

from __future__ import annotations

import pytest
import torch
from gpu_testkit import CUDA_ONLY, rel_err

pytestmark = CUDA_ONLY
CUDA = torch.device("cuda")
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.bfloat16: 2**-6}
HIDDEN = 1024


def randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g, device=CUDA).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_norm_kernels_match_torch(dtype):
    """rms_norm, add + rms_norm, add + steer + rms_norm (half the rows steered; decode and prefill row maps),
    SiLU x up, and the embedding gather + first norm."""
    from inferlab.engine import torch_ops
    from inferlab.engine.kernels import triton_norm
    from inferlab.engine.steering import SteerLayer

    g = torch.Generator(device=CUDA).manual_seed(0)
    x, r, w = randn(g, 64, HIDDEN, dtype=dtype), randn(g, 64, HIDDEN, dtype=dtype), randn(g, HIDDEN, dtype=dtype)
    assert rel_err(triton_norm.rms_norm(x, w, 1e-5), torch_ops.rms_norm(x, w, 1e-5)) <= TOL[dtype]
    pairs = [(triton_norm.add_rms_norm(x, r, w, 1e-5), torch_ops.add_rms_norm(x, r, w, 1e-5))]
    rows = torch.arange(64, device=CUDA)
    slot = torch.where(rows % 2 == 0, rows % 5, -1).int()
    for token_rows in (None, rows.flip(0)):
        steer = SteerLayer(randn(g, 5, HIDDEN, dtype=dtype), slot, randn(g, 64), token_rows)
        pairs.append((triton_norm.add_steer_rms_norm(x, r, w, 1e-5, steer),
                      torch_ops.add_steer_rms_norm(x, r, w, 1e-5, steer)))  # fmt: skip
    embed, tokens = randn(g, 1000, HIDDEN, dtype=dtype), torch.randint(0, 1000, (48,), generator=g, device=CUDA)
    pairs.append((triton_norm.embed_rms_norm(tokens, embed, w, 1e-5), torch_ops.embed_rms_norm(tokens, embed, w, 1e-5)))
    for ours, ref in pairs:
        assert max(rel_err(a, b) for a, b in zip(ours, ref)) <= TOL[dtype]
    gate_up = randn(g, 64, 2 * HIDDEN, dtype=dtype)
    assert rel_err(triton_norm.silu_mul(gate_up), torch_ops.silu_mul(gate_up)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_collect_rows_kernel_matches_torch(dtype):
    """Every pooling mode, live / idle / finished rows, n_out inside and past the cap; decode and prefill maps."""
    from inferlab.engine import torch_ops
    from inferlab.engine.collection import CollectLayer
    from inferlab.engine.kernels import triton_collect

    g = torch.Generator(device=CUDA).manual_seed(1)
    x = randn(g, 64, HIDDEN, dtype=dtype)
    flags = torch.arange(64, device=CUDA)
    for rows in (None, torch.arange(0, 64, 2, device=CUDA)):
        n = 64 if rows is None else 32
        ours, ref = (CollectLayer(torch.zeros(64, HIDDEN, device=CUDA),
                                  torch.zeros(64, 3, HIDDEN, dtype=dtype, device=CUDA), (flags % 4).int(),
                                  flags % 7 != 0, flags % 5 == 0, (flags // 2) % 5, rows) for _ in range(2))  # fmt: skip
        triton_collect.collect_rows(x[:n], ours)
        torch_ops.collect_rows(x[:n], ref)
        assert max(rel_err(ours.acc, ref.acc), rel_err(ours.all, ref.all)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_rope_qkv_kernel_matches_torch(dtype, size):
    """qkv split + rope (+ q/k norms) + K/V written into the cache (prefill), at distinct positions."""
    from inferlab.engine import torch_ops
    from inferlab.engine.kernels import triton_rope
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    g = torch.Generator(device=CUDA).manual_seed(2)
    shapes = [(16, 8, 64, False), (16, 8, 128, True)] + size.pick([], [(32, 8, 128, False)])
    for heads, kv_heads, head_dim, qk_norm in shapes:
        tables = RotaryTables.build(RopeSpec(theta=500000.0), head_dim, 2048, CUDA)
        qkv = randn(g, 40, (heads + 2 * kv_heads) * head_dim, dtype=dtype)
        positions = torch.randperm(2048, generator=g, device=CUDA)[:40]  # distinct: no two writes to one place
        slots = torch.randint(0, 6, (40,), generator=g, device=CUDA)
        norms = (randn(g, head_dim, dtype=dtype), randn(g, head_dim, dtype=dtype)) if qk_norm else (None, None)
        caches = [torch.zeros(6, kv_heads, 2048, head_dim, dtype=dtype, device=CUDA) for _ in range(4)]
        args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
        ours = triton_rope.rope_qkv(*args, caches[0], caches[1], slots, heads, return_kv=True)
        ref = torch_ops.rope_qkv(*args, caches[2], caches[3], slots, heads)
        assert max(rel_err(a, b) for a, b in zip(ours, ref)) <= TOL[dtype], (heads, kv_heads, head_dim)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_decode_rope_attention_kernel_matches_torch(dtype, size):
    """rope + K/V write + flash-decoding + split merge in one launch, over each row's own length (rows at
    position 0 and at the end of the cache among them), for the configured and forced split counts; the
    split counters are left at zero for the next launch."""
    from inferlab.engine.attention import decode_rope_attention_torch
    from inferlab.engine.kernels import triton_attention
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    g = torch.Generator(device=CUDA).manual_seed(3)
    shapes = [(16, 8, 64, 2048), (3, 2, 128, 300)] + size.pick(
        [], [(256, 8, 64, 1100), (200, 8, 64, 1100), (8, 8, 128, 4096), (5, 2, 128, 777)])
    for rows, kv_heads, head_dim, max_len in shapes:
        heads = 2 * kv_heads
        tables = RotaryTables.build(RopeSpec(theta=500000.0), head_dim, max_len, CUDA)
        caches = [randn(g, rows + 2, kv_heads, max_len, head_dim, dtype=dtype) for _ in range(2)]
        ref_caches = [c.clone() for c in caches]
        qkv = randn(g, rows, (heads + 2 * kv_heads) * head_dim, dtype=dtype)
        norms = [randn(g, head_dim, dtype=dtype) if head_dim == 128 else None for _ in range(2)]
        slots = torch.randperm(rows + 2, generator=g, device=CUDA)[:rows]
        positions = torch.randint(0, max_len, (rows,), generator=g, device=CUDA)
        positions[0], positions[-1] = 0, max_len - 1
        args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
        counters = torch.zeros((rows + 2) * kv_heads, dtype=torch.int32, device=CUDA)
        ref = decode_rope_attention_torch(*args, *ref_caches, slots, heads, head_dim**-0.5)
        for splits in (None, 1, 5):
            out = triton_attention.decode_rope_attention(*args, *caches, slots, heads, head_dim**-0.5, counters,
                                                         splits=splits)  # fmt: skip
            assert rel_err(out, ref) <= TOL[dtype], (rows, kv_heads, head_dim, max_len, splits)
            assert max(rel_err(c, r) for c, r in zip(caches, ref_caches)) <= TOL[dtype]
            assert not counters.any()


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_skinny_gemm_matches_an_fp32_matmul(dtype, size):
    """The skinny Triton GEMM (in-kernel split-K; SwiGLU of the input fused) at decode row counts."""
    from inferlab.engine import torch_ops
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig, skinny_linear

    g = torch.Generator(device=CUDA).manual_seed(4)
    shapes = [(96, 200, False), (2048, 1024, False), (1024, 4096, True)] if size.full else [(96, 200, False),
                                                                                          (256, 512, True)]
    for n, k, swiglu in shapes:
        weight = randn(g, n, k, dtype=dtype) * 0.05
        for rows in (1, 16, 48, 64):
            x = randn(g, rows, 2 * k if swiglu else k, dtype=dtype)
            ref = ((torch_ops.silu_mul(x) if swiglu else x).float() @ weight.float().T).to(dtype)
            for config in (SkinnyConfig(32, 128 if rows <= 32 else 64, 1), SkinnyConfig(64, 64, 4)):
                assert rel_err(skinny_linear(x, weight, config, swiglu=swiglu), ref) <= TOL[dtype], (n, k, rows)


def _sampling_inputs(size, seed: int):
    g = torch.Generator(device=CUDA).manual_seed(seed)
    vocab = size.pick(5000, 128256)
    base = randn(g, 64, vocab) * 3
    temp = torch.rand(64, generator=g, device=CUDA) + 0.5
    temp[::7] = 0.0  # greedy rows
    return g, base, temp


def test_race_picks_the_reference_token(size):
    """The exponential race on bf16 and fp32 logits, with and without a threshold, greedy rows among them."""
    from inferlab.engine.kernels import triton_sampling
    from inferlab.engine.sampler import float_key, race_argmax_torch

    g, base, temp = _sampling_inputs(size, 5)
    seeds = torch.randint(0, 2**62, (64,), generator=g, device=CUDA)
    index = torch.randint(0, 1000, (64,), generator=g, device=CUDA)
    for dtype in (torch.bfloat16, torch.float32):
        logits = base.to(dtype)
        even = torch.arange(64, device=CUDA) % 2 == 0
        tau = float_key(torch.where(even, float("-inf"), logits.float().max(-1).values - 2))
        for t in (None, tau):
            ours = triton_sampling.race_argmax(logits, temp, t, seeds, index)
            same = (ours == race_argmax_torch(logits, temp, t, seeds, index)).float().mean().item()
            assert same >= 0.99, (dtype, t is None)


def test_radix_thresholds_keep_the_sorted_reference_set(size):
    """min-p, top-p and top-k + top-p thresholds (16- and 32-bit keys) against the sort-based reference."""
    from inferlab.engine.kernels import triton_filter
    from inferlab.engine.sampler import FILTER_MIN_P, FILTER_TOP_K, FILTER_TOP_P, filter_threshold, float_key

    _, base, temp = _sampling_inputs(size, 6)
    top_k = torch.tensor([0, 1, 40, 1000], device=CUDA).repeat(16)
    top_p = torch.tensor([0.9, 1.0, 0.5, 0.95, 0.1, 0.99, 1.0, 0.8], device=CUDA).repeat(8)
    min_p = torch.tensor([0.0, 0.05], device=CUDA).repeat(32)
    for dtype in (torch.bfloat16, torch.float32):
        logits = base.to(dtype)
        keys = float_key(logits.float())
        for level in (FILTER_MIN_P, FILTER_TOP_P, FILTER_TOP_K):
            args = (temp, top_k if level == FILTER_TOP_K else torch.zeros_like(top_k), top_p, min_p, level)
            ours = triton_filter.filter_threshold(logits, *args)
            ref = filter_threshold(logits.float(), *args)
            kept = (keys >= ours[:, None]).eq(keys >= ref[:, None]).all(dim=1).float().mean().item()
            assert kept >= 0.98, (dtype, level)


def test_step_kernels_equal_the_torch_bookkeeping():
    """The stop mask before min_new_tokens and the token record (finished flags, reasons, next input)."""
    from inferlab.engine import step
    from inferlab.engine.kernels import triton_step
    from inferlab.engine.rows import RowState

    g = torch.Generator(device=CUDA).manual_seed(7)
    rows = RowState.allocate(64, 4, 32, CUDA)
    rows.active[:] = True
    rows.max_new[:] = torch.randint(1, 32, (64,), generator=g, device=CUDA)
    rows.min_new[:] = torch.randint(0, 3, (64,), generator=g, device=CUDA)
    rows.stop_ids[:] = torch.randint(0, 50, (64, 4), generator=g, device=CUDA)
    rows.n_stop[:] = 4
    rows.n_eos[:] = 1
    twin = RowState(**{n: t.clone() for n, t in vars(rows).items()})
    logits = randn(g, 64, 50)
    assert torch.equal(triton_step.mask_stops_before_min(logits.clone(), rows),
                       step.mask_stops_before_min(logits.clone(), twin))  # fmt: skip
    for _ in range(4):
        tokens = torch.randint(0, 50, (64,), generator=g, device=CUDA)
        assert torch.equal(triton_step.record_tokens(tokens, rows), step.record_tokens(tokens, twin))
    for name, tensor in vars(rows).items():
        assert torch.equal(tensor, getattr(twin, name)), name
