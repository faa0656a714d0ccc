"""Each Triton kernel against its torch reference, on CPU through the Triton interpreter (small shapes).

Not collected directly: TRITON_INTERPRET must be set before triton is first imported (transformers
imports it), so test_engine_triton_interpreter.py runs this file in a child pytest with the variable set.
fp32 results must agree to float rounding. In bf16 the interpreter truncates where a GPU rounds to
nearest, so bf16 checks allow two bf16 ulps, and its bf16 tl.dot returns garbage, so attention is checked
in fp32 here (an fp8 cache too: its values are exact in fp32, and the kernels round to the e4m3 grid
themselves, since the interpreter's own fp32 -> fp8 cast loses carries); tests/gpu repeats every check in bf16 on CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

from inferlab.engine import kv_quant, step, torch_ops
from inferlab.engine.attention import decode_rope_attention_torch
from inferlab.engine.collection import CollectLayer
from inferlab.engine.gemm_plan import PROJECTIONS, GemmPlan, MlpChoice
from inferlab.engine.kernels import (
    triton_attention,
    triton_collect,
    triton_filter,
    triton_gemm,
    triton_gemm_wide,
    triton_norm,
    triton_rope,
    triton_sampling,
    triton_step,
    triton_top_p,
)
from inferlab.engine.rows import RowState
from inferlab.engine.steering import SteerLayer
from inferlab.engine.sampler import (
    FILTER_MIN_P,
    FILTER_TOP_K,
    FILTER_TOP_P,
    filter_threshold,
    float_key,
    race_argmax_torch,
    top_p_by_rejection,
)
from inferlab.models.rope import RotaryTables
from inferlab.models.rope_spec import RopeSpec

import triton_interpreter_fast

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="run through the interpreter")
if os.environ.get("TRITON_INTERPRET") == "1":
    triton_interpreter_fast.install()  # the interpreter's per-call patching and dtype table, memoized
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=0.1, rtol=2 * 2**-8)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_and_swiglu(dtype):
    g = torch.Generator().manual_seed(0)
    x, r = torch.randn(5, 96, generator=g).to(dtype), torch.randn(5, 96, generator=g).to(dtype)
    w = torch.randn(96, generator=g).to(dtype)
    torch.testing.assert_close(triton_norm.rms_norm(x, w, 1e-6), torch_ops.rms_norm(x, w, 1e-6), **TOL[dtype])
    normed, summed = triton_norm.add_rms_norm(x, r, w, 1e-6)
    ref_normed, ref_summed = torch_ops.add_rms_norm(x, r, w, 1e-6)
    torch.testing.assert_close(normed, ref_normed, **TOL[dtype])
    torch.testing.assert_close(summed, ref_summed, **TOL[dtype])
    gu = torch.randn(5, 160, generator=g).to(dtype)
    torch.testing.assert_close(triton_norm.silu_mul(gu), torch_ops.silu_mul(gu), **TOL[dtype])
    embed, tokens = torch.randn(50, 96, generator=g).to(dtype), torch.tensor([3, 49, 0, 3])
    for ours, ref in zip(
        triton_norm.embed_rms_norm(tokens, embed, w, 1e-6), torch_ops.embed_rms_norm(tokens, embed, w, 1e-6)
    ):
        torch.testing.assert_close(ours, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("row_map", [False, True])
@pytest.mark.parametrize("gemma", [False, True])
def test_add_steer_rms_norm(dtype, row_map, gemma):
    """Steered rows get scale * vector (rounded to the model dtype) added to the sum; -1 rows nothing. gemma:
    (1 + w) norms and x post-normed before the add (Gemma 2/3's residual update), then the steer."""
    g = torch.Generator().manual_seed(2)
    tokens, rows, dim, layers = 7, 4, 96, 3
    x, r = torch.randn(tokens, dim, generator=g).to(dtype), torch.randn(tokens, dim, generator=g).to(dtype)
    w = torch.randn(dim, generator=g).to(dtype)
    variant = dict(unit_offset=True, x_norm=(torch.randn(dim, generator=g) * 0.3).to(dtype)) if gemma else {}
    vectors = torch.randn(5, dim, generator=g).to(dtype)
    index = torch.tensor([[2, -1, 0], [-1, -1, -1], [4, 1, -1], [0, 3, 3]], dtype=torch.int32)  # [rows, layers]
    scale = torch.randn(rows, layers, generator=g)
    token_rows = torch.tensor([0, 0, 1, 2, 2, 3, 1]) if row_map else None
    for layer in range(layers):
        slot, sc = (index[:, layer], scale[:, layer]) if row_map else (
            index[:, layer].repeat(2)[:tokens], scale[:, layer].repeat(2)[:tokens])  # decode: token t is row t
        steer = SteerLayer(vectors, slot, sc, token_rows)
        for ours, ref in zip(triton_norm.add_steer_rms_norm(x, r, w, 1e-6, steer, **variant),
                             torch_ops.add_steer_rms_norm(x, r, w, 1e-6, steer, **variant)):
            torch.testing.assert_close(ours, ref, **TOL[dtype])
    plain = SteerLayer(vectors, torch.full((tokens,), -1, dtype=torch.int32), torch.ones(tokens), None)
    for ours, ref in zip(triton_norm.add_steer_rms_norm(x, r, w, 1e-6, plain, **variant),
                         torch_ops.add_rms_norm(x, r, w, 1e-6, **variant)):  # unsteered rows: the plain add + norm
        torch.testing.assert_close(ours, ref, **TOL[dtype])


@pytest.mark.parametrize("row_map", [False, True])
@pytest.mark.parametrize("with_all", [False, True])
def test_collect_rows_kernel(row_map, with_all):
    """Every mode x live / idle / finished x n_out at 0, inside and past the cap, against the torch reference."""
    g = torch.Generator().manual_seed(5)
    rows, dim, cap = 12, 80, 3
    state = _random_rows(rows, 2, 8, g)
    state.n_out[:] = torch.randint(0, 5, (rows,), generator=g)
    mode = torch.randint(0, 4, (rows,), generator=g, dtype=torch.int32)
    lanes = torch.tensor([3, 0, 7, 11, 5, 9]) if row_map else None
    x = torch.randn(len(lanes) if row_map else rows, dim, generator=g).to(torch.bfloat16)

    def buffers():
        acc = torch.randn(rows, 2, dim, generator=torch.Generator().manual_seed(1))[:, 1]  # a strided slot view
        every = torch.randn(rows, 2, cap, dim, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)[:, 0]
        return CollectLayer(acc, every if with_all else None, mode, state.active, state.finished, state.n_out, lanes)

    ours, ref = buffers(), buffers()
    triton_collect.collect_rows(x, ours)
    torch_ops.collect_rows(x, ref)
    assert torch.equal(ours.acc, ref.acc)
    if with_all:
        assert torch.equal(ours.all, ref.all)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemma_norm_variants_and_geglu(dtype):
    """(1 + w) norms, the sublayer output's own norm before the residual add (Gemma 2/3), the scaled embedding
    (the scale already in the model dtype, as transformers multiplies), the tanh GELU product."""
    g = torch.Generator().manual_seed(6)
    x, r = torch.randn(5, 96, generator=g).to(dtype), torch.randn(5, 96, generator=g).to(dtype)
    w, wx = (torch.randn(96, generator=g) * 0.3).to(dtype), (torch.randn(96, generator=g) * 0.3).to(dtype)
    torch.testing.assert_close(
        triton_norm.rms_norm(x, w, 1e-6, True), torch_ops.rms_norm(x, w, 1e-6, True), **TOL[dtype]
    )
    for ours, ref in zip(
        triton_norm.add_rms_norm(x, r, w, 1e-6, True, x_norm=wx), torch_ops.add_rms_norm(x, r, w, 1e-6, True, x_norm=wx)
    ):
        torch.testing.assert_close(ours, ref, **TOL[dtype])
    scale = torch.tensor(96**0.5, dtype=dtype).item()
    embed, tokens = torch.randn(50, 96, generator=g).to(dtype), torch.tensor([3, 49, 0, 3])
    for ours, ref in zip(
        triton_norm.embed_rms_norm(tokens, embed, w, 1e-6, scale, True),
        torch_ops.embed_rms_norm(tokens, embed, w, 1e-6, scale, True),
    ):
        torch.testing.assert_close(ours, ref, **TOL[dtype])
    gu = (torch.randn(5, 160, generator=g) * 3).to(dtype)  # past the tanh's saturation on both sides
    torch.testing.assert_close(triton_norm.gelu_tanh_mul(gu), torch_ops.gelu_tanh_mul(gu), **TOL[dtype])


@pytest.mark.parametrize("swiglu", [False, True])
@pytest.mark.parametrize("rows", [1, 5, 16, 24, 64])
def test_skinny_gemm_equals_the_matmul(rows, swiglu):
    """fp32 with IEEE dots (the interpreter's bf16 dot is unusable); every config shape: one split writing the
    output, and splits writing partials summed by the second kernel; ragged N and K."""
    g = torch.Generator().manual_seed(rows)
    n, k = 80, 200
    w = torch.randn(n, k, generator=g)
    x = torch.randn(rows, 2 * k if swiglu else k, generator=g)
    expected = (torch_ops.silu_mul(x) if swiglu else x) @ w.T
    for config in (triton_gemm.SkinnyConfig(16, 64, 1), triton_gemm.SkinnyConfig(32, 32, 3)):
        torch.testing.assert_close(
            triton_gemm.skinny_linear(x, w, config, swiglu=swiglu), expected, atol=1e-4, rtol=1e-5
        )


def test_skinny_gemm_runs_more_rows_in_one_program_when_asked():
    """Every row in one program past the plan's 64 (the lab's engine-kernels plugin launches it so)."""
    from inferlab.engine.kernels.triton_gemm_rows import skinny_rows_linear

    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(48, 96, generator=g), torch.randn(80, 96, generator=g)
    for split in (1, 2):
        config = triton_gemm.SkinnyConfig(16, 32, split)
        got = skinny_rows_linear(x, w, 128, config, triton_gemm.tile_counters(48, config.block_n, x.device))
        torch.testing.assert_close(got, x @ w.T, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize(
    "kind,rows,activation",
    [("gated", 3, "silu"), ("gated", 16, "silu"), ("swiglu_down", 3, "silu"), ("swiglu_down", 16, "silu"),
     ("gated", 3, "gelu_tanh"), ("swiglu_down", 16, "gelu_tanh")],
)  # fmt: skip
def test_gemm_plan_mlp_choices_equal_the_torch_mlp(kind, rows, activation):
    """The plan's Triton MLP variants (the gated product in the gate_up epilogue, or in the down prologue;
    SwiGLU or Gemma's GeGLU) against gate_up -> act_mul -> down in torch; fp32, ragged sizes, split-K on
    the down side."""
    g = torch.Generator().manual_seed(rows)
    hidden, inter = 72, 100
    gate_up, down = torch.randn(2 * inter, hidden, generator=g), torch.randn(hidden, inter, generator=g)
    h = torch.randn(rows, hidden, generator=g)
    config = triton_gemm.SkinnyConfig(16, 32, 1 if kind == "gated" else 3)
    act_mul = torch_ops.silu_mul if activation == "silu" else torch_ops.gelu_tanh_mul
    plan = GemmPlan(act_mul, {("mlp", rows): MlpChoice(kind, config)}, torch.zeros(16, dtype=torch.int32), activation)
    expected = act_mul(h @ gate_up.T) @ down.T
    torch.testing.assert_close(plan.mlp(h, gate_up, down), expected, atol=1e-3, rtol=1e-4)
    assert not plan.counters.any()


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_wide_gated_gemm_equals_gate_up_and_act_mul(activation):
    """The packed prefill's gate_up with the gated product in its epilogue against gate_up -> act_mul in torch:
    fp32, ragged rows, columns and K, row tiles in groups of two (the last group short)."""
    from inferlab.engine.packed.wide_mlp import WideMlpGemm

    g = torch.Generator().manual_seed(7)
    hidden, inter, rows = 72, 100, 70
    gate_up, down = torch.randn(2 * inter, hidden, generator=g), torch.randn(hidden, inter, generator=g)
    h = torch.randn(rows, hidden, generator=g)
    act_mul = torch_ops.silu_mul if activation == "silu" else torch_ops.gelu_tanh_mul
    config = triton_gemm_wide.WideConfig(32, 16, 16, num_warps=4, num_stages=2, group_m=2)
    torch.testing.assert_close(triton_gemm_wide.wide_gated_linear(h, gate_up, config, activation),
                               act_mul(h @ gate_up.T), atol=1e-4, rtol=1e-5)
    inner = GemmPlan(act_mul, activation=activation)
    expected = act_mul(h @ gate_up.T) @ down.T
    for min_rows in (16, 128):  # the fused tile from min_rows on, the model's plan below
        plan = WideMlpGemm(inner, config, activation, min_rows)
        torch.testing.assert_close(plan.mlp(h, gate_up, down), expected, atol=1e-3, rtol=1e-4)
        assert plan.act_mul is act_mul  # the rest is the model's plan


@pytest.mark.parametrize("qk_norm,offset", [(False, False), (True, False), (True, True)])  # offset: Gemma 3
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(4, 2, 16), (6, 2, 40)])
def test_rope_qkv_and_cache_write(qk_norm, offset, heads, kv_heads, head_dim):
    g = torch.Generator().manual_seed(1)
    tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, 64, torch.device("cpu"))
    tokens = 5
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=g)
    positions, slots = torch.tensor([0, 3, 7, 7, 40]), torch.tensor([1, 0, 2, 1, 3])
    q_norm = torch.randn(head_dim, generator=g) if qk_norm else None
    k_norm = torch.randn(head_dim, generator=g) if qk_norm else None
    caches = [torch.zeros(4, kv_heads, 48, head_dim) for _ in range(4)]
    args = (qkv, positions, tables.cos, tables.sin, q_norm, k_norm, 1e-6)
    q, k, v = triton_rope.rope_qkv(*args, caches[0], caches[1], slots, heads, return_kv=True, qk_norm_offset=offset)
    rq, rk, rv = torch_ops.rope_qkv(*args, caches[2], caches[3], slots, heads, qk_norm_offset=offset)
    for ours, ref in [(q, rq), (k, rk), (v, rv), (caches[0], caches[2]), (caches[1], caches[3])]:
        torch.testing.assert_close(ours, ref, **TOL[torch.float32])


# GQA shapes (a power-of-two and a padded head_dim) with and without qk norms and split merges; MHA (8 kv
# heads: twice the programs, the interpreter's slowest case) once, with every feature on
ATTENTION_CASES = [(qk_norm, *shape, splits) for qk_norm in (False, True) for shape in ((4, 2, 16), (6, 2, 40))
                   for splits in (1, 3)] + [(True, 8, 8, 32, 3)]


@pytest.mark.parametrize("qk_norm,heads,kv_heads,head_dim,splits", ATTENTION_CASES)
def test_decode_rope_attention_follows_each_rows_length(qk_norm, heads, kv_heads, head_dim, splits):
    """fp32 (the interpreter's bf16 tl.dot is broken: bf16 on CUDA only). The fused kernel equals rope_qkv +
    attention: the output, the K/V it caches at each row's position, nothing read past that position, and
    the merge counters left at zero for the next launch."""
    g = torch.Generator().manual_seed(2)
    tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, 256, torch.device("cpu"))
    caches = [torch.randn(5, kv_heads, 100, head_dim, generator=g) for _ in range(2)]
    ref_caches = [c.clone() for c in caches]
    qkv = torch.randn(4, (heads + 2 * kv_heads) * head_dim, generator=g)
    slots, positions = torch.tensor([3, 0, 4, 1]), torch.tensor([0, 16, 99, 64])  # 99: a partial last block
    norms = [torch.randn(head_dim, generator=g) if qk_norm else None for _ in range(2)]
    args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
    counters = torch.zeros(5 * kv_heads, dtype=torch.int32)
    config = triton_attention.AttentionConfig(block_n=32)
    scale = head_dim**-0.5
    ours = triton_attention.decode_rope_attention(
        *args, *caches, slots, heads, scale, counters, config=config, splits=splits
    )
    ref = decode_rope_attention_torch(*args, *ref_caches, slots, heads, scale)
    torch.testing.assert_close(ours, ref, **TOL[torch.float32])
    for cache, ref_cache in zip(caches, ref_caches):
        torch.testing.assert_close(cache, ref_cache, **TOL[torch.float32])
    assert not counters.any()
    caches[0][3, :, 1:] = float("nan")  # positions past a row's own must never be read
    again = triton_attention.decode_rope_attention(
        *args, *caches, slots, heads, scale, counters, config=config, splits=splits
    )
    assert torch.equal(again[0], ours[0])


@pytest.mark.parametrize("qk_norm,offset", [(False, False), (True, False), (True, True)])  # offset: Gemma 3
def test_rope_qkv_writes_the_reference_fp8_cache(qk_norm, offset):
    """An fp8 cache: the same e4m3 bytes and scales as torch_ops.rope_qkv (kv_quant's rounding), and q, k, v
    returned unquantized for prefill attention."""
    g = torch.Generator().manual_seed(1)
    heads, kv_heads, head_dim = 4, 2, 16
    tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, 64, torch.device("cpu"))
    qkv = torch.randn(5, (heads + 2 * kv_heads) * head_dim, generator=g)
    positions, slots = torch.tensor([0, 3, 7, 7, 40]), torch.tensor([1, 0, 2, 1, 3])
    norms = [torch.randn(head_dim, generator=g) if qk_norm else None for _ in range(2)]
    caches = [torch.zeros(4, kv_heads, 48, head_dim, dtype=torch.float8_e4m3fn) for _ in range(4)]
    scales = [torch.zeros(4, kv_heads, 48) for _ in range(4)]
    args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
    ours = triton_rope.rope_qkv(*args, caches[0], caches[1], slots, heads, k_scale=scales[0], v_scale=scales[1],
                                qk_norm_offset=offset)  # fmt: skip
    ref = torch_ops.rope_qkv(*args, caches[2], caches[3], slots, heads, k_scale=scales[2], v_scale=scales[3],
                             qk_norm_offset=offset)  # fmt: skip
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, **TOL[torch.float32])
    for i in (0, 1):
        assert torch.equal(caches[i].view(torch.uint8), caches[i + 2].view(torch.uint8))
        torch.testing.assert_close(scales[i], scales[i + 2], **TOL[torch.float32])
    assert scales[0].count_nonzero() == 5 * kv_heads  # one scale per token and kv head


@pytest.mark.parametrize("qk_norm,splits,heads,kv_heads,head_dim,gemma", [
    (False, 1, 4, 2, 16, False), (True, 3, 6, 2, 40, False), (True, 3, 4, 1, 256, True)])  # fmt: skip
def test_decode_rope_attention_on_an_fp8_cache(qk_norm, splits, heads, kv_heads, head_dim, gemma):
    """fp32 queries over an fp8 cache: the kernel folds the scales into scores and probabilities, the
    reference dequantizes; the new position is written as the reference writes it (same bytes) and
    attended to as stored; nothing past a row's position is read (NaN codes and scales there). head_dim
    40 leaves masked lanes in every block, which must not enter a scale. gemma: MQA at head_dim 256, a
    window of 40 (row 2 at position 99 reads nothing before 60), soft-capped scores, (1 + w) q/k norms."""
    g = torch.Generator().manual_seed(2)
    tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, 256, torch.device("cpu"))
    stored = [kv_quant.quantize(torch.randn(5, kv_heads, 100, head_dim, generator=g)) for _ in range(2)]
    caches, scales = [q.clone() for q, _ in stored], [s.clone() for _, s in stored]
    ref_caches, ref_scales = [q.clone() for q, _ in stored], [s.clone() for _, s in stored]
    qkv = torch.randn(4, (heads + 2 * kv_heads) * head_dim, generator=g)
    slots, positions = torch.tensor([3, 0, 4, 1]), torch.tensor([0, 16, 99, 64])  # 99: a partial last block
    norms = [torch.randn(head_dim, generator=g) if qk_norm else None for _ in range(2)]
    args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
    counters = torch.zeros(5 * kv_heads, dtype=torch.int32)
    config, scale = triton_attention.AttentionConfig(block_n=32), head_dim**-0.5
    variant = dict(window=40, softcap=0.5, qk_norm_offset=True) if gemma else {}

    def run():
        return triton_attention.decode_rope_attention(
            *args, *caches, slots, heads, scale, counters, config=config, splits=splits, k_scale=scales[0],
            v_scale=scales[1], **variant,
        )  # fmt: skip

    ours = run()
    ref = decode_rope_attention_torch(*args, *ref_caches, slots, heads, scale, k_scale=ref_scales[0],
                                      v_scale=ref_scales[1], **variant)  # fmt: skip
    torch.testing.assert_close(ours, ref, **TOL[torch.float32])
    for i in (0, 1):
        assert torch.equal(caches[i].view(torch.uint8), ref_caches[i].view(torch.uint8))
        torch.testing.assert_close(scales[i], ref_scales[i], **TOL[torch.float32])
    assert not counters.any()
    caches[0].view(torch.uint8)[3, :, 1:] = 0x7F  # e4m3fn NaN
    scales[1][3, :, 1:] = float("nan")
    if gemma:  # before row 2's window
        caches[1].view(torch.uint8)[4, :, :60] = 0x7F
        scales[0][4, :, :60] = float("nan")
    again = run()
    assert torch.equal(again[0], ours[0]) and torch.equal(again[2], ours[2])


def test_fp8_cache_dots_run_in_fp16_at_any_query_scale():
    """bf16 queries take the GPU's path: q and the e4m3 tiles are dotted in fp16. Each query head is scaled by a
    power of two before its cast, so queries past fp16's 65504 (1e5) neither overflow nor lose bits; V's
    scales enter p relative to each tile's largest, so values of 2^-20..2^-16 (scales ~1e-8, which p x
    v_scale in fp16 would flush to zero) keep their precision. Several tiles and two splits; within bf16
    rounding of the fp32 reference, compared at the values' scale."""
    g = torch.Generator().manual_seed(3)
    heads, kv_heads, head_dim = 4, 2, 32
    tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, 256, torch.device("cpu"))
    unit = 2.0**-16
    values = torch.randn(5, kv_heads, 200, head_dim, generator=g) * unit
    values *= torch.exp2(-4 * torch.rand(5, kv_heads, 200, 1, generator=g))  # per-position magnitudes
    stored = [kv_quant.quantize(torch.randn(5, kv_heads, 200, head_dim, generator=g)), kv_quant.quantize(values)]
    caches, scales = [q.clone() for q, _ in stored], [s.clone() for _, s in stored]
    ref_caches, ref_scales = [q.clone() for q, _ in stored], [s.clone() for _, s in stored]
    qkv = torch.randn(4, (heads + 2 * kv_heads) * head_dim, generator=g)
    qkv[:, : heads * head_dim] *= 1e5  # queries past fp16's range
    qkv[:, (heads + kv_heads) * head_dim :] *= unit  # the new token's value, as small as the cached ones
    qkv = qkv.to(torch.bfloat16)
    slots, positions = torch.tensor([3, 0, 4, 1]), torch.tensor([0, 16, 199, 64])
    args = (qkv, positions, tables.cos, tables.sin, None, None, 1e-6)
    counters = torch.zeros(5 * kv_heads, dtype=torch.int32)
    ours = triton_attention.decode_rope_attention(
        *args, *caches, slots, heads, head_dim**-0.5, counters, config=triton_attention.AttentionConfig(block_n=16),
        splits=2, k_scale=scales[0], v_scale=scales[1],
    )  # fmt: skip
    ref = decode_rope_attention_torch(*args, *ref_caches, slots, heads, head_dim**-0.5, k_scale=ref_scales[0],
                                      v_scale=ref_scales[1])  # fmt: skip
    assert torch.isfinite(ours).all() and not counters.any()
    torch.testing.assert_close(ours.float() / unit, ref.float() / unit, **TOL[torch.bfloat16])


@pytest.mark.parametrize("preset", ["tiny", "tiny-gemma2"])
def test_engine_with_an_fp8_cache_on_triton_kernels_matches_the_torch_kernels(tiny_checkpoint, preset):
    """The wiring: the engine hands its cache's scales to the Triton prefill write and decode kernel (Gemma 2:
    a row of 8 + 3 positions outgrows the sliding layers' window of 8; soft-caps)."""
    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams

    prompt = (5, 9, 100, 7, 11, 12, 13, 14)
    requests = [Request(id="greedy", prompt_ids=prompt, sampling=SamplingParams(temperature=0, max_new_tokens=3))]
    outputs = {}
    for kernels in ("torch", "triton"):
        engine = Engine(EngineConfig(model=tiny_checkpoint(preset), max_slots=2, max_seq_len=16, kernels=kernels,
                                     kv_dtype="fp8"))  # fmt: skip
        outputs[kernels] = [r.token_ids for r in engine.generate(requests)]
    assert outputs["triton"] == outputs["torch"]


@pytest.mark.parametrize("splits", [1, 3])
def test_decode_attention_with_a_window_a_softcap_and_gemma_qk_norms(splits):
    """Gemma's kernel variants (fp32): a sliding window (rows before, inside and past it; nothing before the
    window read), soft-capped scores, (1 + w) q/k norms, MQA (every query head on one kv head)."""
    g = torch.Generator().manual_seed(7)
    heads, kv_heads, head_dim, window = 4, 1, 32, 40
    tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, 256, torch.device("cpu"))
    caches = [torch.randn(5, kv_heads, 200, head_dim, generator=g) for _ in range(2)]
    ref_caches = [c.clone() for c in caches]
    qkv = torch.randn(4, (heads + 2 * kv_heads) * head_dim, generator=g) * 2
    slots, positions = torch.tensor([3, 0, 4, 1]), torch.tensor([0, 39, 199, 64])
    norms = [torch.randn(head_dim, generator=g) * 0.3 for _ in range(2)]
    args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
    counters = torch.zeros(5 * kv_heads, dtype=torch.int32)
    gemma = dict(window=window, softcap=2.0, qk_norm_offset=True)
    config = triton_attention.AttentionConfig(block_n=16)
    ours = triton_attention.decode_rope_attention(
        *args, *caches, slots, heads, 0.2, counters, config=config, splits=splits, **gemma
    )
    ref = decode_rope_attention_torch(*args, *ref_caches, slots, heads, 0.2, **gemma)
    torch.testing.assert_close(ours, ref, **TOL[torch.float32])
    for cache, ref_cache in zip(caches, ref_caches):
        torch.testing.assert_close(cache, ref_cache, **TOL[torch.float32])
    assert not counters.any()
    for cache in caches:  # row 2 (slot 4, position 199) sees positions 160..199 only
        cache[4, :, :160] = float("nan")
    again = triton_attention.decode_rope_attention(
        *args, *caches, slots, heads, 0.2, counters, config=config, splits=splits, **gemma
    )
    assert torch.equal(again[2], ours[2])
    unwindowed = decode_rope_attention_torch(*args, *ref_caches, slots, heads, 0.2, softcap=2.0, qk_norm_offset=True)
    assert not torch.allclose(unwindowed[2], ref[2])  # the window changed what row 2 attends to


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_tau", [False, True])
def test_race_kernel_draws_the_reference_tokens(with_tau, dtype):
    g = torch.Generator().manual_seed(3)
    rows, vocab = 12, 5000
    logits = (torch.randn(rows, vocab, generator=g) * 2).to(dtype)
    greedy = torch.arange(rows) % 4 == 1
    temperature = torch.where(greedy, 0.0, torch.rand(rows, generator=g) + 0.5)
    tau = float_key(torch.where(torch.arange(rows) % 3 == 0, float("-inf"), torch.randn(rows, generator=g)))
    tau = tau if with_tau else None
    seeds = torch.randint(0, 2**62, (rows,), generator=g)
    index = torch.randint(0, 1000, (rows,), generator=g)
    ours = triton_sampling.race_argmax(logits, temperature, tau, seeds, index, block=1024)
    assert torch.equal(ours, race_argmax_torch(logits, temperature, tau, seeds, index))
    kept = (
        logits.float() if tau is None else torch.where(float_key(logits.float()) >= tau[:, None], logits.float(), -1e30)
    )
    assert torch.equal(ours[greedy], kept[greedy].argmax(-1))


# (logits dtype, level, slices per row): 16-bit keys (bf16) and 32-bit keys (fp32, fp16), every level
FILTER_CASES = [
    (torch.bfloat16, FILTER_MIN_P, 2),
    (torch.bfloat16, FILTER_TOP_P, 3),
    (torch.bfloat16, FILTER_TOP_K, 1),
    (torch.float32, FILTER_TOP_K, 2),
    (torch.float16, FILTER_TOP_P, 1),
]


@pytest.mark.parametrize("dtype,level,chunks", FILTER_CASES)
def test_filter_kernel_finds_the_sorted_thresholds(dtype, level, chunks):
    """Kept sets equal the sorted reference's, ties included (bf16 makes many; rows 1 and 2 are all ties
    and a single survivor), masked tokens never count, and top-p counts only the top-k survivors."""
    g = torch.Generator().manual_seed(5)
    rows, vocab = (16 if dtype == torch.bfloat16 else 8), 500  # 32-bit keys: twice the passes
    logits = (torch.randn(rows, vocab, generator=g) * 2).to(dtype)
    logits[0, :50] = float("-inf")  # masked tokens (a constraint) never count
    logits[1, 10:] = logits[1, 0]  # one huge tie
    logits[2, :] = float("-inf")
    logits[2, 7] = 1.0
    temperature = torch.rand(rows, generator=g) + 0.4
    temperature[3] = 0.0  # a greedy row in a sampled batch: its threshold keeps the argmax
    top_k = torch.tensor([0, 1, 7, 100, vocab - 1, 0, 3, 50] * 2)[:rows]
    top_k = top_k if level == FILTER_TOP_K else torch.zeros(rows, dtype=torch.long)
    top_p = torch.tensor([1.0, 0.9, 0.5, 0.95, 1.0, 0.2, 0.01, 0.999] * 2)[:rows]
    min_p = torch.tensor([0.0, 0.0, 0.1, 0.0] * 4)[:rows]
    args = (logits, temperature, top_k, top_p, min_p, level)
    ours = triton_filter.filter_threshold(*args, block=128, chunks=chunks)
    reference = filter_threshold(logits.float(), *args[1:])
    keys = float_key(logits.float())
    assert torch.equal(keys >= ours[:, None], keys >= reference[:, None])


def _random_rows(n: int, stops: int, cap: int, g: torch.Generator) -> RowState:
    rows = RowState.allocate(n, stops, cap, torch.device("cpu"))
    rows.active[:] = torch.rand(n, generator=g) < 0.8
    rows.finished[:] = torch.rand(n, generator=g) < 0.2
    rows.n_out[:] = torch.randint(0, cap, (n,), generator=g)
    rows.max_new[:] = rows.n_out + torch.randint(0, 3, (n,), generator=g)
    rows.min_new[:] = torch.randint(0, cap, (n,), generator=g)
    rows.positions[:] = torch.randint(0, 100, (n,), generator=g)
    rows.tokens[:] = torch.randint(0, 50, (n,), generator=g)
    rows.n_stop[:] = torch.randint(0, stops + 1, (n,), generator=g)
    rows.n_eos[:] = torch.minimum(rows.n_stop, torch.randint(0, 3, (n,), generator=g))
    table = torch.randint(0, 12, (n, stops), generator=g)
    rows.stop_ids[:] = torch.where(torch.arange(stops)[None, :] < rows.n_stop[:, None], table, table[:, :1])
    rows.reason[:] = torch.randint(0, 4, (n,), generator=g)
    return rows


def test_step_kernels_match_the_torch_bookkeeping():
    g = torch.Generator().manual_seed(4)
    for _ in range(5):
        rows = _random_rows(37, 5, 8, g)
        twin = RowState(**{name: t.clone() for name, t in vars(rows).items()})
        logits = torch.randn(37, 12, generator=g)
        masked = triton_step.mask_stops_before_min(logits.clone(), rows)
        assert torch.equal(masked, step.mask_stops_before_min(logits.clone(), twin))
        tokens = torch.randint(0, 12, (37,), generator=g)
        live = triton_step.record_tokens(tokens, rows)
        assert torch.equal(live, step.record_tokens(tokens, twin))
        for name, value in vars(rows).items():
            assert torch.equal(value, getattr(twin, name)), name


def test_engine_with_triton_kernels_matches_the_torch_kernels(tiny_checkpoint):
    from inferlab.constraints.program import compile_program
    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template

    path = tiny_checkpoint("tiny")
    template = build_template("C", get_profile("v3-fixed4"))  # one atom: forced and free digits, ~21 steps
    conformer = dict(prompt_ids=(11, 12, 13), sampling=SamplingParams(temperature=1.0, seed=8))
    requests = [
        Request(id="greedy", prompt_ids=(5, 9, 100, 7), sampling=SamplingParams(temperature=0, max_new_tokens=4)),
        Request(id="top-p", prompt_ids=(11,) * 9, sampling=SamplingParams(top_p=0.9, max_new_tokens=4, seed=3)),
        Request(id="min-p", prompt_ids=(300, 2), sampling=SamplingParams(min_p=0.1, max_new_tokens=4, seed=4)),
        Request(id="one-token", prompt_ids=(42,), sampling=SamplingParams(top_k=5, max_new_tokens=3, seed=5)),
        Request(id="shared", prompt_ids=(11,) * 9, sampling=SamplingParams(top_p=0.9, max_new_tokens=4, seed=6)),
    ]  # "shared" repeats "top-p"'s prompt: one prefill, the K/V copied (the Triton copy on "triton")
    short = Request(id="short", prompt_ids=(5, 9, 100, 7), sampling=SamplingParams(temperature=0, max_new_tokens=2))
    outputs, pressures = {}, {}
    for kernels in ("torch", "triton"):
        engine = Engine(EngineConfig(model=path, max_slots=5, max_seq_len=48, kernels=kernels))
        assert engine.ops.name == kernels
        program = compile_program(template.segments, engine.tokenizer)  # the Triton mask kernel on "triton"
        constrained = Request(id="conformer", constraint=program, **conformer)
        outputs[kernels] = [r.token_ids for r in engine.generate(requests)]
        alone = engine.generate([constrained])[0]
        outputs[kernels].append(alone.token_ids)
        pressures[kernels] = alone.constraint_pressure  # the fused race's on "triton", the torch mask's on "torch"
        if kernels == "triton":  # the skinny GEMM in every projection (the GPU engine chooses it by timing)
            gemm = engine.runner.model.gemm
            gemm.counters = torch.zeros(64, dtype=torch.int32)
            whole = triton_gemm.SkinnyConfig(32, 64, 1)
            for mlp in (MlpChoice("gated", whole), MlpChoice("swiglu_down", triton_gemm.SkinnyConfig(32, 64, 2))):
                gemm.choices = {(name, rows): mlp if name == "mlp" else whole for name in PROJECTIONS
                                for rows in range(1, 17)}  # fmt: skip
                outputs[kernels].append(engine.generate([short])[0].token_ids)
        else:
            outputs[kernels] += [outputs[kernels][0][:2]] * 2  # greedy: the 2-token run is the 4-token run's start
        assert engine.runner.constraints.mask_impl == kernels
        outputs[kernels].append(engine.generate(requests[-1:])[0].token_ids)  # a 1-token prefill batch
    assert outputs["triton"] == outputs["torch"]
    ours, ref = pressures["triton"], pressures["torch"]
    assert (ours.steps, ours.max_step, ours.max_op) == (ref.steps, ref.max_step, ref.max_op)
    assert ours.mean == pytest.approx(ref.mean, abs=1e-5) and ours.max == pytest.approx(ref.max, abs=1e-5)


@pytest.mark.parametrize("preset", ["tiny", "tiny-gemma2"])  # Gemma 2: (1 + w) norms, the post-norm before the steer
def test_engine_steering_and_collection_on_triton_kernels_match_the_torch_kernels(tiny_checkpoint, preset):
    """The fused add + steer + norm and the collect kernel inside a whole engine (prefill and decode)."""
    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Collect, Request, SamplingParams, Steer

    path = tiny_checkpoint(preset)
    vector = torch.randn(64, generator=torch.Generator().manual_seed(0))
    greedy = SamplingParams(temperature=0, max_new_tokens=4)
    requests = [  # a steered and an unsteered row in one batch
        Request(id="s", prompt_ids=(5, 9, 100), sampling=greedy,
                steering=(Steer(0, vector, 0.8), Steer(-1, vector, -0.5)), collect=Collect((0, 1), "mean")),
        Request(id="plain", prompt_ids=(7, 8), sampling=greedy, collect=Collect((1,), "all")),
    ]
    outputs = {}
    for kernels in ("torch", "triton"):
        engine = Engine(EngineConfig(model=path, max_slots=2, max_seq_len=32, kernels=kernels))
        outputs[kernels] = engine.generate(requests)
    for ours, ref in zip(outputs["triton"], outputs["torch"]):
        assert ours.token_ids == ref.token_ids
        assert list(ours.activations) == list(ref.activations)
        for layer, value in ours.activations.items():
            torch.testing.assert_close(value, ref.activations[layer], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rejection_top_p_kernels_draw_the_reference_tokens(dtype):
    """Re-keyed rounds with skipped rows, and the fused top-p draw: Triton == the torch reference."""
    g = torch.Generator().manual_seed(4)
    rows, vocab = 10, 1250  # three 512-token blocks, the last one partial
    logits = (torch.randn(rows, vocab, generator=g) * 2).to(dtype)
    logits[2, 100:] = float("-inf")  # a masked row
    temperature = torch.where(torch.arange(rows) % 5 == 1, 0.0, torch.rand(rows, generator=g) + 0.5)
    seeds = torch.randint(0, 2**62, (rows,), generator=g)
    index = torch.randint(0, 1000, (rows,), generator=g)
    skip = torch.arange(rows) % 3 == 0
    for r in (0, 2):
        ours = triton_sampling.race_argmax(logits, temperature, None, seeds, index, r, skip, block=512)
        ref = race_argmax_torch(logits, temperature, None, seeds, index, r)
        assert torch.equal(ours[~skip], ref[~skip])
    top_p = torch.tensor([0.9, 0.5, 0.95, 1.0, 0.3, 0.8, 0.99, 0.6, 0.05, 0.7])
    # min-p on a greedy row (1), a row without top-p (3: only the floor to check) and a top-p row (7)
    min_p = torch.where((torch.arange(rows) == 1) | (torch.arange(rows) == 3) | (torch.arange(rows) == 7), 0.3, 0.0)
    for rounds in (1, 3):
        ours = triton_top_p.top_p_by_rejection(logits, temperature, top_p, min_p, seeds, index, rounds, block=512)
        assert torch.equal(ours, top_p_by_rejection(logits, temperature, top_p, min_p, seeds, index, rounds))


@pytest.mark.parametrize("preset", ["tiny-gemma2", "tiny-gemma3"])
def test_gemma_forward_on_triton_kernels_matches_the_torch_kernels(tiny_checkpoint, preset):
    """The Gemma forward wired to the Triton kernels (windows 8 / 12 shorter than the sequence, soft-caps,
    post-norms, (1 + w) q/k norms, the two ropes; then the gated GeGLU GEMM) gives the torch kernels' logits."""
    from inferlab.engine import Engine, EngineConfig

    path = tiny_checkpoint(preset)
    prompt = torch.arange(5, 18)[None, :]  # 13 tokens, then 2 decode steps at positions 13-14
    logits = {}
    for kernels in ("torch", "triton"):
        engine = Engine(EngineConfig(model=path, max_slots=1, max_seq_len=24, kernels=kernels))
        model, cache, slot = engine.runner.model, engine.runner.cache, torch.tensor([0])
        steps = [model.prefill(prompt, torch.tensor([13]), slot, cache)]
        for position in (13, 14):
            if kernels == "triton" and position == 14:  # the last step through the gated GeGLU GEMM
                model.gemm.counters = torch.zeros(64, dtype=torch.int32)
                model.gemm.choices = {("mlp", 1): MlpChoice("gated", triton_gemm.SkinnyConfig(32, 64, 1))}
            token = torch.tensor([int(steps[-1].argmax())])
            steps.append(model.decode(token, torch.tensor([position]), slot, cache, max_len_hint=position + 1))
        logits[kernels] = torch.cat(steps)
    torch.testing.assert_close(logits["triton"], logits["torch"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_prefix_copy_kernel_equals_the_torch_copy(dtype):
    from inferlab.engine.kernels import triton_kv_copy
    from inferlab.engine.kv_cache import KVCache

    g = torch.Generator().manual_seed(5)
    shape = (2, 5, 2, 40, 8)  # [layers, slots, kv_heads, max_len, head_dim]: 37 x 8 elements: several blocks
    k, v = torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype)
    src, dst = torch.tensor([3, 3, 0]), torch.tensor([1, 4, 2])
    ref = KVCache(k.clone(), v.clone(), torch.zeros(10, dtype=torch.int32))
    ref.copy_prefix(src, dst, 37)
    triton_kv_copy.copy_prefix(k, v, src, dst, 37, block=128)  # 3 blocks per (pair, layer, head)
    assert torch.equal(k, ref.k) and torch.equal(v, ref.v)


def test_kv_prefix_copy_of_an_fp8_mqa_cache_with_scales_equals_the_torch_copy():
    """KVCache.copy_prefix on the Triton path for Gemma's shape (one kv head, head_dim 256) with an fp8 cache:
    the e4m3 bytes and the fp32 scales (copied as int32 bits) equal the torch path's."""
    from inferlab.engine.kv_cache import KVCache

    g = torch.Generator().manual_seed(6)
    shape = (2, 3, 1, 12, 256)  # [layers, slots, kv_heads, max_len, head_dim]
    k, v = (torch.randn(shape, generator=g).to(torch.float8_e4m3fn) for _ in range(2))
    ks, vs = torch.rand(shape[:-1], generator=g), torch.rand(shape[:-1], generator=g)
    caches = {impl: KVCache(k.clone(), v.clone(), torch.zeros(3, dtype=torch.int32), ks.clone(), vs.clone(), impl)
              for impl in ("torch", "triton")}
    for cache in caches.values():
        cache.copy_prefix(torch.tensor([2]), torch.tensor([0]), 9)
    ours, ref = caches["triton"], caches["torch"]
    for name in ("k", "v"):
        assert torch.equal(getattr(ours, name).view(torch.uint8), getattr(ref, name).view(torch.uint8)), name
    assert torch.equal(ours.k_scale, ref.k_scale) and torch.equal(ours.v_scale, ref.v_scale)
    assert not torch.equal(ref.k_scale, ks)  # something was copied


def test_constrained_race_draws_the_masked_race_and_skips_forced_rows():
    """kernels/triton_sampling.constrained_race_argmax (the mask folded into the race) against the torch
    reference (the runtime's mask_logits, then race_argmax_torch), step by step over whole conformer
    programs: copy and hole rows (opening and accepting states), greedy and sampled rows, an unconstrained
    row, decode (lane = row) and prefill (lanes -> row ids)."""
    import random

    from inferlab.constraints.program import compile_program
    from inferlab.constraints.simulate import synthetic_conformer_segments
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.engine.constraints.runtime import ConstraintRuntime
    from inferlab.engine.sampler import FILTER_NONE
    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer

    tokenizer = build_builtin_tokenizer()
    grammar_set, vocab, rng = grammar_set_for(tokenizer), 1536, random.Random(7)  # the 1379 tokens, padded
    programs = [compile_program(synthetic_conformer_segments(1, "coord3-fixed4", rng), tokenizer) for _ in range(3)]
    runtimes = {impl: ConstraintRuntime(grammar_set, 4, 256, vocab, "cpu", mask_impl=impl)
                for impl in ("torch", "triton")}
    for runtime in runtimes.values():
        for row in range(4):
            runtime.assign(row, programs[row] if row < 3 else None)
    ours, ref = runtimes["triton"], runtimes["torch"]
    race = ours.fused_race(FILTER_NONE)  # the runtime's: 4096-token chunks, one for this vocabulary
    # and 256-token chunks, most of which a coordinate state has no move into (the chunk table's skip)
    from inferlab.constraints.program import COPY, HOLE
    from inferlab.engine.constraints.runtime import chunks_with_moves

    view = triton_sampling.ConstraintView(
        ours.active, ours.ptr, ours.last_op, ours.op_kind, ours.op_arg, ours.state, ours.accepting,
        ours.token_class_i32, ours.allowed_by_class, chunks_with_moves(ours.transitions, ours.token_class, 256),
        COPY, HOLE)  # fmt: skip
    assert 0 < int(view.chunk_allowed.sum()) < view.chunk_allowed.numel()

    def small_chunks(logits, temperature, seeds, index, lanes):
        return triton_sampling.constrained_race_argmax(logits, temperature, seeds, index, view, lanes, block=256)

    g = torch.Generator().manual_seed(3)
    temperature = torch.tensor([1.0, 0.0, 0.7, 1.3])  # a greedy row; row 3 is unconstrained
    seeds = torch.tensor([11, 12, 13, 2**40 + 14])
    live, not_done = torch.ones(4, dtype=torch.bool), torch.zeros(4, dtype=torch.bool)
    for n in range(max(p.max_new_tokens for p in programs)):
        index = torch.full((4,), n, dtype=torch.int64)
        logits = torch.randn(4, vocab, generator=g).to(torch.bfloat16 if n % 2 else torch.float32)
        forced = ref.forced_rows(4)
        expected = race_argmax_torch(ref.mask_logits(logits.float()), temperature, None, seeds, index)
        for fused in (race, small_chunks):
            drawn = fused(logits, temperature, seeds, index, None)
            assert torch.equal(drawn[~forced], expected[~forced]) and torch.all(drawn[forced] == 0), n
            if n % 4 >= 2 or (fused is race) != (n % 8 < 4):  # prefill lanes: each kernel on 1 step in 4,
                continue  # both dtypes
            lanes = torch.tensor([2, 0])
            sub = fused(logits[[2, 0]], temperature[[2, 0]], seeds[[2, 0]], index[:2], lanes)
            keep = ~forced[[2, 0]]
            assert torch.equal(sub[keep], expected[[2, 0]][keep]), n
        ref.emit(expected, live, not_done)
        ours.emit(expected, live, not_done)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_skipped_rows_leave_the_other_rows_draws_unchanged(dtype):
    """Rows whose token a constraint forces skip the draw (top-p by rejection, the race after a threshold):
    every other row draws what it would have drawn, Triton == torch."""
    g = torch.Generator().manual_seed(9)
    rows, vocab = 8, 3000
    logits = (torch.randn(rows, vocab, generator=g) * 2).to(dtype)
    temperature = torch.rand(rows, generator=g) + 0.5
    seeds, index = torch.randint(0, 2**62, (rows,), generator=g), torch.randint(0, 1000, (rows,), generator=g)
    top_p = torch.full((rows,), 0.8)
    min_p = torch.zeros(rows)
    skip = torch.tensor([True, False, False, True, False, True, False, False])
    full = top_p_by_rejection(logits, temperature, top_p, min_p, seeds, index)
    skipped = top_p_by_rejection(logits, temperature, top_p, min_p, seeds, index, skip=skip)
    assert torch.equal(skipped[~skip], full[~skip]) and torch.all(skipped[skip] == 0)
    ours = triton_top_p.top_p_by_rejection(logits, temperature, top_p, min_p, seeds, index, block=1024,
                                           skip=skip.to(torch.int8))
    assert torch.equal(ours, skipped)
    tau = filter_threshold(logits.float(), temperature, torch.full((rows,), 50), top_p, min_p, FILTER_TOP_K)
    race = triton_sampling.race_argmax(logits, temperature, tau, seeds, index, 0, skip, block=1024)
    assert torch.equal(race, race_argmax_torch(logits, temperature, tau, seeds, index, 0, skip))


@pytest.mark.parametrize("window, softcap, head_dim", [(0, None, 16), (5, None, 24), (70, None, 16), (200, 2.0, 24)])
def test_varlen_attention_kernel_equals_the_reference(window, softcap, head_dim):
    """Rows of 1..257 tokens (several query and key blocks), GQA, views of one qkv buffer; windows shorter and
    longer than a block, soft-caps. fp32 (the interpreter's bf16 dot is unusable)."""
    from inferlab.engine.kernels.triton_varlen_attention import varlen_attention
    from inferlab.engine.packed.attention import varlen_attention_torch
    from inferlab.engine.packed.batch import on_device, pack_rows

    lengths = [1, 130, 257, 64]
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(sum(lengths), 8 * head_dim, generator=g)
    q, k, v = (t.view(sum(lengths), -1, head_dim) for t in qkv.split([4 * head_dim, 2 * head_dim, 2 * head_dim], 1))
    batch = on_device(pack_rows([[0] * n for n in lengths]), torch.device("cpu"))
    got = varlen_attention(q, k, v, batch.cu_seqlens, max(lengths), head_dim**-0.5, window, softcap)
    want = varlen_attention_torch(q, k, v, batch, head_dim**-0.5, window, softcap)
    torch.testing.assert_close(got, want, **TOL[torch.float32])


@pytest.mark.parametrize("qk_norm, offset", [(False, False), (True, False), (True, True)])
def test_rope_in_place_equals_the_reference(qk_norm, offset):
    from inferlab.engine.kernels.triton_rope_inplace import rope_inplace
    from inferlab.engine.packed.forward import rope_inplace_torch

    g = torch.Generator().manual_seed(3)
    heads, kv_heads, head_dim = 4, 2, 32
    tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, 64, torch.device("cpu"))
    qkv = torch.randn(9, (heads + 2 * kv_heads) * head_dim, generator=g)
    norms = [torch.randn(head_dim, generator=g) if qk_norm else None for _ in range(2)]
    positions = torch.tensor([0, 1, 2, 0, 1, 2, 3, 4, 63])
    ours, ref = qkv.clone(), qkv.clone()
    rope_inplace(ours, positions, tables.cos, tables.sin, *norms, 1e-6, heads, kv_heads, offset)
    rope_inplace_torch(ref, positions, tables.cos, tables.sin, *norms, 1e-6, heads, kv_heads, offset)
    torch.testing.assert_close(ours, ref, **TOL[torch.float32])
    assert torch.equal(ours[:, (heads + kv_heads) * head_dim :], qkv[:, (heads + kv_heads) * head_dim :])  # v as it was


def test_row_quantization_kernel_stores_the_reference_bytes():
    from inferlab.engine.kernels.triton_fp8_rows import quantize_rows

    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 5000, generator=g) * torch.logspace(-3, 2, 6)[:, None]  # two passes of 4096-wide blocks
    x[2] = 0.0
    q, scale = quantize_rows(x)
    ref_q, ref_scale = kv_quant.quantize(x)
    assert torch.equal(scale, ref_scale) and torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8))


def test_packed_encoder_on_triton_kernels_matches_the_torch_kernels(tiny_classifier):
    """The whole packed forward with the Triton norms, in-place rope and varlen attention (forced: on CPU the
    encoder would pick the torch attention) against the torch kernels; Gemma 2: windows, soft-caps, (1 + w)."""
    from inferlab.engine import Encoder, EncoderConfig

    path = tiny_classifier("tiny-gemma2")
    rows = [[7], list(range(11, 24))]
    ref = Encoder(EncoderConfig(path, device="cpu", kernels="torch"))
    ours = Encoder(EncoderConfig(path, device="cpu", kernels="triton"))
    ours.forward.attention.chosen = {(False, False): "triton", (True, False): "triton", (False, True): "triton",
                                     (True, True): "triton"}
    torch.testing.assert_close(ours.classify(ours.pack(rows)), ref.classify(ref.pack(rows)), atol=1e-4, rtol=1e-4)


def test_constraint_pressure_kernels_measure_the_float64_reference_and_draw_the_same_tokens():
    """The constraint pressure in the Triton kernels (engine/constraints/pressure.py): the fused race (the
    runtime's 4096-token blocks and 256-token ones, whose skipped blocks count as taken away) and the mask
    kernel with its combining launch give each lane the float64 reference (pressure_reference.py) at hole and
    copy steps, fp32 and bf16 logits, decode and prefill lanes; the race draws the tokens it draws without
    pressure and the mask writes the same logits; the emit kernel accumulates what the torch emit does."""
    from pressure_reference import conformer_like_programs, pressing_logits, reference_pressure

    from inferlab.constraints.program import COPY, HOLE
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.engine.constraints import step_kernels
    from inferlab.engine.constraints.pressure import PressureBuffers
    from inferlab.engine.constraints.runtime import ConstraintRuntime, chunks_with_moves
    from inferlab.engine.sampler import FILTER_NONE
    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer

    tokenizer = build_builtin_tokenizer()
    vocab, rows = 1536, 4
    programs = conformer_like_programs(tokenizer, 3, atoms=1, seed=5)
    runtimes = {impl: ConstraintRuntime(grammar_set_for(tokenizer), rows, 256, vocab, "cpu", mask_impl=impl)
                for impl in ("torch", "triton")}
    for runtime in runtimes.values():
        runtime.assign_rows(list(range(rows)), programs + [None])
    ours, ref = runtimes["triton"], runtimes["torch"]
    view = triton_sampling.ConstraintView(
        ours.active, ours.ptr, ours.last_op, ours.op_kind, ours.op_arg, ours.state, ours.accepting,
        ours.token_class_i32, ours.allowed_by_class, chunks_with_moves(ours.transitions, ours.token_class, 256),
        COPY, HOLE)  # fmt: skip
    buffers = {impl: PressureBuffers.allocate(rows, torch.device("cpu")) for impl in runtimes}
    for b in buffers.values():
        b.reset(torch.arange(rows))
    g = torch.Generator().manual_seed(4)
    temperature, seeds = torch.tensor([1.0, 0.0, 0.7, 1.0]), torch.tensor([3, 4, 5, 6])
    live, finished = torch.ones(rows, dtype=torch.bool), torch.zeros(rows, dtype=torch.bool)
    kinds, now = set(), buffers["triton"].now
    for n in range(10):  # the opening copy run, then the first hole's digits
        logits = pressing_logits(rows, vocab, ref, g, torch.bfloat16 if n % 2 else torch.float32)
        expected = torch.tensor([p if p is not None else 0.0 for p in reference_pressure(logits.float(), ref)])
        measured = ref.active & ~finished
        kinds |= {int(ref.op_kind[r, ref.ptr[r]]) for r in range(3) if measured[r]}
        index = torch.full((rows,), n, dtype=torch.int64)
        plain = ours.fused_race(FILTER_NONE)(logits, temperature, seeds, index, None)
        assert torch.equal(ours.fused_race(FILTER_NONE, buffers["triton"])(logits, temperature, seeds, index, None),
                           plain), n
        assert torch.allclose(now[measured], expected[measured], atol=2e-6), n
        small = triton_sampling.constrained_race_argmax(logits, temperature, seeds, index, view, None, block=256,
                                                        pressure=now)
        assert torch.equal(small, plain) and torch.allclose(now[measured], expected[measured], atol=2e-6), n
        masked = logits.clone()
        step_kernels.mask_step(ours, masked, None, buffers["triton"])
        assert torch.equal(masked, step_kernels.mask_step(ours, logits.clone(), None)), n
        assert torch.allclose(now[measured], expected[measured], atol=2e-6), n
        if n in (1, 8):  # prefill lanes (a copy step, a hole step): lane 0 -> row 2, lane 1 -> row 0
            lanes, sub = torch.tensor([2, 0]), logits[[2, 0]].contiguous()
            keep = measured[[2, 0]]
            triton_sampling.constrained_race_argmax(sub, temperature[:2], seeds[:2], index[:2], view, lanes,
                                                    block=256, pressure=now)
            assert torch.allclose(now[:2][keep], expected[[2, 0]][keep], atol=2e-6), n
            step_kernels.mask_step(ours, sub.clone(), lanes, buffers["triton"])
            assert torch.allclose(now[:2][keep], expected[[2, 0]][keep], atol=2e-6), n
            step_kernels.mask_step(ours, logits.clone(), None, buffers["triton"])  # back to this step's lanes
        ref.mask_logits(logits.float(), None, buffers["torch"])
        tokens = ours.emit(plain, live, finished, None, buffers["triton"])
        assert torch.equal(tokens, ref.emit(plain, live, finished, None, buffers["torch"])), n
        assert torch.allclose(buffers["triton"].acc, buffers["torch"].acc, atol=2e-6), n
        assert torch.equal(ours.ptr, ref.ptr) and torch.equal(ours.state, ref.state), n
        finished = finished | (ref.ptr == ref.last_op) & (tokens == programs[0].eos_token_id)
    assert kinds == {COPY, HOLE}
    assert buffers["triton"].acc[:, 1].tolist() == [10.0, 10.0, 10.0, 0.0]  # each step counted, where measured


def _packed_rows(counts: list[int], positions: list[int], slots: list[int], padding: int, scratch: int):
    """A packed step's positions for rows of `counts` consecutive positions from `positions` (forced_runs.py's
    layout), `padding` positions after them in the `scratch` slot."""
    from inferlab.engine.attention import PackedRows

    first = [sum(counts[:r]) for r in range(len(counts))]
    token_positions = [p + j for p, c in zip(positions, counts) for j in range(c)] + [0] * padding
    token_slots = [s for s, c in zip(slots, counts) for _ in range(c)] + [scratch] * padding
    rows = PackedRows(*(torch.tensor(v) for v in (first, counts, positions, slots)), max(counts))
    return rows, torch.tensor(token_positions), torch.tensor(token_slots)


@pytest.mark.parametrize("splits", [1, 3])
# a group of 2 (16 tile rows) and of 4 (32); fp8 at 4 only: the group's tile layout is plain's and gemma's code,
# checked at both, and the fp8 code works per tile row (an fp8 cache at a group of 2: the engine's forced-runs case)
@pytest.mark.parametrize(("variant", "heads", "kv_heads"), [
    *[(v, h, 2) for v in ("plain", "gemma") for h in (4, 8)], ("fp8", 8, 2), ("fp8_gemma", 8, 2),
    ("fp8_gemma_global", 8, 2),
])  # fmt: skip
def test_packed_decode_attention_equals_one_query_at_a_time(splits, heads, kv_heads, variant):
    """fp32. Rows of 1-5 positions (one at a partial last tile, one crossing a tile boundary) and padding in
    a scratch slot: the kernel equals the reference that attends each position on its own after the whole
    step's K/V are written; the K/V written are the reference's; the counters are left at zero; nothing is
    read past a row's last position. fp8: the scales folded in (no window: the one-query kernel's tiles);
    gemma: a window of 40 (global: none), a soft-cap, (1 + w) q/k norms."""
    from inferlab.engine.attention import packed_decode_attention
    from inferlab.engine.kernels import triton_attention, triton_attention_rows

    g = torch.Generator().manual_seed(4)
    head_dim = 32
    tables = RotaryTables.build(RopeSpec(theta=10000.0), head_dim, 256, torch.device("cpu"))
    # row 2: two cached tiles, the second partial, its window starting inside the first; every tile costs the
    # interpreter, so no row has more
    rows, positions, slots = _packed_rows([1, 5, 3, 2], [0, 30, 62, 20], [3, 0, 4, 1], padding=3, scratch=5)
    qkv = torch.randn(positions.shape[0], (heads + 2 * kv_heads) * head_dim, generator=g)
    gemma = "gemma" in variant
    norms = [torch.randn(head_dim, generator=g) for _ in range(2)] if gemma else [None, None]
    extra = dict(window=0 if "global" in variant else 40, softcap=0.5, qk_norm_offset=True) if gemma else {}
    if "fp8" in variant:
        stored = [kv_quant.quantize(torch.randn(6, kv_heads, 100, head_dim, generator=g)) for _ in range(2)]
        caches = [[q.clone() for q, _ in stored], [s.clone() for _, s in stored]]
        refs = [[q.clone() for q, _ in stored], [s.clone() for _, s in stored]]
    else:
        caches = [[torch.randn(6, kv_heads, 100, head_dim, generator=g) for _ in range(2)], None]
        refs = [[c.clone() for c in caches[0]], None]

    def scales(pair):
        return dict(k_scale=pair[1][0], v_scale=pair[1][1]) if pair[1] is not None else {}

    args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
    counters = torch.zeros(6 * kv_heads, dtype=torch.int32)
    config = triton_attention.AttentionConfig(block_n=32)

    def run():
        return triton_attention_rows.decode_packed_attention(
            *args, *caches[0], slots, heads, head_dim**-0.5, counters, rows, config=config, splits=splits,
            **extra, **scales(caches))  # fmt: skip

    ours = run()
    reference = packed_decode_attention(decode_rope_attention_torch)
    ref = reference(*args, *refs[0], slots, heads, head_dim**-0.5, None, rows, **extra, **scales(refs))
    real = positions.shape[0] - 3
    torch.testing.assert_close(ours[:real], ref[:real], atol=2e-5, rtol=2e-5)
    assert not ours[real:].any()  # padding belongs to no row
    for cache, ref_cache in zip(caches[0], refs[0]):  # the rows' slots (the scratch slot's are garbage)
        torch.testing.assert_close(cache[:5].float(), ref_cache[:5].float(), **TOL[torch.float32])
    for scale, ref_scale in zip(caches[1] or (), refs[1] or ()):  # fp8: the scales written beside them
        torch.testing.assert_close(scale[:5], ref_scale[:5], **TOL[torch.float32])
    assert not counters.any()
    caches[0][0][0, :, 35:] = float("nan")  # row 1 (slot 0) ends at 34: nothing past it may be read
    if caches[1] is not None:
        caches[1][0][0, :, 35:] = float("nan")
    again = run()
    torch.testing.assert_close(again[:real], ours[:real], atol=0, rtol=0)


@pytest.mark.parametrize("kv_dtype", ["auto", "fp8"])
def test_engine_forced_runs_on_triton_kernels_match_one_token_per_step(tiny_checkpoint, kv_dtype):
    """The wiring of forced tokens in bulk on the Triton kernels (the rope write of every packed position, the
    packed-rows attention, the Triton constraint runtime beside the booking): two conformers over two rows
    give the tokens and pressure that the torch kernels give one token per step. One atom each (a step of the
    interpreter's packed attention costs seconds): the opening runs book 3 and 4 tokens, [NH4+]'s fifth a step
    later; max_seq_len 48 (the prompt and [NH4+]'s 39 tokens at most) still gives the fp8 attention two splits."""
    from inferlab.constraints.program import compile_program
    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template

    results = {}
    for kernels, forced in (("torch", 0), ("triton", 4)):
        engine = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=2, max_seq_len=48, kernels=kernels,
                                     kv_dtype=kv_dtype, forced_run_tokens=forced, decode_steps_per_sync=1))  # fmt: skip
        requests = []
        for i, smiles in enumerate(("C", "[NH4+]")):
            template = build_template(smiles, get_profile("v3-fixed4"))
            program = compile_program(template.segments, engine.tokenizer)
            requests.append(Request(id=f"m{i}", prompt_ids=(11, 12, 13), constraint=program,
                                    sampling=SamplingParams(temperature=1.0, seed=8 + i)))
        results[kernels] = (engine.generate(requests), engine.stats.decode_steps)
    (ours, our_steps), (ref, ref_steps) = results["triton"], results["torch"]
    assert [r.token_ids for r in ours] == [r.token_ids for r in ref]
    for a, b in zip(ours, ref):
        assert (a.constraint_pressure.steps, a.constraint_pressure.max_step) == (b.constraint_pressure.steps,
                                                                               b.constraint_pressure.max_step)
        assert a.constraint_pressure.mean == pytest.approx(b.constraint_pressure.mean, abs=1e-5)
    assert our_steps < ref_steps


@pytest.mark.parametrize(("dtype", "chunk"), [(torch.float32, 96), (torch.bfloat16, 1000), (torch.float32, 8192)])
def test_the_copy_pressure_in_shares_of_the_vocabulary_equals_the_reference(dtype, chunk):
    """kernels/triton_forced_runs.copy_pressure, the vocabulary split in shares of `chunk` ids and merged
    (11 shares of 1,000 ids at 96, one at 8,192), against constraints/pressure.copy_pressure: a forced token
    the model is sure of (pressure ~0), one it rules out (~1), and random rows."""
    from inferlab.engine.constraints.pressure import copy_pressure
    from inferlab.engine.kernels import triton_forced_runs

    g = torch.Generator().manual_seed(11)
    logits = (torch.randn(6, 1000, generator=g) * 4).to(dtype)
    forced = torch.tensor([3, 999, 500, 0, 517, 95])
    logits[0, 3], logits[1, 999] = 60.0, -60.0
    ours = triton_forced_runs.copy_pressure(logits, forced, chunk=chunk)
    torch.testing.assert_close(ours, copy_pressure(logits, forced), atol=1e-6, rtol=1e-5)
    assert ours[0] < 1e-6 and ours[1] > 1 - 1e-6


def test_forced_runs_kernels_equal_the_torch_booking_and_pressure():
    """kernels/triton_forced_runs.py against ForcedRuns' torch path on real constraint programs: rows at
    different ops of their templates (a hole, a copy run, near the program's end, one idle, one finished, one
    whose max_new leaves no room), more runs than the budget, 300 rows (two blocks of the pack kernel's walk):
    the packed step, the booked outputs, the moved pointers and states, and the pressure accumulated."""
    import copy

    from inferlab.constraints.program import compile_program
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.engine.constraints.pressure import PressureBuffers
    from inferlab.engine.constraints.runtime import ConstraintRuntime
    from inferlab.engine.forced_runs import ForcedRuns
    from inferlab.engine.rows import RowState
    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template

    tokenizer = build_builtin_tokenizer()
    program = compile_program(build_template("CC(=O)N", get_profile("v3-fixed4")).segments, tokenizer)
    b, width = 300, 4
    vocab = len(tokenizer)
    runtime = ConstraintRuntime(grammar_set_for(tokenizer), b, 256, vocab, "cpu", "torch")
    runtime.assign_rows(list(range(b)), [program] * (b - 1) + [None])
    g = torch.Generator().manual_seed(3)
    runtime.ptr[:] = torch.randint(0, program.length, (b,), generator=g)  # every kind of op, the EOS op too
    rows = RowState.allocate(b, 2, 256, torch.device("cpu"))
    rows.active[:] = True
    rows.active[7] = False
    rows.finished[8] = True
    rows.max_new[:] = 200
    rows.n_out[:] = torch.randint(0, 150, (b,), generator=g)
    rows.max_new[9] = rows.n_out[9] + 2  # room for one booked token at most
    rows.positions[:] = torch.randint(5, 40, (b,), generator=g)
    rows.tokens[:] = torch.randint(0, vocab, (b,), generator=g)
    rows.n_stop[:], rows.n_eos[:] = 1, 1
    rows.stop_ids[:] = program.eos_token_id
    slots = torch.randperm(b, generator=g)
    states = {}
    for kind in ("torch", "triton"):
        r, rt = copy.deepcopy(rows), copy.deepcopy(runtime)
        forced = ForcedRuns(width, scratch_slot=b, triton=kind == "triton")
        step = forced.pack(r, slots, rt, measure=True)
        buffers = PressureBuffers.allocate(b, torch.device("cpu"))
        logits = torch.randn(step.bulk.shape[0], vocab, generator=torch.Generator().manual_seed(5))
        forced.measure(step, logits, buffers, rt)
        states[kind] = (step, r, rt, buffers)
    (ours, r1, rt1, buf1), (ref, r0, rt0, buf0) = states["triton"], states["torch"]
    assert ref.booked.sum() == ref.bulk.shape[0] > 0 and (ref.booked == 0).sum() > 0  # the budget was binding
    for name in ("tokens", "positions", "slots", "last", "booked", "offset", "ptr", "bulk", "targets"):
        assert torch.equal(getattr(ours, name), getattr(ref, name)), name
    for a, c in zip(ours.rows[:4], ref.rows[:4]):
        assert torch.equal(a, c)
    for name in ("out", "n_out", "positions"):
        assert torch.equal(getattr(r1, name), getattr(r0, name)), name
    assert torch.equal(rt1.ptr, rt0.ptr) and torch.equal(rt1.state, rt0.state)
    torch.testing.assert_close(buf1.acc, buf0.acc, atol=1e-6, rtol=1e-5)
