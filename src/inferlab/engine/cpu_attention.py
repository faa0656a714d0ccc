"""The decode step's attention on the CPU: decode_attention_torch's arithmetic over views of the KV cache.

The reference (attention.py) gathers each row's K/V out of its cache slot (`k_cache[slots, :, :span]`, a
copy of [rows, kv_heads, span, head_dim] per layer and step) and contracts with einsum (which copies its
operands again into the layout it wants). On the CPU those copies were most of a step at a few hundred
positions. Here a host read costs nothing (no device to wait for, no graph to capture), so this path
looks at the slots: while rows [0, b) own slots [0, b) in order (every row until compaction moves one),
each row's K/V is a slice of the cache, read in place by matmul; otherwise they are gathered as the
reference does. Equal to decode_attention_torch up to float rounding (tests/unit/engine/test_cpu_ops.py).
"""

from __future__ import annotations

import torch

from inferlab.engine import torch_ops
from inferlab.engine.attention import PackedRows, decode_rope_attention_torch, packed_decode_attention


def _row_kv(cache: torch.Tensor, slots: torch.Tensor, span: int) -> torch.Tensor:
    """[rows, kv_heads, span, head_dim]: each row's slot up to `span`, a view when rows own slots 0..rows-1."""
    rows = slots.shape[0]
    if torch.equal(slots, torch.arange(rows)):
        return cache[:rows, :, :span]
    return cache[slots, :, :span]


def decode_attention_cpu(
    q: torch.Tensor,  # [rows, heads, head_dim]
    k_cache: torch.Tensor,  # [slots, kv_heads, max_len, head_dim] (one layer)
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # [rows] int64
    lengths: torch.Tensor,  # [rows] int64: valid positions per row (>= 1)
    scale: float,
    max_len_hint: int | None = None,  # upper bound of `lengths` (None: read them)
    window: int = 0,
    softcap: float | None = None,
) -> torch.Tensor:  # [rows, heads, head_dim], q's dtype
    rows, heads, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    group = heads // kv_heads
    span = int(lengths.max()) if max_len_hint is None else max_len_hint  # a free host read on the CPU
    span = min(span, k_cache.shape[2])
    k = _row_kv(k_cache, slots, span).float()  # [rows, kv_heads, span, head_dim] (fp32 cache: the view itself)
    v = _row_kv(v_cache, slots, span).float()
    qg = q.float().view(rows, kv_heads, group, head_dim)
    scores = torch.matmul(qg, k.transpose(-1, -2)) * scale  # [rows, kv_heads, group, span]
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    at = torch.arange(span)[None, :]
    live = at < lengths[:, None]  # [rows, span]
    if window:
        live &= at >= lengths[:, None] - window
    probs = scores.masked_fill(~live[:, None, None, :], float("-inf")).softmax(dim=-1)
    out = torch.matmul(probs, v)  # [rows, kv_heads, group, head_dim]
    return out.reshape(rows, heads, head_dim).to(q.dtype)


def decode_rope_attention_cpu(
    qkv: torch.Tensor,  # [rows, (heads + 2 * kv_heads) * head_dim]
    positions: torch.Tensor,  # [rows] int64
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    num_heads: int,
    scale: float,
    counters: torch.Tensor | None = None,  # unused (the Triton kernel's)
    max_len_hint: int | None = None,
    *,
    window: int = 0,
    softcap: float | None = None,
    qk_norm_offset: bool = False,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:  # [rows, heads, head_dim]
    """attention.decode_rope_attention_torch with the attention above (an fp8 cache takes the reference's
    path: it dequantizes what it reads, a correctness path on the CPU)."""
    if k_scale is not None:
        return decode_rope_attention_torch(
            qkv, positions, cos, sin, q_norm, k_norm, eps, k_cache, v_cache, slots, num_heads, scale, counters,
            max_len_hint, window=window, softcap=softcap, qk_norm_offset=qk_norm_offset, k_scale=k_scale,
            v_scale=v_scale,
        )  # fmt: skip
    q, _, _ = torch_ops.rope_qkv(
        qkv, positions, cos, sin, q_norm, k_norm, eps, k_cache, v_cache, slots, num_heads, return_kv=False,
        qk_norm_offset=qk_norm_offset,
    )  # fmt: skip
    return decode_attention_cpu(q, k_cache, v_cache, slots, positions + 1, scale, max_len_hint, window, softcap)


def decode_packed_attention_cpu(
    qkv: torch.Tensor,  # [T, (heads + 2 * kv_heads) * head_dim]
    positions: torch.Tensor,  # [T] int64
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # [T] int64
    num_heads: int,
    scale: float,
    counters: torch.Tensor | None,  # unused (the Triton kernel's)
    rows: PackedRows,
    *,
    window: int = 0,
    softcap: float | None = None,
    qk_norm_offset: bool = False,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:  # [T, heads, head_dim]; padding positions 0
    """The packed step's attention on the CPU (Ops.decode_packed_attention): the rope and K/V write of every
    position, then each row's first query as decode_attention_cpu reads it (over views of the slots while
    rows own slots 0..b-1) and the booked positions' queries (a few per step: their K/V gathered). Equal
    to attention.packed_decode_attention up to float rounding; an fp8 cache takes that reference."""
    if k_scale is not None:
        return packed_decode_attention(decode_rope_attention_torch)(
            qkv, positions, cos, sin, q_norm, k_norm, eps, k_cache, v_cache, slots, num_heads, scale, counters,
            rows, window=window, softcap=softcap, qk_norm_offset=qk_norm_offset, k_scale=k_scale, v_scale=v_scale,
        )  # fmt: skip
    q, _, _ = torch_ops.rope_qkv(
        qkv, positions, cos, sin, q_norm, k_norm, eps, k_cache, v_cache, slots, num_heads, return_kv=False,
        qk_norm_offset=qk_norm_offset,
    )  # fmt: skip
    out = torch.zeros_like(q)  # [T, heads, head_dim]
    out[rows.first] = decode_attention_cpu(q[rows.first], k_cache, v_cache, rows.slot, rows.position + 1, scale,
                                           window=window, softcap=softcap)  # fmt: skip
    later = torch.ones(q.shape[0], dtype=torch.bool)
    later[rows.first] = False
    later[int(rows.first[-1] + rows.count[-1]):] = False  # the padding after the last row's positions
    extra = later.nonzero()[:, 0]  # the booked positions (a free host read on the CPU)
    if extra.numel():
        out[extra] = decode_attention_cpu(q[extra], k_cache, v_cache, slots[extra], positions[extra] + 1, scale,
                                          window=window, softcap=softcap)  # fmt: skip
    return out
