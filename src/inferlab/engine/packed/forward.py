"""The packed prefill's forward: a model's own layer loop (engine/forwards/llama.py, gemma.py `_layers`) over rows
concatenated without padding, with attention that never crosses rows, and what is read at the end:
classifier logits at each row's pooled token, or hidden states of chosen layers pooled per row.

Per layer the forward's `attend(i, layer, qkv)` is: rope (and Qwen3 / Gemma 3's q/k norms) in place on the
q and k parts of the qkv projection, each token at its position within its row (Triton kernel on CUDA,
kernels/triton_rope_inplace.py; torch_ops.rotate_q_k otherwise), then packed/attention.py over q, k, v as
views of that buffer ([T, heads, head_dim], no copies, no KV cache). Everything else (embedding, norms, the
projections through the model's GemmPlan or packed/fp8_weights.Fp8Gemm, the MLP) is the model's code.

Hidden states follow transformers' numbering: 0 = the embeddings (times Gemma's scale), i = the residual
stream after decoder layer i - 1 (taken where the forward adds the MLP output, `HiddenCapture.after_layer`),
L = the final normed output; the forward stops after the deepest layer asked for. Pooling per row:
"last" (its last token), "mean" (over its tokens, fp32), "all" (every token, split on the host).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from inferlab.engine import torch_ops
from inferlab.engine.packed.attention import PackedAttention
from inferlab.engine.packed.batch import DeviceBatch
from inferlab.engine.packed.flops import layer_window
from inferlab.models.config import ModelSpec
from inferlab.models.rope_spec import RopeSpec
from inferlab.models.rope import RotaryTables
from inferlab.models.weights import LayerWeights

POOLS = ("last", "mean", "all")


def pool_rows(x: torch.Tensor, batch: DeviceBatch, pool: str) -> torch.Tensor:
    """x [T, hidden] -> [B, hidden] fp32 ("last", "mean") or [T, hidden] fp32 ("all")."""
    if pool == "last":
        return x[batch.pooled].float()
    if pool == "mean":
        sums = torch.zeros((batch.host.rows, x.shape[1]), dtype=torch.float32, device=x.device)
        sums.index_add_(0, batch.row_of_token, x.float())
        return sums / (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).to(torch.float32)[:, None]
    assert pool == "all", pool
    return x.float()


class HiddenCapture:
    """What the layer loop calls as `taps.after_layer` (engine/taps.py's signature): the plain residual add +
    norm, and the new residual pooled where layer i's output is a hidden state asked for."""

    def __init__(self, ops: Any, batch: DeviceBatch, wanted: set[int], pool: str) -> None:
        self.ops = ops
        self.batch = batch
        self.wanted = wanted
        self.pool = pool
        self.pooled: dict[int, torch.Tensor] = {}

    def after_layer(self, i: int, delta: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                    unit_offset: bool = False, x_norm: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        h, x = self.ops.add_rms_norm(delta, residual, weight, eps, unit_offset, x_norm)
        if i + 1 in self.wanted:
            self.pooled[i + 1] = pool_rows(x, self.batch, self.pool)
        return h, x


def rope_inplace_torch(qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                       q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, eps: float, num_heads: int,
                       kv_heads: int, qk_norm_offset: bool = False) -> None:
    """The reference of kernels/triton_rope_inplace.rope_inplace: q and k of qkv rotated in place."""
    tokens, head_dim = qkv.shape[0], cos.shape[-1]
    q = qkv[:, : num_heads * head_dim].view(tokens, num_heads, head_dim)
    k = qkv[:, num_heads * head_dim : (num_heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    new_q, new_k = torch_ops.rotate_q_k(q, k, positions, cos, sin, q_norm, k_norm, eps, qk_norm_offset)
    q.copy_(new_q)
    k.copy_(new_k)


class RopeTables:
    """cos/sin tables of `positions` positions per distinct rope of the model (Gemma 3: local and global)."""

    def __init__(self, spec: ModelSpec, positions: int, device: torch.device) -> None:
        self.spec = spec
        self.positions = positions
        self.device = device
        self._built: dict[RopeSpec, RotaryTables] = {}

    def of(self, layer: int) -> RotaryTables:
        rope = self.spec.rope_of(layer)
        if rope not in self._built:
            self._built[rope] = RotaryTables.build(rope, self.spec.head_dim, self.positions, self.device)
        return self._built[rope]


class PackedForward:
    def __init__(self, model: Any, spec: ModelSpec, attention: PackedAttention, tables: RopeTables) -> None:
        self.model = model  # LlamaModel or GemmaModel: its weights, ops, GemmPlan and `_layers`
        self.spec = spec
        self.attention = attention
        self.tables = tables
        if model.ops.name == "triton":
            from inferlab.engine.kernels.triton_rope_inplace import rope_inplace

            self.rope = rope_inplace
        else:
            self.rope = rope_inplace_torch

    def attention_kinds(self) -> list[tuple[int, float | None]]:
        """(window, softcap) of every layer: what PackedAttention.choose picks implementations for."""
        return [(layer_window(self.spec, i), self.spec.attn_logit_softcap) for i in range(self.spec.num_layers)]

    def _layers(self, batch: DeviceBatch, taps: Any = None, num_layers: int | None = None) -> torch.Tensor:
        spec = self.spec
        heads, kv_heads, head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        tokens = batch.host.num_tokens

        def attend(i: int, layer: LayerWeights, qkv: torch.Tensor) -> torch.Tensor:
            tables = self.tables.of(i)
            self.rope(qkv, batch.positions, tables.cos, tables.sin, layer.q_norm, layer.k_norm, spec.rms_norm_eps,
                      heads, kv_heads, spec.norm_unit_offset)
            q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=1)
            a = self.attention(q.view(tokens, heads, head_dim), k.view(tokens, kv_heads, head_dim),
                               v.view(tokens, kv_heads, head_dim), batch, spec.attention_scale, layer_window(spec, i),
                               spec.attn_logit_softcap)  # [T, heads, head_dim]
            return a.reshape(tokens, heads * head_dim)

        return self.model._layers(batch.tokens, attend, taps, num_layers)

    def classify(self, batch: DeviceBatch) -> torch.Tensor:
        """[B, num_labels] fp32: the score head on each row's pooled token, in the model dtype, as transformers."""
        h = self._layers(batch)
        return F.linear(h[batch.pooled], self.model.weights.score).float()

    def hidden_states(self, batch: DeviceBatch, layers: tuple[int, ...], pool: str) -> dict[int, torch.Tensor]:
        """{hidden-state number: pooled [B, hidden] fp32 (or [T, hidden] for "all")} for resolved `layers`."""
        spec, model = self.spec, self.model
        out: dict[int, torch.Tensor] = {}
        if 0 in layers:
            x0 = F.embedding(batch.tokens, model.weights.embed)
            if spec.embedding_scale is not None:
                x0 = x0 * model.embed_scale  # rounded as the forward's own embedding is (engine/forwards/gemma.py)
            out[0] = pool_rows(x0, batch, pool)
        inner = {i for i in layers if 0 < i < spec.num_layers}
        if spec.num_layers in layers:
            capture = HiddenCapture(model.ops, batch, inner, pool)
            out[spec.num_layers] = pool_rows(self._layers(batch, capture), batch, pool)
            out.update(capture.pooled)
        elif inner:
            capture = HiddenCapture(model.ops, batch, inner, pool)
            self._layers(batch, capture, num_layers=max(inner))
            out.update(capture.pooled)
        return {i: out[i] for i in sorted(layers)}
