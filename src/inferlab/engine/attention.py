"""Attention over the static KV cache: decode (one query per row) and prefill (right-padded prompts).

Decode attends each row's query to its own cache slot up to that row's real length. Two implementations
share one signature, both starting from the qkv projection (rope and the cache write included): the fused
Triton flash-decoding kernel (engine/kernels/triton_attention.py, used on CUDA) and
`decode_rope_attention_torch` below (torch_ops.rope_qkv + `decode_attention_torch`), used on CPU and as the
reference in tests. The torch version bounds the
work by `max_len_hint` (the host's upper bound of the live lengths) when it is given, so on CPU the cost
follows the live length; inside a CUDA graph no host value may change between replays, so there it reads
the whole preallocated length with a mask (correct, but slower: that is why the Triton kernel exists).
With an FP8 cache (engine/kv_quant.py) the reference dequantizes what it reads (value x its position's
scale, in fp32); the Triton kernel folds the scales into the scores and the probabilities instead.

Prefill runs causal SDPA over prompts right-padded to the batch maximum: with right padding the causal mask
alone keeps every real token from seeing a pad, so no attention mask is needed (which keeps SDPA on its
fastest kernels). `PrefillAttention` decides once, at the engine's first (warm-up) prefill, how: on CUDA
FlashAttention with grouped-query heads natively (`enable_gqa`: no K/V expansion, which cost 57 copy
kernels and 13% of a prefill's GPU time on an H100) and never cuDNN, whose per-shape execution plans made
the first prefill of every new (batch, length) shape slow (13.6 s of prefill in a job's first call against
2.8 s in its second, H100); if FlashAttention refuses the inputs (fp32, an unusual head size), K/V are
expanded and the flash or memory-efficient kernels used, else SDPA's own choice. The probe happens eagerly
before any CUDA-graph capture, which must never see an exception.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext

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
    live = torch.arange(span, device=q.device)[None, :] < lengths[:, None]  # [rows, span]
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
    k_scale: torch.Tensor | None = None,  # [slots, kv_heads, max_len] fp32 when the cache is fp8
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:  # [rows, heads, head_dim]
    """The decode step's attention from the qkv projection: rope (and q/k norm), cache write, attention.
    The reference of the fused Triton kernel (kernels/triton_attention.py). With an fp8 cache the new
    position is attended to as the cache holds it (quantized), like every later step will see it."""
    q, _, _ = torch_ops.rope_qkv(
        qkv, positions, cos, sin, q_norm, k_norm, eps, k_cache, v_cache, slots, num_heads, return_kv=False,
        k_scale=k_scale, v_scale=v_scale,
    )  # fmt: skip
    return decode_attention_torch(
        q, k_cache, v_cache, slots, positions + 1, scale, max_len_hint, k_scale=k_scale, v_scale=v_scale
    )


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


class PrefillAttention:
    """prefill_attention with the SDPA backends and GQA handling chosen once per engine (module docstring)."""

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

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
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
