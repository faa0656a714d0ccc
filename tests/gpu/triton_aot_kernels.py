"""The engine's Triton kernels as the Triton compiler sees them, for test_triton_aot_gpu.py: each kernel with
its argument types, constexpr flags, the 16-divisibility hints the JIT derives for aligned sizes, and its
launch options, at the bf16 shapes the engine launches, their Gemma variants (head_dim 256, windows,
soft-caps, (1 + w) norms, post-norms, GeGLU), steering's, the fp8 KV cache's variants of the rope write
and the decode attention (fp8e4nv: sm_89 and newer; fp16 dots on the e4m3 tiles), the packed decode step's
(forced tokens in bulk: its attention, booking and pressure), and the packed prefill's kernels. A new kernel or constexpr flag gets a case here."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import triton
import triton.language as tl

from inferlab.engine.constraints import step_kernels
from inferlab.engine.kernels import (
    triton_attention,
    triton_attention_rows,
    triton_collect,
    triton_filter,
    triton_forced_runs,
    triton_fp8_rows,
    triton_gemm,
    triton_gemm_wide,
    triton_kv_copy,
    triton_norm,
    triton_rope,
    triton_rope_inplace,
    triton_sampling,
    triton_step,
    triton_top_p,
    triton_varlen_attention,
)


def kernel_cases(full: bool) -> list[tuple[str, object, dict, dict, list[str], dict]]:
    """(name, kernel, signature, constexprs, 16-divisible args, launch options); `full`: every tile and
    config the engine may launch, else one of each (every constexpr variant still compiled)."""
    out = []
    gemm = dict(X="*bf16", W="*bf16", OUT="*bf16", PART="*fp32", COUNTER="*i32", M="i32", N="i32", K="i32",
                stride_xm="i32", stride_wn="i32", stride_om="i32", k_blocks="i32")  # fmt: skip
    aligned = ["X", "W", "OUT", "PART", "N", "K", "stride_xm", "stride_wn", "stride_om"]
    for block_m, block_k in ((16, 256), (16, 128), (64, 128)) if full else ((16, 128),):
        for block_n in (16, 32, 64) if full else (32,):
            for mode in ("plain", "swiglu", "gated", "geglu gated", "geglu down"):
                swiglu, gated = mode in ("swiglu", "geglu down"), mode in ("gated", "geglu gated")
                c = dict(PARTIALS=swiglu, SWIGLU=swiglu, GATED=gated, IEEE=False, BLOCK_M=block_m, BLOCK_N=block_n,
                         BLOCK_K=block_k, GELU_TANH=mode.startswith("geglu"))  # fmt: skip
                name = f"skinny gemm m{block_m} n{block_n} k{block_k} {mode}"
                out.append((name, triton_gemm._skinny_kernel, gemm, c, aligned, dict(num_warps=4, num_stages=4)))
    # the decode attention for the model-dtype cache and the fp8 KV cache (KV_FP8, with fp32 scales)
    for kv in ("bf16", "fp8e4nv"):
        fp8 = kv != "bf16"
        att = {n: "*bf16" for n in "QKV OUT".split()}
        att.update(K_CACHE=f"*{kv}", V_CACHE=f"*{kv}", POS="*i64", SLOT="*i64", COS="*fp32", SIN="*fp32",
                   QNORM="*bf16", KNORM="*bf16", O_PART="*fp32", LSE_PART="*fp32", COUNTER="*i32", K_SCALE="*fp32",
                   V_SCALE="*fp32", scale="fp32", eps="fp32", splits="i32", window="i32", softcap="fp32")  # fmt: skip
        att.update({n: "i32" for n in "stride_t stride_cos stride_ks stride_kh stride_kn stride_ob stride_oh stride_pb "
                    "stride_ph stride_ps stride_lb stride_lh stride_ss stride_sh".split()})  # fmt: skip
        att_aligned = ["QKV", "K_CACHE", "V_CACHE", "OUT", "stride_t", "stride_ks", "stride_kh", "stride_kn",
                       "stride_ss", "stride_sh"]  # fmt: skip
        configs = ((32, 1, 3), (64, 4, 3)) if fp8 else ((64, 4, 3), (128, 4, 2), (32, 8, 4))  # fp8: its default first
        configs = configs if full else configs[:1]
        for heads, kv_heads, head_dim, qk_norm in ((16, 8, 64, False), (16, 8, 128, True)):
            for block_n, warps, stages in configs:
                c = dict(NUM_HEADS=heads, NUM_KV_HEADS=kv_heads, GROUP=heads // kv_heads, BLOCK_H=16,
                         HEAD_DIM=head_dim, HALF_BLOCK=max(16, head_dim // 2), BLOCK_D=head_dim, BLOCK_N=block_n,
                         QK_NORM=qk_norm, IEEE=False, SOFTCAP=False, NORM_OFFSET=False, KV_FP8=fp8,
                         DOT_TY=tl.float16)  # fmt: skip
                out.append((f"rope attention {kv} cache d{head_dim} n{block_n} w{warps} s{stages}",
                            triton_attention._rope_attention_kernel, att, c, att_aligned,
                            dict(num_warps=warps, num_stages=stages)))  # fmt: skip
        # Gemma: gemma-2b (8 heads on 1 kv head, d256), Gemma 2 2B (8 on 4, d256, soft-cap), Gemma 3 1B (4 on 1,
        # d256, (1 + w) q/k norms); the engine's choice for d256 (triton_attention.default_config) and two neighbours
        wide = triton_attention.default_config(256, fp8)
        for name, heads, kv_heads, softcap, qk_norm in (("gemma-2b", 8, 1, False, False),
                                                        ("gemma2-2b", 8, 4, True, False),
                                                        ("gemma3-1b", 4, 1, False, True)):  # fmt: skip
            neighbours = ((64, 8, 2), (32, 4, 2)) if full else ()
            for block_n, warps, stages in ((wide.block_n, wide.num_warps, wide.num_stages), *neighbours):
                c = dict(NUM_HEADS=heads, NUM_KV_HEADS=kv_heads, GROUP=heads // kv_heads, BLOCK_H=16, HEAD_DIM=256,
                         HALF_BLOCK=128, BLOCK_D=256, BLOCK_N=block_n, QK_NORM=qk_norm, IEEE=False, SOFTCAP=softcap,
                         NORM_OFFSET=qk_norm, KV_FP8=fp8, DOT_TY=tl.float16)  # fmt: skip
                out.append((f"rope attention {kv} cache {name} d256 n{block_n} w{warps} s{stages}",
                            triton_attention._rope_attention_kernel, att, c, att_aligned,
                            dict(num_warps=warps, num_stages=stages)))  # fmt: skip
        # the packed decode step's attention (forced tokens in bulk): rows of 1 + 4 positions, GQA groups of 2 and 4,
        # a sliding window (fp8: another cached-keys loop)
        rows_att = {**{k: v for k, v in att.items() if k not in ("stride_ob", "stride_pb", "stride_ph", "stride_ps",
                                                                "stride_lb", "stride_lh")},
                    "FIRST": "*i64", "COUNT": "*i64", "stride_ot": "i32", "rows": "i32", "total": "i32"}
        rows_att.update({n: "i32" for n in "stride_pb stride_pk stride_pi stride_ps stride_lb stride_lk stride_li".split()})
        rows_config = triton_attention_rows.rows_config(128, fp8)
        for heads, kv_heads, head_dim, qk_norm, windowed in ((16, 8, 128, True, False), (16, 4, 64, False, False),
                                                            (16, 8, 128, True, True)):  # fmt: skip
            group = heads // kv_heads
            c = dict(NUM_HEADS=heads, NUM_KV_HEADS=kv_heads, GROUP=group, BLOCK_GROUP=group,
                     BLOCK_Q=max(16, triton.next_power_of_2(5 * group)), BLOCK_C=16, HEAD_DIM=head_dim,
                     HALF_BLOCK=max(16, head_dim // 2), BLOCK_D=head_dim, BLOCK_N=rows_config.block_n, QK_NORM=qk_norm,
                     IEEE=False, SOFTCAP=False, NORM_OFFSET=False, WINDOWED=windowed, KV_FP8=fp8,
                     DOT_TY=tl.float16)  # fmt: skip
            out.append((f"packed rows attention {kv} cache d{head_dim} group {group}{' windowed' if windowed else ''}",
                        triton_attention_rows._rows_attention_kernel, rows_att, c, att_aligned,
                        dict(num_warps=rows_config.num_warps, num_stages=rows_config.num_stages)))  # fmt: skip
        rope = dict(QKV="*bf16", POS="*i64", SLOT="*i64", COS="*fp32", SIN="*fp32", QNORM="*bf16", KNORM="*bf16",
                    Q_OUT="*bf16", K_OUT="*bf16", V_OUT="*bf16", K_CACHE=f"*{kv}", V_CACHE=f"*{kv}", K_SCALE="*fp32",
                    V_SCALE="*fp32", eps="fp32")  # fmt: skip
        rope.update({n: "i32" for n in "stride_t stride_cos stride_qo_t stride_qo_h stride_ko_t stride_ko_h stride_cs "
                     "stride_ch stride_cn stride_ss stride_sh".split()})  # fmt: skip
        for heads, head_dim, qk_norm, offset in ((16, 64, False, False), (16, 128, True, False), (4, 256, True, True)):
            c = dict(NUM_HEADS=heads, HEAD_DIM=head_dim, HALF_BLOCK=head_dim // 2, QK_NORM=qk_norm, RETURN_KV=True,
                     KV_FP8=fp8, NORM_OFFSET=offset)  # fmt: skip
            out.append((f"rope + kv write {kv} cache d{head_dim} qk_norm={qk_norm} offset={offset}",
                        triton_rope._rope_qkv_kernel, rope, c,
                        ["QKV", "K_CACHE", "V_CACHE", "stride_t", "stride_cs", "stride_ch", "stride_cn"], {}))
    norm = dict(X="*bf16", R="*bf16", W="*bf16", WX="*bf16", OUT="*bf16", RES_OUT="*bf16", VEC="*bf16", SLOT="*i32",
                SCALE="*fp32", TOKEN_ROWS="*i64", stride_x="i32", stride_r="i32", stride_o="i32", stride_ro="i32",
                stride_v="i32", stride_slot="i32", stride_scale="i32", dim="i32", eps="fp32")  # fmt: skip
    # (residual, steer, prefill row map, Gemma (1 + w), Gemma 2/3 post-norm of x)
    for residual, steer, row_map, offset, norm_x in (
        (False, False, False, False, False), (True, False, False, False, False), (True, True, False, False, False),
        (True, True, True, False, False), (False, False, False, True, False), (True, False, False, True, False),
        (True, False, False, True, True), (True, True, False, True, True), (True, True, True, True, True),
    ):  # fmt: skip
        c = dict(HAS_RESIDUAL=residual, NORM_X=norm_x, UNIT_OFFSET=offset, STEER=steer, HAS_ROW_MAP=row_map,
                 BLOCK=2048)  # fmt: skip
        name = (f"{'add + ' if residual else ''}{'steer + ' if steer else ''}rms norm"
                f"{' (prefill rows)' if row_map else ''}{' (1+w)' if offset else ''}{' post-norm x' if norm_x else ''}")
        out.append((name, triton_norm._rms_norm_kernel, norm, c, [], {}))
    for gelu in (False, True):
        out.append((f"gated activation product gelu_tanh={gelu}", triton_norm._act_mul_kernel,
                    dict(GU="*bf16", OUT="*bf16", stride_gu="i32", stride_o="i32", inter="i32"),
                    dict(GELU_TANH=gelu, BLOCK=1024), [], {}))  # fmt: skip
    f = {n: "*fp32" for n in "LOGITS PMAX HIST PREFIX ACC TARGET HIST_K PREFIX_K ACC_K TEMP TOP_K TOP_P".split()}
    f.update(LOGITS="*bf16", PREFIX="*i32", PREFIX_K="*i32", TOP_K="*i64", stride="i32", vocab="i32", span="i32",
             rows="i32", chunks="i32", level="i32", pmax_cols="i32")  # fmt: skip
    for mass, has_k in ((False, True), (True, False), (True, True)):
        c = dict(MASS=mass, HAS_TOP_K=has_k, KEY_BITS=16, MAX_CHUNKS=64, BLOCK=256)
        name = f"filter pass {'mass' if mass else 'count'}{' after top-k' if mass and has_k else ''}"
        out.append((name, triton_filter._pass_kernel, f, c, ["LOGITS", "stride", "span"], dict(num_warps=8)))
    out.append(("filter max", triton_filter._max_kernel,
                dict(LOGITS="*bf16", PMAX="*fp32", stride="i32", vocab="i32", span="i32", chunks="i32"),
                dict(BLOCK=1024), ["LOGITS", "stride", "span"], {}))  # fmt: skip
    fin = {
        n: "*fp32" for n in "TAU PMAX TEMP TOP_K TOP_P MIN_P HIST_K PREFIX_K ACC_K HIST_P PREFIX_P ACC_P TARGET".split()
    }
    fin.update(TAU="*i32", TOP_K="*i64", PREFIX_K="*i32", PREFIX_P="*i32", vocab="i32", rows="i32", chunks="i32",
               pmax_cols="i32")
    for do_top, has_k in ((False, False), (True, False), (True, True)):
        c = dict(DO_TOP=do_top, HAS_TOP_K=has_k, KEY_BITS=16, MAX_CHUNKS=64)
        out.append((f"filter finish top={do_top} k={has_k}", triton_filter._finish_kernel, fin, c, [], {}))
    race = dict(LOGITS="*bf16", TEMP="*fp32", TAU="*i32", SEEDS="*i64", INDEX="*i64", SKIP="*i8", BEST_VAL="*fp32",
                BEST_IDX="*i32", CHUNK_MAX="*fp32", CHUNK_MASS="*fp32", stride_l="i32", vocab="i32")  # fmt: skip
    for tau, round_index, skip, stats, span in ((False, 0, False, False, 1), (True, 0, False, False, 1),
                                                (True, 2, True, False, 4), (False, 0, True, True, 1)):  # fmt: skip
        c = dict(CHUNKS=38 // span + 1, BLOCK=4096, SPAN=span, HAS_TAU=tau, ROUND=round_index, HAS_SKIP=skip,
                 STATS=stats, FAST_LOG=True)
        out.append((f"race tau={tau} round={round_index} skip={skip} stats={stats} span={span}",
                    triton_sampling._race_kernel, race, c, ["LOGITS", "stride_l", "vocab"], dict(num_warps=4)))
    for done, pressure in ((False, False), (True, False), (False, True)):
        out.append((f"race pick done={done} pressure={pressure}", triton_sampling._pick_kernel,
                    dict(BEST_VAL="*fp32", BEST_IDX="*i32", OUT="*i64", DONE="*i8", TOKENS="*i64", CHUNK_MAX="*fp32",
                         CHUNK_ALL="*fp32", CHUNK_OFF="*fp32", PRESSURE_NOW="*fp32"),
                    dict(CHUNKS=38, BLOCK_C=64, HAS_DONE=done, PRESSURE=pressure), [], {}))  # fmt: skip
    for done, span in ((False, 1), (True, 4)):
        out.append((f"top-p mass done={done} span={span}", triton_top_p._mass_kernel,
                    dict(LOGITS="*bf16", TEMP="*fp32", TOP_P="*fp32", BEST_VAL="*fp32", BEST_IDX="*i32", DONE="*i8",
                         CHUNK_MAX="*fp32", ABOVE="*fp32", stride_l="i32", vocab="i32"),
                    dict(RACE_PARTS=38 // span + 1, BLOCKS=38, PARTS=38 // span + 1, BLOCK=4096, SPAN=span, BLOCK_C=64,
                         HAS_DONE=done), ["LOGITS", "stride_l", "vocab"], dict(num_warps=4)))  # fmt: skip
    for first, last, skip in ((True, False, True), (False, True, False)):
        out.append((f"top-p round first={first} last={last} skip={skip}", triton_top_p._round_kernel,
                    dict(LOGITS="*bf16", TEMP="*fp32", TOP_P="*fp32", MIN_P="*fp32", BEST_VAL="*fp32", BEST_IDX="*i32",
                         ABOVE="*fp32", CHUNK_MAX="*fp32", CHUNK_MASS="*fp32", ROW_TOTAL="*fp32", FLOOR="*i32",
                         PIVOT="*i32", DONE="*i8", TOKENS="*i64", SKIP="*i8", OPEN_P="*fp32", stride_l="i32"),
                    dict(RACE_PARTS=38, BLOCKS=38, PARTS=38, BLOCK_C=64, FIRST=first, LAST=last, HAS_SKIP=skip), [],
                    {}))  # fmt: skip
    collect = dict(X="*bf16", ROWS="*i64", ACTIVE="*i1", FINISHED="*i1", N_OUT="*i64", MODE="*i32", ACC="*fp32",
                   ALL="*bf16", stride_x="i32", stride_acc="i32", stride_all_row="i32", stride_all_col="i32", cap="i32",
                   dim="i32")  # fmt: skip
    for has_rows, has_all in ((False, False), (False, True), (True, True)):
        c = dict(HAS_ROWS=has_rows, HAS_ALL=has_all, LAST=1, MEAN=2, EVERY=3, BLOCK=2048)
        out.append((f"collect rows={has_rows} all={has_all}", triton_collect._collect_kernel, collect, c, [], {}))
    for gemma in (False, True):
        out.append((f"embedding + rms norm{' (Gemma: scaled, 1 + w)' if gemma else ''}",
                    triton_norm._embed_rms_norm_kernel,
                    dict(TOK="*i64", E="*bf16", W="*bf16", OUT="*bf16", X="*bf16", stride_e="i32", stride_o="i32",
                         stride_x="i32", dim="i32", eps="fp32", scale="fp32"),
                    dict(HAS_SCALE=gemma, UNIT_OFFSET=gemma, BLOCK=2048 if gemma else 1024), [], {}))  # fmt: skip
    out.append(("stop mask (bf16 logits)", triton_step._mask_stops_kernel,
                dict(LOGITS="*bf16", N_OUT="*i64", MIN_NEW="*i64", N_STOP="*i64", STOP="*i64", stride_l="i32"),
                dict(STOPS=8, BLOCK_S=8), [], {}))  # fmt: skip
    rt = dict(ROWS="*i64", ACTIVE="*i1", PTR="*i64", LAST="*i64", KIND="*i64", ARG="*i64", op_stride="i32",
              STATE="*i64", ACCEPTING="*i1")  # fmt: skip
    shares = dict(CHUNK_MAX="*fp32", CHUNK_ALL="*fp32", CHUNK_OFF="*fp32")  # constraint pressure's block shares
    mask = dict(LOGITS="*bf16", row_stride="i32", vocab="i32") | rt | dict(TOKEN_CLASS="*i32", ALLOWED="*i8",
                                                                          num_classes="i32", FORCED="*i8") | shares
    for pressure in (False, True):
        out.append((f"constraint mask step (bf16) pressure={pressure}", step_kernels._mask_step_kernel, mask,
                    dict(HAS_ROWS=False, HOLE_KIND=2, COPY_KIND=1, BLOCK_SIZE=1024, PRESSURE=pressure), [], {}))
    out.append(("constraint pressure of the mask's blocks", step_kernels._pressure_kernel, shares | dict(NOW="*fp32"),
                dict(CHUNKS=149, BLOCK_C=256), [], {}))  # fmt: skip
    fused = (dict(LOGITS="*bf16", stride_l="i32", vocab="i32", TEMP="*fp32", SEEDS="*i64", INDEX="*i64",
                  BEST_VAL="*fp32", BEST_IDX="*i32") | rt | dict(TOKEN_CLASS="*i32", ALLOWED="*i8", num_classes="i32",
                                                                CHUNK_ALLOWED="*i8") | shares)
    for has_rows, pressure in ((False, False), (True, False), (False, True), (True, True)):
        c = dict(CHUNKS=38, BLOCK=4096, HAS_ROWS=has_rows, HOLE_KIND=2, COPY_KIND=1, FAST_LOG=True, PRESSURE=pressure)
        out.append((f"constrained race rows={has_rows} pressure={pressure}", triton_sampling._constrained_race_kernel,
                    fused, c, ["LOGITS", "stride_l"], dict(num_warps=8)))  # fmt: skip
    # bf16 and fp8 caches and the fp8 cache's fp32 scales, copied as bits; Gemma's MQA (one kv head)
    for bits, kv_heads in (("*i16", 8), ("*u8", 8), ("*i32", 8), ("*i16", 1), ("*u8", 1)):
        out.append((f"KV prefix copy {bits} kv_heads={kv_heads}", triton_kv_copy._copy_prefix_kernel,
                    dict(K=bits, V=bits, SRC="*i64", DST="*i64", layer_stride="i64", slot_stride="i64",
                         head_stride="i64", elems="i32"), dict(KV_HEADS=kv_heads, BLOCK_SIZE=1024), ["K", "V"], {}))
    emit = (
        dict(SAMPLED="*i64", TOKENS="*i64", ROW_ACTIVE="*i1", ROW_FINISHED="*i1")
        | rt
        | dict(TRANSITIONS="*i64", num_classes="i32", TOKEN_CLASS="*i64", lanes="i32", NOW="*fp32", ACC="*fp32")
    )
    for has_rows, pressure in ((False, False), (True, False), (False, True), (True, True)):
        c = dict(HAS_ROWS=has_rows, COPY_KIND=1, HOLE_KIND=2, BLOCK_ROWS=256, PRESSURE=pressure)
        out.append((f"constraint emit step rows={has_rows} pressure={pressure}", step_kernels._emit_step_kernel,
                    emit, c, [], {}))
    out += packed_prefill_kernels(full)
    return out


def packed_prefill_kernels(full: bool) -> list[tuple[str, object, dict, dict, list[str], dict]]:
    """The packed prefill's (engine/packed): varlen attention at each head size's config (windows, soft-caps;
    `full`: the alternative config too), the in-place rope, the FP8 row quantization."""
    out = []
    att = dict(Q="*bf16", K="*bf16", V="*bf16", O="*bf16", CU="*i32", scale="fp32", softcap="fp32", window="i32")
    att.update({n: "i32" for n in "stride_qt stride_qh stride_kt stride_kh stride_vt stride_vh stride_ot "
                "stride_oh".split()})  # fmt: skip
    aligned = ["Q", "K", "V", "O", "stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh",
               "stride_ot", "stride_oh"]  # fmt: skip
    for name, heads, kv_heads, head_dim in (("qwen2-0.5b", 14, 2, 64), ("qwen3", 16, 8, 128), ("gemma-2b", 8, 1, 256)):
        for alternative in (False, True) if full else (False,):
            block_m, block_n, warps, stages = triton_varlen_attention._config(head_dim, alternative)
            for window, softcap in ((False, False), (True, False), (False, True), (True, True)):
                c = dict(GROUP=heads // kv_heads, HEAD_DIM=head_dim, BLOCK_D=head_dim, BLOCK_M=block_m,
                         BLOCK_N=block_n, SOFTCAP=softcap, WINDOW=window, IEEE=False)  # fmt: skip
                out.append((f"varlen attention {name} d{head_dim} w{warps} window={window} softcap={softcap}",
                            triton_varlen_attention._varlen_attention_kernel, att, c, aligned,
                            dict(num_warps=warps, num_stages=stages)))  # fmt: skip
    rope = dict(QKV="*bf16", POS="*i64", COS="*fp32", SIN="*fp32", QNORM="*bf16", KNORM="*bf16", stride_t="i32",
                stride_cos="i32", eps="fp32")  # fmt: skip
    for heads, head_dim, qk_norm, offset in ((14, 64, False, False), (16, 128, True, False), (4, 256, True, True)):
        c = dict(NUM_HEADS=heads, HEAD_DIM=head_dim, HALF_BLOCK=head_dim // 2, QK_NORM=qk_norm, NORM_OFFSET=offset)
        out.append((f"rope in place d{head_dim} qk_norm={qk_norm} offset={offset}",
                    triton_rope_inplace._rope_inplace_kernel, rope, c, ["QKV", "stride_t"], {}))
    wide = dict(X="*bf16", W="*bf16", OUT="*bf16", M="i32", N="i32", K="i32", stride_xm="i32", stride_wn="i32",
                stride_om="i32")  # fmt: skip
    for config in triton_gemm_wide.CANDIDATES if full else triton_gemm_wide.CANDIDATES[:1]:
        for gelu in (False, True):
            c = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
                     GELU_TANH=gelu, IEEE=False)  # fmt: skip
            out.append((f"wide gated gemm {config} {'geglu' if gelu else 'swiglu'}", triton_gemm_wide._wide_gated_kernel,
                        wide, c, ["X", "W", "OUT", "N", "K", "stride_xm", "stride_wn", "stride_om"],
                        dict(num_warps=config.num_warps, num_stages=config.num_stages)))  # fmt: skip
    quant = dict(X="*bf16", Q="*fp8e4nv", S="*fp32", stride_x="i32", stride_q="i32", dim="i32")
    for block in (1024, 4096):
        out.append((f"fp8 row quantization block {block}", triton_fp8_rows._quantize_rows_kernel, quant,
                    dict(BLOCK=block), ["X", "Q", "stride_x", "stride_q"], dict(num_warps=8 if block >= 2048 else 4)))
    # forced tokens in bulk: the booking + packing walk, the copy pressure, its accumulation
    pack = {n: "*i64" for n in ("TOKENS POSITIONS N_OUT MAX_NEW STOP N_STOP OUT SLOTS PTR LAST KIND ARG STATE P_TOKENS "
                                "P_POSITIONS P_SLOTS FIRST COUNT START LAST_AT BOOKED OFFSET PTR0 FORCED BULK "
                                "TARGETS").split()}
    pack.update(ACTIVE="*i1", FINISHED="*i1", RT_ACTIVE="*i1", rows="i32", budget="i32", total="i32",
                scratch_slot="i32", op_stride="i32", out_stride="i32", out_cap="i32")  # fmt: skip
    for measure in (True, False):
        c = dict(WIDTH=4, STOPS=8, BLOCK=256, MEASURE=measure, COPY_KIND=1, HOLE_KIND=2, DEAD=0)
        out.append((f"forced runs pack measure={measure}", triton_forced_runs._pack_kernel, pack, c, [], {}))
    out.append(("forced runs copy pressure shares", triton_forced_runs._copy_pressure_part_kernel,
                dict(LOGITS="*bf16", TARGET="*i64", PART="*fp32", stride_l="i32", vocab="i32", chunk="i32",
                     splits="i32"), dict(BLOCK_V=triton_forced_runs.BLOCK_V), [], {}))  # fmt: skip
    out.append(("forced runs copy pressure merge", triton_forced_runs._copy_pressure_merge_kernel,
                dict(PART="*fp32", OUT="*fp32", splits="i32"), dict(BLOCK_S=32), [], {}))  # fmt: skip
    out.append(("forced runs accumulate", triton_forced_runs._accumulate_kernel,
                dict(VALUES="*fp32", BOOKED="*i64", OFFSET="*i64", PTR0="*i64", RT_ACTIVE="*i1", ACC="*fp32", rows="i32"),
                dict(WIDTH=4, BLOCK=256), [], {}))  # fmt: skip
    return out


def ptxas_report(ptx: str, arch: int) -> str:
    """Registers / spills from a ptxas that accepts this PTX version (the wheel ships two)."""
    folder = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        for exe in ("ptxas-blackwell", "ptxas"):
            path = folder / exe
            if not path.exists():
                continue
            done = subprocess.run([str(path), f"-arch=sm_{arch}a", "-v", str(source), "-o", os.devnull],
                                  capture_output=True, text=True)  # fmt: skip
            if done.returncode == 0:
                regs = re.findall(r"Used (\d+) registers", done.stderr)
                spill = re.findall(r"(\d+) bytes spill stores", done.stderr)
                return f"registers {regs[0] if regs else '?'}, spill stores {spill[0] if spill else '?'} B"
    return "ptxas -v unavailable"


def compile_case(case: tuple, arch: int) -> str:
    """Triton's real NVIDIA pipeline (TTIR -> TTGIR -> LLVM -> PTX -> cubin) for one case; its registers,
    spills and shared memory. Raises the compiler's error (the finding)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    name, kernel, signature, constexprs, aligned, options = case
    arguments = dict(signature) | {k: "constexpr" for k in constexprs}
    assert set(arguments) == set(kernel.arg_names), (name, set(arguments) ^ set(kernel.arg_names))
    # hints by the kernel's own argument positions (the signature dicts are not in argument order)
    attrs = {(kernel.arg_names.index(a),): [["tt.divisibility", 16]] for a in aligned}
    compiled = triton.compile(ASTSource(kernel, arguments, constexprs, attrs), target=GPUTarget("cuda", arch, 32),
                              options=options)
    return f"{ptxas_report(compiled.asm['ptx'], arch)}, shared {getattr(compiled.metadata, 'shared', '?')} B"
