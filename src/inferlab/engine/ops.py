"""The set of device operations the forward and the sampler call, chosen once per engine.

Two sets share one signature each: "torch" (plain torch: CPU, tests, a fallback anywhere) and "triton"
(fused Triton kernels, CUDA; or TRITON_INTERPRET=1 on CPU in tests). The engine picks with
EngineConfig.kernels ("auto": triton on CUDA when importable, else torch). The model code never asks
which set it got. On the CPU the torch set takes two ops that read values on the host (free there, and
no graph captures them): the decode attention over views of the KV cache (cpu_attention.py) and the
sampler's race with noise only where it can win (cpu_sampling.py); elsewhere it is the plain reference.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
from dataclasses import dataclass
from typing import Callable

import torch

from inferlab.engine import torch_ops
from inferlab.engine.attention import decode_rope_attention_torch, packed_decode_attention
from inferlab.errors import UnsupportedError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ops:
    name: str
    rms_norm: Callable  # (x [T, D], w [D], eps, unit_offset=False) -> [T, D]
    embed_rms_norm: Callable  # (tokens [T], embed [V, D], w [D], eps, scale=None, unit_offset=False) -> (normed, x)
    add_rms_norm: Callable  # (x, residual, w, eps, unit_offset=False, x_norm=None) -> (normed, residual + x)
    add_steer_rms_norm: Callable  # (x, residual, w, eps, SteerLayer, unit_offset, x_norm) -> add_rms_norm's, steered
    collect_rows: Callable  # (x [n, D], CollectLayer) -> None: see torch_ops.collect_rows
    silu_mul: Callable  # (gate_up [T, 2I]) -> [T, I]
    gelu_tanh_mul: Callable  # (gate_up [T, 2I]) -> [T, I] (Gemma's GeGLU)
    rope_qkv: Callable  # see torch_ops.rope_qkv
    decode_rope_attention: Callable  # see attention.decode_rope_attention_torch
    decode_packed_attention: Callable  # (decode_rope_attention's arguments but max_len_hint, rows: PackedRows)
    filter_threshold: Callable  # see sampler.filter_threshold
    race_argmax: Callable  # see sampler.race_argmax_torch
    top_p_draw: Callable  # see sampler.top_p_by_rejection
    mask_stops: Callable  # see step.mask_stops_before_min
    record: Callable  # see step.record_tokens
    sampling_logits: Callable  # LM head output [B, V] (model dtype) -> what the masks and the sampler read
    needs_len_hint: bool  # True when decode attention's cost depends on a host length bound


def _torch_ops(device: torch.device | None = None) -> Ops:
    from inferlab.engine.sampler import filter_threshold, race_argmax_torch, top_p_by_rejection
    from inferlab.engine.step import mask_stops_before_min, record_tokens

    ops = Ops(
        name="torch",
        rms_norm=torch_ops.rms_norm,
        embed_rms_norm=torch_ops.embed_rms_norm,
        add_rms_norm=torch_ops.add_rms_norm,
        add_steer_rms_norm=torch_ops.add_steer_rms_norm,
        collect_rows=torch_ops.collect_rows,
        silu_mul=torch_ops.silu_mul,
        gelu_tanh_mul=torch_ops.gelu_tanh_mul,
        rope_qkv=torch_ops.rope_qkv,
        decode_rope_attention=decode_rope_attention_torch,
        decode_packed_attention=packed_decode_attention(decode_rope_attention_torch),
        filter_threshold=filter_threshold,
        race_argmax=race_argmax_torch,
        top_p_draw=top_p_by_rejection,
        mask_stops=mask_stops_before_min,
        record=record_tokens,
        sampling_logits=_as_fp32,
        needs_len_hint=True,
    )
    if device is None or device.type != "cpu":  # None: the reference set (tests)
        return ops
    from inferlab.engine.cpu_attention import decode_packed_attention_cpu, decode_rope_attention_cpu
    from inferlab.engine.cpu_sampling import race_argmax_cpu

    return dataclasses.replace(ops, decode_rope_attention=decode_rope_attention_cpu,
                               decode_packed_attention=decode_packed_attention_cpu,
                               race_argmax=race_argmax_cpu)


def _triton_ops(device: torch.device | None = None) -> Ops:
    if importlib.util.find_spec("triton") is None:
        raise UnsupportedError("kernels='triton' needs the triton package; install it or use kernels='torch'")
    from inferlab.engine.kernels import (
        triton_attention,
        triton_attention_rows,
        triton_collect,
        triton_filter,
        triton_norm,
        triton_rope,
        triton_sampling,
        triton_step,
        triton_top_p,
    )

    return Ops(
        name="triton",
        rms_norm=triton_norm.rms_norm,
        embed_rms_norm=triton_norm.embed_rms_norm,
        add_rms_norm=triton_norm.add_rms_norm,
        add_steer_rms_norm=triton_norm.add_steer_rms_norm,
        collect_rows=triton_collect.collect_rows,
        silu_mul=triton_norm.silu_mul,
        gelu_tanh_mul=triton_norm.gelu_tanh_mul,
        rope_qkv=triton_rope.rope_qkv,
        decode_rope_attention=triton_attention.decode_rope_attention,
        decode_packed_attention=triton_attention_rows.decode_packed_attention,
        filter_threshold=triton_filter.filter_threshold,
        race_argmax=triton_sampling.race_argmax,
        top_p_draw=triton_top_p.top_p_by_rejection,
        mask_stops=triton_step.mask_stops_before_min,
        record=triton_step.record_tokens,
        # the kernels read bf16 logits as they come (exact in fp32): no [B, V] fp32 copy per step
        sampling_logits=_unchanged,
        needs_len_hint=False,
    )


def _as_fp32(logits: torch.Tensor) -> torch.Tensor:
    return logits.float()


def _unchanged(logits: torch.Tensor) -> torch.Tensor:
    return logits


OPS_BUILDERS: dict[str, Callable[[torch.device | None], Ops]] = {"torch": _torch_ops, "triton": _triton_ops}


def select_ops(kind: str, device: torch.device) -> Ops:
    """`kind` is "auto", "torch" or "triton"; auto means triton on CUDA when it is installed."""
    if kind == "auto":
        kind = "triton" if device.type == "cuda" and importlib.util.find_spec("triton") is not None else "torch"
    if kind not in OPS_BUILDERS:
        raise UnsupportedError(f"kernels={kind!r} is unknown; use one of auto, {', '.join(OPS_BUILDERS)}")
    if kind == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise UnsupportedError(
            f"kernels='triton' needs a CUDA device (this engine is on {device}); use kernels='torch' or 'auto' "
            "(TRITON_INTERPRET=1 runs the kernels on CPU, for tests only)"
        )
    ops = OPS_BUILDERS[kind](device)
    log.info("engine kernels: %s on %s", ops.name, device)
    return ops
