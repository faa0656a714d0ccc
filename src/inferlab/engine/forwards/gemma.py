"""The Gemma-family forward (Gemma, Gemma 2, Gemma 3 text) over the engine's static KV cache.

Why a second forward beside llama.py rather than flags in it: Gemma 2/3 layers have another shape
(a norm on each sublayer's output before the residual add, and the MLP's own input norm), every norm is the
(1 + w) kind, the embeddings are scaled, and attention varies per layer (window, rope, soft-cap). Folding
that into llama.py would put a Gemma branch in every line of its loop; here the loop reads as the model
does, and both forwards share everything below them: the Ops set (engine/ops.py: the fused norms take
Gemma's variants as flags), the GemmPlan, the attention entry points, the rotary tables, the weights
layout. One layer, as in transformers (each add rounded to the model dtype, each norm fused with the add
that feeds it):
    Gemma:     h = norm(x); a = attn(h); x = x + a;        h = norm(x); x = x + mlp(h)
    Gemma 2/3: h = norm(x); a = attn(h); x = x + norm(a);  h = norm(x); x = x + norm(mlp(h))
with mlp(h) = (gelu_tanh(h @ Wg) * (h @ Wu)) @ Wd, norm(x) = x / rms(x) * (1 + w) in fp32, the embeddings
times sqrt(hidden) rounded to the model dtype first (as transformers does), q . k scaled by
query_pre_attn_scalar ** -0.5 (Gemma 2/3), Gemma 2's scores soft-capped, Gemma 3's q and k normed per
head, and the logits soft-capped when `final_logit_softcapping` is set. The last add of layer i (norm +
add + next norm, one fused op) is where the residual stream after layer i exists: with `taps`
(engine/taps.py) it also adds each steered row's vector there and collects it, as in llama.py.

Per layer i, `spec.window(i)` is its sliding window (0: global) and `spec.rope_of(i)` its rope (Gemma 3:
the local base on sliding layers). Windows are real in both paths: prefill attends through
attention.PrefillAttention, which runs attention.windowed_attention (keys outside the window never read)
where the window cuts into the padded prompt or the scores are soft-capped and the engine's probed SDPA
path where plain causal attention is exact; decode through the fused kernel starting each row's scan at
max(0, pos + 1 - window). Both prefill paths are capturable, so prefill CUDA graphs (engine/
prefill_graphs.py) serve Gemma as they serve llama.py. The KV cache stays full-length for every layer; a
ring buffer of `window` positions for the sliding layers would save memory (~5/6 of Gemma 3's cache) and
is a later optimisation. With an fp8 KV cache both entry points write K/V quantized with their scales
(KVCache.scales), as in llama.py; prefill attends over the prompt's unquantized K/V, decode reads the cache.
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

# attend(layer index, layer weights, qkv [T, (H + 2K) * D]) -> attention output [T, H * D]
Attend = Callable[[int, LayerWeights, torch.Tensor], torch.Tensor]


class GemmaModel:
    def __init__(self, spec: ModelSpec, weights: ModelWeights, ops: Ops, rotary: RotaryTables) -> None:
        assert spec.norm_unit_offset and spec.embedding_scale is not None, spec.architecture
        self.spec = spec
        self.weights = weights
        self.ops = ops
        self.rotary = rotary  # spec.rope: every layer of Gemma 1/2, Gemma 3's global layers
        self.local_rotary = rotary  # Gemma 3's sliding layers have their own base
        if spec.local_rope is not None:
            positions, device = rotary.cos.shape[0], rotary.cos.device
            self.local_rotary = RotaryTables.build(spec.local_rope, spec.head_dim, positions, device)
        self.scale = spec.attention_scale
        # transformers multiplies by the scale as a tensor of the model dtype: sqrt(2048) = 45.25 in bf16
        self.embed_scale = torch.tensor(spec.embedding_scale, dtype=weights.embed.dtype).item()
        act_mul = ops.gelu_tanh_mul if spec.activation == "gelu_tanh" else ops.silu_mul
        self.gemm = GemmPlan(act_mul, activation=spec.activation)  # cuBLAS until the engine tunes it
        # windowed / soft-capped layers: windowed_attention; plain causal ones: SDPA chosen at the first prefill
        self.prefill_attention = PrefillAttention(weights.embed.device)

    def _tables(self, layer: int) -> RotaryTables:
        return self.local_rotary if self.spec.window(layer) else self.rotary

    def _layers(
        self,
        tokens: torch.Tensor,  # [T] int64
        attend: Attend,
        taps: LayerTaps | None = None,  # steering / collection on the residual after each layer
        num_layers: int | None = None,  # run only the first layers (the packed prefill's hidden states)
    ) -> torch.Tensor:  # [T, hidden]: the final-normed hidden state (after num_layers: the next layer's input norm)
        spec, w, ops, gemm = self.spec, self.weights, self.ops, self.gemm
        eps = spec.rms_norm_eps
        h, x = ops.embed_rms_norm(tokens, w.embed, w.layers[0].input_norm, eps, self.embed_scale, True)
        for i, layer in enumerate(w.layers[:num_layers]):
            qkv = gemm.linear(h, layer.qkv, None, "qkv")  # [T, (H + 2K) * D]
            a = gemm.linear(attend(i, layer, qkv), layer.o, None, "o")  # [T, hidden]
            if spec.post_norms:  # Gemma 2/3: x += post_attention_norm(a); h = pre_feedforward_norm(x)
                h, x = ops.add_rms_norm(a, x, layer.pre_mlp_norm, eps, True, x_norm=layer.post_norm)
            else:  # Gemma: x += a; h = post_attention_norm(x)
                h, x = ops.add_rms_norm(a, x, layer.post_norm, eps, True)
            m = gemm.mlp(h, layer.gate_up, layer.down)  # [T, hidden]
            next_norm = w.layers[i + 1].input_norm if i + 1 < len(w.layers) else w.final_norm
            # x [T, hidden] becomes the residual stream after layer i (transformers' hidden_states[i + 1], the
            # decoder layer's output) and h its next norm; with taps it is also steered and collected there
            if taps is None:
                h, x = ops.add_rms_norm(m, x, next_norm, eps, True, x_norm=layer.post_mlp_norm)
            else:
                h, x = taps.after_layer(i, m, x, next_norm, eps, True, x_norm=layer.post_mlp_norm)
        return h

    def _logits(self, h_last: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """[rows, hidden] -> [rows, vocab] in the model dtype (into `out` when given: a graph's static buffer)."""
        if out is None:
            logits = F.linear(h_last, self.weights.lm_head)
        else:
            logits = torch.matmul(h_last, self.weights.lm_head.t(), out=out)
        cap = self.spec.final_logit_softcap
        if cap is not None:  # three ops in the model dtype, as transformers rounds them (in place: same values)
            logits.div_(cap).tanh_().mul_(cap)
        return logits

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
        spec = self.spec
        heads, kv_heads, head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        positions = torch.arange(padded, device=tokens.device).repeat(batch)  # [batch * padded]
        token_slots = slots.repeat_interleave(padded)  # pads write K/V past the prompt: overwritten later

        def attend(i: int, layer: LayerWeights, qkv: torch.Tensor) -> torch.Tensor:
            tables = self._tables(i)
            q, k, v = self.ops.rope_qkv(
                qkv, positions, tables.cos, tables.sin, layer.q_norm, layer.k_norm, spec.rms_norm_eps,
                cache.k[i], cache.v[i], token_slots, heads, return_kv=True, qk_norm_offset=True, **cache.scales(i),
            )  # fmt: skip
            # prefill attends over the prompt's unquantized K/V (an fp8 cache holds them quantized for decode)
            qb = heads_first(q, batch, padded, heads, head_dim)  # [batch, H, padded, D]
            kb = heads_first(k, batch, padded, kv_heads, head_dim)
            vb = heads_first(v, batch, padded, kv_heads, head_dim)
            a = self.prefill_attention(qb, kb, vb, self.scale, spec.window(i), spec.attn_logit_softcap)
            return tokens_first(a)  # a: [batch, H, padded, D]

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
            tables = self._tables(i)
            out = self.ops.decode_rope_attention(
                qkv, positions, tables.cos, tables.sin, layer.q_norm, layer.k_norm, spec.rms_norm_eps,
                cache.k[i], cache.v[i], slots, spec.num_heads, self.scale, cache.merge_counters, max_len_hint,
                window=spec.window(i), softcap=spec.attn_logit_softcap, qk_norm_offset=True, **cache.scales(i),
            )  # fmt: skip
            return out.reshape(rows, spec.num_heads * spec.head_dim)

        return self._logits(self._layers(tokens, attend, taps))
