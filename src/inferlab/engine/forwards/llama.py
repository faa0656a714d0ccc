"""The Llama-family forward (Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3) over the engine's static KV cache.

One layer, as in transformers, with the residual add fused into the next norm:
    h = norm(x); q, k, v = rope(split(h @ Wqkv)); cache[slot, pos] = k, v; a = attn(q, cache) @ Wo
    h, x = norm(x + a); m = (silu(h @ Wg) * (h @ Wu)) @ Wd; h, x = norm_next(x + m)
The last line is where the residual stream after layer i (transformers' decoder layer output) exists: with
`taps` (engine/taps.py) it also adds each steered row's vector there and collects it (one fused op).
Two entry points share the layer code and differ only in attention (rope and the cache write included):
`prefill` (right-padded prompts: the rope kernel, then causal SDPA) and `decode` (one token per row: one
fused rope + attention op over each row's cache slot). With an fp8 KV cache both write K/V quantized with
their scales (KVCache.scales); prefill attends over the prompt's unquantized K/V, decode reads the cache.
Both return the logits of the last position only, in the model dtype (the sampler's ops decide whether to upcast). The
small fused operations come from an `Ops` set (engine/ops.py), so the same code runs plain torch on CPU and
Triton kernels on CUDA; the projections go through a GemmPlan (cuBLAS, or the skinny Triton GEMM where the
engine measured it faster: engine/gemm_plan.py). Sampling is not here (engine/sampler.py).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from inferlab.engine.attention import PrefillAttention
from inferlab.engine.forwards.prefill_layout import heads_first, last_positions, tokens_first
from inferlab.engine.gemm_plan import GemmPlan
from inferlab.engine.kv_cache import KVCache
from inferlab.engine.ops import Ops
from inferlab.engine.taps import LayerTaps
from inferlab.models.config import ModelSpec
from inferlab.models.rope import RotaryTables
from inferlab.models.weights import LayerWeights, ModelWeights

# attend(layer index, layer weights, qkv [T, (H + 2K) * D]) -> attention output [T, H * D]; rope and the
# K/V cache write happen inside (prefill: the rope kernel + SDPA; decode: one fused kernel per layer)
Attend = Callable[[int, LayerWeights, torch.Tensor], torch.Tensor]


class LlamaModel:
    def __init__(self, spec: ModelSpec, weights: ModelWeights, ops: Ops, rotary: RotaryTables) -> None:
        self.spec = spec
        self.weights = weights
        self.ops = ops
        self.rotary = rotary
        self.scale = spec.head_dim**-0.5
        self.gemm = GemmPlan(ops.silu_mul)  # cuBLAS everywhere until the engine tunes it (engine/gemm_plan.py)
        self.prefill_attention = PrefillAttention(weights.embed.device)  # backends chosen at the first prefill

    def _layers(
        self,
        tokens: torch.Tensor,  # [T] int64
        attend: Attend,
        taps: LayerTaps | None = None,  # steering / collection on the residual after each layer
        num_layers: int | None = None,  # run only the first layers (the packed prefill's hidden states)
    ) -> torch.Tensor:  # [T, hidden]: the final-normed hidden state (after num_layers: the next layer's input norm)
        spec, w, ops = self.spec, self.weights, self.ops
        eps = spec.rms_norm_eps
        gemm = self.gemm
        h, x = ops.embed_rms_norm(tokens, w.embed, w.layers[0].input_norm, eps)  # x [T, hidden]: the residual
        for i, layer in enumerate(w.layers[:num_layers]):
            qkv = gemm.linear(h, layer.qkv, layer.qkv_bias, "qkv")  # [T, (H + 2K) * D]
            a = gemm.linear(attend(i, layer, qkv), layer.o, layer.o_bias, "o")  # [T, hidden]
            h, x = ops.add_rms_norm(a, x, layer.post_norm, eps)
            m = gemm.mlp(h, layer.gate_up, layer.down)  # [T, hidden]
            next_norm = w.layers[i + 1].input_norm if i + 1 < len(w.layers) else w.final_norm
            if taps is None:
                h, x = ops.add_rms_norm(m, x, next_norm, eps)
            else:  # x = the residual after layer i, steered and collected
                h, x = taps.after_layer(i, m, x, next_norm, eps)
        return h

    def _logits(self, h_last: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """[rows, hidden] -> [rows, vocab] in the model dtype (into `out` when given: a graph's static buffer)."""
        if out is None:
            return F.linear(h_last, self.weights.lm_head)
        return torch.matmul(h_last, self.weights.lm_head.t(), out=out)

    def prefill(
        self,
        tokens: torch.Tensor,  # [batch, padded_len] int64, prompts right-padded (any pad id)
        lengths: torch.Tensor,  # [batch] int64: real prompt lengths (>= 1)
        slots: torch.Tensor,  # [batch] int64: each prompt's cache slot
        cache: KVCache,
        taps: LayerTaps | None = None,
        out: torch.Tensor | None = None,  # [batch, vocab] model dtype: where to write the logits
    ) -> torch.Tensor:  # [batch, vocab] logits (model dtype) at each prompt's last real position
        batch, padded = tokens.shape
        heads, kv_heads, head_dim = self.spec.num_heads, self.spec.num_kv_heads, self.spec.head_dim
        positions = torch.arange(padded, device=tokens.device).repeat(batch)  # [batch * padded]
        token_slots = slots.repeat_interleave(padded)  # pads write K/V past the prompt: overwritten later

        def attend(i: int, layer: LayerWeights, qkv: torch.Tensor) -> torch.Tensor:
            q, k, v = self.ops.rope_qkv(
                qkv, positions, self.rotary.cos, self.rotary.sin, layer.q_norm, layer.k_norm,
                self.spec.rms_norm_eps, cache.k[i], cache.v[i], token_slots, heads, return_kv=True,
                **cache.scales(i),
            )  # fmt: skip
            # prefill attends over the prompt's unquantized K/V (an fp8 cache holds them quantized for decode)
            qb = heads_first(q, batch, padded, heads, head_dim)  # [batch, H, padded, D]
            kb = heads_first(k, batch, padded, kv_heads, head_dim)
            vb = heads_first(v, batch, padded, kv_heads, head_dim)
            return tokens_first(self.prefill_attention(qb, kb, vb, self.scale))  # attention: [batch, H, padded, D]

        h = self._layers(tokens.reshape(-1), attend, taps)
        return self._logits(last_positions(h, batch, padded, lengths), out)

    def decode(
        self,
        tokens: torch.Tensor,  # [rows] int64: each row's newest token
        positions: torch.Tensor,  # [rows] int64: that token's position (its K/V goes there)
        slots: torch.Tensor,  # [rows] int64
        cache: KVCache,
        max_len_hint: int | None = None,  # host bound of positions + 1 (used by the torch attention only)
        taps: LayerTaps | None = None,
    ) -> torch.Tensor:  # [rows, vocab] model dtype
        rows = tokens.shape[0]
        spec = self.spec

        def attend(i: int, layer: LayerWeights, qkv: torch.Tensor) -> torch.Tensor:
            out = self.ops.decode_rope_attention(
                qkv, positions, self.rotary.cos, self.rotary.sin, layer.q_norm, layer.k_norm, spec.rms_norm_eps,
                cache.k[i], cache.v[i], slots, spec.num_heads, self.scale, cache.merge_counters, max_len_hint,
                **cache.scales(i),
            )  # fmt: skip
            return out.reshape(rows, spec.num_heads * spec.head_dim)

        return self._logits(self._layers(tokens, attend, taps))
