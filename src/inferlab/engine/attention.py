"""Attention over the static KV cache: decode (one query per row) and prefill (right-padded prompts).

Decode attends each row's query to its own cache slot up to that row's real length, starting from the qkv
projection (rope and the cache write included). The fused Triton kernel (kernels/triton_attention.py)
runs on CUDA; `decode_rope_attention_torch` here is the CPU path and the test reference. The torch version
bounds its work by `max_len_hint` (a host bound of the live lengths) when given; inside a CUDA graph no host
value may change between replays, so there it reads the whole cache with a mask. With an FP8 cache
(kv_quant.py) the reference dequantizes what it reads; the Triton kernel folds the scales into the scores.

Prefill runs causal SDPA over right-padded prompts: pads come last, so the causal mask alone keeps real
tokens from seeing them and no attention mask is needed. `PrefillAttention` chooses the SDPA backend once,
eagerly, at the engine's first prefill (a CUDA-graph capture must never see an exception): FlashAttention
with native grouped-query heads (`enable_gqa`: no K/V expansion), never cuDNN (it builds an execution plan
per new shape, so every new (batch, length) pays a slow first call); failing that, expanded K/V on the
flash or memory-efficient kernels, else SDPA's own choice.

Gemma 2/3 add a per-layer sliding window (a query at p sees max(0, p + 1 - window) .. p; 0 = none) and
soft-capped scores (cap * tanh(scores / cap)). SDPA has neither, so a layer whose window cuts into the
padded prompt, or whose scores are soft-capped, runs `windowed_attention`: blocks of queries against only
the keys their window reaches, in fp32, with block sizes fixed by the shapes and no host sync, so prefill
graphs capture it as they capture SDPA.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import NamedTuple

import torch
import torch.nn.functional as F

from inferlab.engine import torch_ops

log = logging.getLogger(__name__)


def decode_attention_torch(
    q: torch.Tensor,  # [rows, heads, head_dim]
    k_cache: torch.Tensor,  # [slots, kv_heads, max_len, head_dim] (one layer)
    v_cache: torch.Tensor,  # [slots, kv_heads, max_len, head_dim]
    slots: torch.Tensor,  # [rows] int64: the cache slot of each row
    lengths: torch.Tensor,  # [rows] int64: valid positions per row (>= 1), the current token included
    scale: float,
    max_len_hint: int | None = None,  # upper bound of `lengths` known on the host (None: whole cache)
    window: int = 0,  # positions a query sees, itself included (0: all)
    softcap: float | None = None,  # scores -> softcap * tanh(scores / softcap)
    k_scale: torch.Tensor | None = None,  # [slots, kv_heads, max_len] fp32 when the cache is fp8
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:  # [rows, heads, head_dim], q's dtype
    rows, heads, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    group = heads // kv_heads
    span = k_cache.shape[2] if max_len_hint is None else min(max_len_hint, k_cache.shape[2])
    k = k_cache[slots, :, :span].float()  # [rows, kv_heads, span, head_dim]
    v = v_cache[slots, :, :span].float()
    if k_scale is not None:
        k = k * k_scale[slots, :, :span, None]
        v = v * v_scale[slots, :, :span, None]
    qg = q.float().view(rows, kv_heads, group, head_dim)  # the query heads that share one kv head
    scores = torch.einsum("bkgd,bksd->bkgs", qg, k) * scale  # [rows, kv_heads, group, span]
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    at = torch.arange(span, device=q.device)[None, :]
    live = at < lengths[:, None]  # [rows, span]
    if window:
        live &= at >= lengths[:, None] - window
    scores = scores.masked_fill(~live[:, None, None, :], float("-inf"))
    probs = scores.softmax(dim=-1)
    out = torch.einsum("bkgs,bksd->bkgd", probs, v)  # [rows, kv_heads, group, head_dim]
    return out.reshape(rows, heads, head_dim).to(q.dtype)


def decode_rope_attention_torch(
    qkv: torch.Tensor,  # [rows, (heads + 2 * kv_heads) * head_dim]
    positions: torch.Tensor,  # [rows] int64: each new token's position (its K/V is written there)
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,  # [slots, kv_heads, max_len, head_dim] (one layer), written at (slot, position)
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # [rows] int64
    num_heads: int,
    scale: float,
    counters: torch.Tensor | None = None,  # unused here (the Triton kernel's merge counters)
    max_len_hint: int | None = None,
    *,
    window: int = 0,  # this layer's sliding window (0: none)
    softcap: float | None = None,  # Gemma 2's attention logit soft-cap
    qk_norm_offset: bool = False,  # Gemma 3: q/k norms scale by (1 + w)
    k_scale: torch.Tensor | None = None,  # [slots, kv_heads, max_len] fp32 when the cache is fp8
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:  # [rows, heads, head_dim]
    """The decode step's attention from the qkv projection: rope (and q/k norm), cache write, attention.
    The reference of the fused Triton kernel (kernels/triton_attention.py). With an fp8 cache the new
    position is attended to as the cache holds it (quantized), like every later step will see it."""
    q, _, _ = torch_ops.rope_qkv(
        qkv, positions, cos, sin, q_norm, k_norm, eps, k_cache, v_cache, slots, num_heads, return_kv=False,
        k_scale=k_scale, v_scale=v_scale, qk_norm_offset=qk_norm_offset,
    )  # fmt: skip
    return decode_attention_torch(
        q, k_cache, v_cache, slots, positions + 1, scale, max_len_hint, window, softcap, k_scale, v_scale
    )


class PackedRows(NamedTuple):
    """Where each row's query positions sit in a packed decode step (forced_runs.py): rows [0, b), each with
    `count` consecutive positions from packed index `first`, the first of them at `position` of `slot`."""

    first: torch.Tensor  # [b] int64
    count: torch.Tensor  # [b] int64 (>= 1)
    position: torch.Tensor  # [b] int64
    slot: torch.Tensor  # [b] int64
    most: int  # the most positions a row may have (1 + forced_run_tokens)


def packed_decode_attention(decode_rope_attention):
    """The packed decode step's attention (positions [T] of rows laid out as PackedRows) from a one-query
    decode_rope_attention: every position is a query of its own, its K/V written before any is read (rope
    and the cache write of the whole step first), so a row's positions see each other causally. The torch
    sets' (the CPU's, the reference); the Triton kernel reads each row's K/V once for all its queries."""

    def attention(qkv, positions, cos, sin, q_norm, k_norm, eps, k_cache, v_cache, slots, num_heads, scale,
                  counters, rows: PackedRows, **kwargs):  # fmt: skip
        return decode_rope_attention(qkv, positions, cos, sin, q_norm, k_norm, eps, k_cache, v_cache, slots,
                                     num_heads, scale, counters, None, **kwargs)

    return attention


def prefill_attention(
    q: torch.Tensor,  # [batch, heads, padded_len, head_dim]
    k: torch.Tensor,  # [batch, kv_heads, padded_len, head_dim]
    v: torch.Tensor,  # [batch, kv_heads, padded_len, head_dim]
    scale: float,
    native_gqa: bool = True,  # False: expand K/V to the query heads first
) -> torch.Tensor:  # [batch, heads, padded_len, head_dim]
    """Causal self-attention over right-padded prompts (pads come last, so nothing real attends to them)."""
    group = q.shape[1] // k.shape[1]
    if group > 1 and not native_gqa:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=group > 1 and native_gqa)


def needs_windowed(length: int, window: int, softcap: float | None) -> bool:
    """Whether a layer's prefill over `length` padded positions needs windowed_attention (SDPA would be wrong:
    the window cuts into the prompt, or the scores are soft-capped)."""
    return bool(window and window < length) or softcap is not None


EAGER_SCORE_ELEMENTS = 2**24  # fp32 scores per block of windowed_attention (64 MB; a few such temporaries)


def windowed_attention(
    q: torch.Tensor,  # [batch, heads, length, head_dim]
    k: torch.Tensor,  # [batch, kv_heads, length, head_dim] (expanded here to the query heads)
    v: torch.Tensor,
    scale: float,
    window: int,  # 0: causal over everything before
    softcap: float | None,
) -> torch.Tensor:  # [batch, heads, length, head_dim], q's dtype
    """Causal attention with a sliding window and/or soft-capped scores, as transformers' eager path computes
    it (scores * scale, soft-cap, mask, softmax in fp32), by blocks of queries: each block [s, e) reads only
    keys [max(0, s + 1 - window), e), so work and memory follow the window instead of length^2. Block sizes
    come from the shapes alone and nothing reads a device value on the host: capturable in a CUDA graph."""
    batch, heads, length, head_dim = q.shape
    group = heads // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    span_of = (lambda rows: rows + window - 1) if window else (lambda rows: length)
    rows = max(1, min(length, window or length))
    while rows > 1 and batch * heads * rows * min(length, span_of(rows)) > EAGER_SCORE_ELEMENTS:
        rows //= 2
    out = torch.empty_like(q)
    for start in range(0, length, rows):
        end = min(start + rows, length)
        lo = max(0, start + 1 - window) if window else 0
        scores = torch.einsum("bhqd,bhkd->bhqk", q[:, :, start:end].float(), k[:, :, lo:end].float()) * scale
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        qpos = torch.arange(start, end, device=q.device)[:, None]
        kpos = torch.arange(lo, end, device=q.device)[None, :]
        visible = kpos <= qpos
        if window:
            visible &= kpos > qpos - window
        probs = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)  # [batch, heads, rows, span]
        out[:, :, start:end] = torch.einsum("bhqk,bhkd->bhqd", probs, v[:, :, lo:end].float()).to(q.dtype)
    return out


class PrefillAttention:
    """A model's prefill attention: windowed_attention where a layer needs it (needs_windowed), else
    prefill_attention with the SDPA backends and GQA handling chosen once per engine (module docstring)."""

    def __init__(self, device: torch.device) -> None:
        from torch.nn.attention import SDPBackend

        flash, efficient = SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION
        # (name, native GQA, backends or None for SDPA's own choice), best first
        self.candidates = (
            [("flash, native GQA", True, [flash]), ("flash / efficient, K/V expanded", False, [flash, efficient]),
             ("SDPA's choice, K/V expanded", False, None)]
            if device.type == "cuda" else [("native GQA", True, None), ("K/V expanded", False, None)]
        )  # fmt: skip
        self.chosen: tuple[str, bool, list | None] | None = None

    def __call__(
        self,
        q: torch.Tensor,  # [batch, heads, padded_len, head_dim]
        k: torch.Tensor,  # [batch, kv_heads, padded_len, head_dim]
        v: torch.Tensor,
        scale: float,
        window: int = 0,  # this layer's sliding window (0: none)
        softcap: float | None = None,  # Gemma 2's attention logit soft-cap
    ) -> torch.Tensor:  # [batch, heads, padded_len, head_dim]
        if needs_windowed(q.shape[2], window, softcap):
            return windowed_attention(q, k, v, scale, window, softcap)
        if self.chosen is not None:
            return self._run(self.chosen, q, k, v, scale)
        for candidate in self.candidates:
            try:
                out = self._run(candidate, q, k, v, scale)
            except RuntimeError as e:  # "No available kernel", an unsupported head size or dtype
                log.info("prefill attention: %s unavailable (%s)", candidate[0], str(e).splitlines()[0][:200])
                continue
            self.chosen = candidate
            log.info("prefill attention: %s", candidate[0])
            return out
        raise RuntimeError("no SDPA backend accepted the prefill's attention inputs")

    @staticmethod
    def _run(candidate, q, k, v, scale) -> torch.Tensor:
        from torch.nn.attention import sdpa_kernel

        _, native_gqa, backends = candidate
        with sdpa_kernel(backends) if backends is not None else nullcontext():
            return prefill_attention(q, k, v, scale, native_gqa)
