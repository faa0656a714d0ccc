"""Reference implementations of the small fused operations of the forward, in plain torch.

They follow transformers' arithmetic step by step (RMSNorm in fp32 then cast, weight multiplied in the
model dtype, or for Gemma (`unit_offset`) multiplied by (1 + w) in fp32 and cast once; rope with cos/sin
cast to the model dtype), so on CPU in fp32 our forward matches transformers to rounding. The Triton
kernels in engine/kernels/ implement the same signatures fused into one launch each and are tested
against these functions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inferlab.engine import kv_quant


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, unit_offset: bool = False) -> torch.Tensor:
    """x [tokens, dim] -> [tokens, dim]: weight * (x / rms(x)), the normalisation done in fp32.
    unit_offset (Gemma): (x / rms(x)) * (1 + weight) all in fp32, then cast (transformers' GemmaRMSNorm)."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if unit_offset:
        return (normed * (1.0 + weight.float())).to(x.dtype)
    return weight * normed.to(x.dtype)


def embed_rms_norm(
    tokens: torch.Tensor,
    embed: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    scale: float | None = None,  # Gemma: sqrt(hidden) already rounded to the model dtype
    unit_offset: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x), x) for x = embed[tokens] (* scale) [tokens, dim]: the first layer's input and the residual
    stream. The product is rounded once, as transformers' bf16 x bf16 embedding scale is."""
    x = F.embedding(tokens, embed)
    if scale is not None:
        x = x * scale
    return rms_norm(x, weight, eps, unit_offset), x


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    unit_offset: bool = False,
    x_norm: torch.Tensor | None = None,  # Gemma 2/3: x (a sublayer's output) is normed by this first
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(residual + x), residual + x): the residual add and the next norm in one call; with x_norm,
    x is replaced by rms_norm(x, x_norm) first (the post-attention / post-feedforward norm)."""
    if x_norm is not None:
        x = rms_norm(x, x_norm, eps, unit_offset)
    summed = residual + x  # [tokens, dim], model dtype as in transformers
    return rms_norm(summed, weight, eps, unit_offset), summed


def add_steer_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    steer,
    unit_offset: bool = False,
    x_norm: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """add_rms_norm with steering: summed = residual + x (x normed by x_norm first, Gemma 2/3), plus scale *
    vector on the tokens of steered rows (steer: engine.steering.SteerLayer), rounded as a transformers forward
    hook computes `output + scale * vector` in the model dtype; then the norm of the steered sum (the (1 + w)
    kind with unit_offset). Returns (normed, summed)."""
    if x_norm is not None:
        x = rms_norm(x, x_norm, eps, unit_offset)
    summed = residual + x  # [tokens, dim]
    slot, scale = steer.slot, steer.scale  # [rows]
    if steer.token_rows is not None:
        slot, scale = slot[steer.token_rows], scale[steer.token_rows]  # [tokens]
    vectors = steer.vectors[slot.clamp(min=0).long()]  # [tokens, dim]
    added = (vectors.float() * scale[:, None]).to(summed.dtype)
    summed = torch.where((slot >= 0)[:, None], summed + added, summed)
    return rms_norm(summed, weight, eps, unit_offset), summed


def collect_rows(x: torch.Tensor, layer) -> None:
    """Fold x [n, dim] (vector i belongs to row layer.rows[i], or row i) into the rows' collection buffers
    (layer: engine.collection.CollectLayer), live rows only: "last" stores x, "mean" adds it to the fp32 sum
    (restarted at n_out = 0), "all" writes it at column n_out while n_out < cap."""
    from inferlab.engine.collection import MODE_ALL, MODE_LAST, MODE_MEAN

    rows = layer.rows if layer.rows is not None else torch.arange(x.shape[0], device=x.device)
    live = layer.active[rows] & ~layer.finished[rows]
    mode, n_out = layer.mode[rows], layer.n_out[rows]
    pooled = live & ((mode == MODE_LAST) | (mode == MODE_MEAN))
    keep_sum = pooled & (mode == MODE_MEAN) & (n_out > 0)
    old = layer.acc[rows]
    new = torch.where(keep_sum[:, None], old, 0.0) + x.float()
    layer.acc[rows] = torch.where(pooled[:, None], new, old)
    if layer.all is not None:
        cap = layer.all.shape[1]
        col = n_out.clamp(max=cap - 1)
        keep = live & (mode == MODE_ALL) & (n_out < cap)
        layer.all[rows, col] = torch.where(keep[:, None], x.to(layer.all.dtype), layer.all[rows, col])


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [tokens, 2 * inter] (gate rows first) -> silu(gate) * up [tokens, inter]."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def gelu_tanh_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [tokens, 2 * inter] (gate rows first) -> gelu_tanh(gate) * up [tokens, inter] (Gemma's GeGLU)."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_q_k(
    q: torch.Tensor,  # [tokens, heads, head_dim]
    k: torch.Tensor,  # [tokens, kv_heads, head_dim]
    positions: torch.Tensor,  # [tokens] int64
    cos: torch.Tensor,  # [max_positions, head_dim] fp32
    sin: torch.Tensor,
    q_norm: torch.Tensor | None,  # [head_dim] (Qwen3, Gemma 3) or None
    k_norm: torch.Tensor | None,
    eps: float,
    qk_norm_offset: bool = False,  # Gemma 3: the q/k norms scale by (1 + w)
) -> tuple[torch.Tensor, torch.Tensor]:
    """The optional per-head q/k RMSNorm, then rope at each token's position (cos/sin cast to q's dtype, as
    transformers does): new q and k tensors of the same shapes."""
    if q_norm is not None:
        q = rms_norm(q, q_norm, eps, qk_norm_offset)
        k = rms_norm(k, k_norm, eps, qk_norm_offset)
    c = cos[positions].to(q.dtype)[:, None, :]  # [tokens, 1, head_dim]
    s = sin[positions].to(q.dtype)[:, None, :]
    return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s


def rope_qkv(
    qkv: torch.Tensor,  # [tokens, (heads + 2 * kv_heads) * head_dim]
    positions: torch.Tensor,  # [tokens] int64
    cos: torch.Tensor,  # [max_positions, head_dim] fp32
    sin: torch.Tensor,  # [max_positions, head_dim] fp32
    q_norm: torch.Tensor | None,  # [head_dim] (Qwen3) or None
    k_norm: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,  # [slots, kv_heads, max_len, head_dim] (one layer), written in place
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # [tokens] int64: the cache slot each token's K/V goes to
    num_heads: int,
    return_kv: bool = True,  # prefill needs k and v back; decode reads them from the cache
    k_scale: torch.Tensor | None = None,  # [slots, kv_heads, max_len] fp32: the cache is fp8 (kv_quant.py)
    v_scale: torch.Tensor | None = None,
    qk_norm_offset: bool = False,  # Gemma 3: the q/k norms scale by (1 + w) (rms_norm's unit_offset)
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Split qkv, apply the optional q/k RMSNorm and rope, write K/V at (slot, position); return q, k, v.

    q [tokens, heads, head_dim], k and v [tokens, kv_heads, head_dim] (None unless return_kv), in qkv's dtype.
    With scales, K/V are stored as e4m3 + one scale per (slot, kv head, position); k and v returned unquantized.
    """
    tokens = qkv.shape[0]
    head_dim = cos.shape[-1]
    kv_heads = k_cache.shape[1]
    q, k, v = qkv.split([num_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q = q.reshape(tokens, num_heads, head_dim)
    k = k.reshape(tokens, kv_heads, head_dim)
    v = v.reshape(tokens, kv_heads, head_dim)
    q, k = rotate_q_k(q, k, positions, cos, sin, q_norm, k_norm, eps, qk_norm_offset)
    if k_scale is None:
        k_cache[slots, :, positions] = k  # advanced indices on dims 0 and 2: one [kv_heads, head_dim] per token
        v_cache[slots, :, positions] = v
    else:
        for values, cache, scales in ((k, k_cache, k_scale), (v, v_cache, v_scale)):
            stored, scale = kv_quant.quantize(values)  # [tokens, kv_heads, head_dim] fp8, [tokens, kv_heads]
            cache[slots, :, positions] = stored
            scales[slots, :, positions] = scale
    return (q, k, v) if return_kv else (q, None, None)
