"""The entry points every decoder forward shares (llama.py, gemma.py): `prefill`, `decode` and the LM head.

A subclass supplies its layer loop and `gemm`, its GemmPlan:
    _layers(tokens [T] int64, attend: Attend, residual_hooks: ResidualHooks | None = None,
            num_layers: int | None = None) -> [T, hidden]
runs the first `num_layers` layers (None: all; the packed prefill's hidden states stop early), steering and
collecting the residual after each layer through `residual_hooks`, and returns the final-normed hidden state
(after num_layers: the next layer's input norm).

This class supplies the attention of each entry point, read off the spec per layer: the rope tables
(`spec.rope_of(i)`), the sliding window (`spec.window(i)`, 0: global), the score soft-cap and the (1 + w) q/k
norms (Gemma). `prefill` takes right-padded prompts (the rope kernel, then PrefillAttention over the prompt's
unquantized K/V), `decode` one token per row (one fused rope + attention op over each row's cache slot; a
window starts the row's scan at max(0, pos + 1 - window)), `decode_packed` several consecutive positions per
row (forced_runs.py: each attends to its row's slot up to itself). They return the logits of each row's last
position only, in the model dtype, soft-capped when `final_logit_softcapping` is set. The KV cache stays
full-length for every layer.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from inferlab.engine.attention import PrefillAttention
from inferlab.engine.forwards.prefill_layout import heads_first, last_positions, tokens_first
from inferlab.engine.kv_cache import KVCache
from inferlab.engine.ops import Ops
from inferlab.engine.residual_hooks import ResidualHooks
from inferlab.models.config import ModelSpec
from inferlab.models.rope import RotaryTables
from inferlab.models.weights import LayerWeights, ModelWeights

# attend(layer index, layer weights, qkv [T, (H + 2K) * D]) -> attention output [T, H * D]; rope and the
# K/V cache write happen inside (prefill: the rope kernel + attention; decode: one fused kernel per layer)
Attend = Callable[[int, LayerWeights, torch.Tensor], torch.Tensor]


class DecoderForward:
    def __init__(self, spec: ModelSpec, weights: ModelWeights, ops: Ops, rotary: RotaryTables) -> None:
        self.spec = spec
        self.weights = weights
        self.ops = ops
        self.rotary = rotary  # spec.rope: every layer but Gemma 3's sliding ones
        self.local_rotary = rotary  # Gemma 3's sliding layers have their own base
        if spec.local_rope is not None:
            positions, device = rotary.cos.shape[0], rotary.cos.device
            self.local_rotary = RotaryTables.build(spec.local_rope, spec.head_dim, positions, device)
        self.scale = spec.attention_scale
        # windowed / soft-capped layers: windowed_attention; plain causal ones: SDPA chosen at the first prefill
        self.prefill_attention = PrefillAttention(weights.embed.device)

    def _tables(self, layer: int) -> RotaryTables:
        return self.local_rotary if self.spec.window(layer) else self.rotary

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
        residual_hooks: ResidualHooks | None = None,
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
                cache.k[i], cache.v[i], token_slots, heads, return_kv=True, qk_norm_offset=spec.norm_unit_offset,
                **cache.scales(i),
            )  # fmt: skip
            # prefill attends over the prompt's unquantized K/V (an fp8 cache holds them quantized for decode)
            qb = heads_first(q, batch, padded, heads, head_dim)  # [batch, H, padded, D]
            kb = heads_first(k, batch, padded, kv_heads, head_dim)
            vb = heads_first(v, batch, padded, kv_heads, head_dim)
            a = self.prefill_attention(qb, kb, vb, self.scale, spec.window(i), spec.attn_logit_softcap)
            return tokens_first(a)  # a: [batch, H, padded, D]

        h = self._layers(tokens.reshape(-1), attend, residual_hooks)
        return self._logits(last_positions(h, batch, padded, lengths), out)

    def decode(
        self,
        tokens: torch.Tensor,  # [rows] int64: each row's newest token
        positions: torch.Tensor,  # [rows] int64: that token's position (its K/V goes there)
        slots: torch.Tensor,  # [rows] int64
        cache: KVCache,
        max_len_hint: int | None = None,  # host bound of positions + 1 (used by the torch attention only)
        residual_hooks: ResidualHooks | None = None,
    ) -> torch.Tensor:  # [rows, vocab] model dtype
        rows = tokens.shape[0]
        spec = self.spec

        def attend(i: int, layer: LayerWeights, qkv: torch.Tensor) -> torch.Tensor:
            tables = self._tables(i)
            out = self.ops.decode_rope_attention(
                qkv, positions, tables.cos, tables.sin, layer.q_norm, layer.k_norm, spec.rms_norm_eps,
                cache.k[i], cache.v[i], slots, spec.num_heads, self.scale, cache.merge_counters, max_len_hint,
                window=spec.window(i), softcap=spec.attn_logit_softcap, qk_norm_offset=spec.norm_unit_offset,
                **cache.scales(i),
            )  # fmt: skip
            return out.reshape(rows, spec.num_heads * spec.head_dim)

        return self._logits(self._layers(tokens, attend, residual_hooks))

    def decode_packed(
        self,
        step,  # forced_runs.PackedStep: T positions of b rows
        cache: KVCache,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:  # logits [b, vocab] at each row's last position; [E, vocab] at step.bulk
        """A decode step whose rows feed several consecutive positions each (forced_runs.py): every position
        writes its K/V and attends to its row's slot up to itself; the LM head at each row's last position
        (and at step.bulk's, when given)."""
        total = step.tokens.shape[0]
        spec = self.spec

        def attend(i: int, layer: LayerWeights, qkv: torch.Tensor) -> torch.Tensor:
            tables = self._tables(i)
            out = self.ops.decode_packed_attention(
                qkv, step.positions, tables.cos, tables.sin, layer.q_norm, layer.k_norm, spec.rms_norm_eps,
                cache.k[i], cache.v[i], step.slots, spec.num_heads, self.scale, cache.merge_counters, step.rows,
                window=spec.window(i), softcap=spec.attn_logit_softcap, qk_norm_offset=spec.norm_unit_offset,
                **cache.scales(i),
            )  # fmt: skip
            return out.reshape(total, spec.num_heads * spec.head_dim)

        h = self._layers(step.tokens, attend)  # [T, hidden]
        if step.bulk is None:
            return self._logits(h.index_select(0, step.last)), None
        # one LM head over the rows' last positions and the bulk ones: its weights (the step's largest matrix)
        # read once, not twice
        b = step.last.shape[0]
        logits = self._logits(h.index_select(0, torch.cat([step.last, step.bulk])))  # [b + E, vocab]
        return logits[:b], logits[b:]
