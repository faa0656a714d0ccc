"""The Gemma-family forward (Gemma, Gemma 2, Gemma 3 text) over the engine's static KV cache.

A layer loop of its own beside llama.py because Gemma 2/3 layers have another shape (each sublayer's output is
normed before the residual add), every norm is the (1 + w) kind and the embeddings are scaled: as flags in
llama.py these would branch every line of its loop. Both forwards share everything else: the entry points and
their per-layer attention (window, rope, soft-caps: decoder.py), the Ops (the fused norms take Gemma's variants
as flags), the GemmPlan, the rotary tables, the weights layout. One layer, as in transformers (each add rounded
to the model dtype, each norm fused with the add that feeds it):
    Gemma:     h = norm(x); a = attn(h); x = x + a;        h = norm(x); x = x + mlp(h)
    Gemma 2/3: h = norm(x); a = attn(h); x = x + norm(a);  h = norm(x); x = x + norm(mlp(h))
with mlp(h) = (gelu_tanh(h @ Wg) * (h @ Wu)) @ Wd, norm(x) = x / rms(x) * (1 + w) in fp32, the embeddings
times sqrt(hidden) rounded to the model dtype, q . k scaled by query_pre_attn_scalar ** -0.5 (Gemma 2/3),
Gemma 2's scores soft-capped, Gemma 3's q and k normed per head, and the logits soft-capped when
`final_logit_softcapping` is set. The last add of layer i is where the residual stream after layer i exists:
`residual_hooks` (residual_hooks.py) steer and collect it there, as in llama.py.
"""

from __future__ import annotations

import torch

from inferlab.engine.forwards.decoder import Attend, DecoderForward
from inferlab.engine.gemm_plan import GemmPlan
from inferlab.engine.ops import Ops
from inferlab.engine.residual_hooks import ResidualHooks
from inferlab.models.config import ModelSpec
from inferlab.models.rope import RotaryTables
from inferlab.models.weights import ModelWeights


class GemmaModel(DecoderForward):
    def __init__(self, spec: ModelSpec, weights: ModelWeights, ops: Ops, rotary: RotaryTables) -> None:
        assert spec.norm_unit_offset and spec.embedding_scale is not None, spec.architecture
        super().__init__(spec, weights, ops, rotary)
        # transformers multiplies by the scale as a tensor of the model dtype: sqrt(2048) = 45.25 in bf16
        self.embed_scale = torch.tensor(spec.embedding_scale, dtype=weights.embed.dtype).item()
        act_mul = ops.gelu_tanh_mul if spec.activation == "gelu_tanh" else ops.silu_mul
        self.gemm = GemmPlan(act_mul, activation=spec.activation)  # cuBLAS until the engine tunes it

    def _layers(self, tokens: torch.Tensor, attend: Attend, residual_hooks: ResidualHooks | None = None,
                num_layers: int | None = None) -> torch.Tensor:  # the contract: decoder.py's docstring
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
            # decoder layer's output) and h its next norm; with residual hooks it is also steered and collected there
            if residual_hooks is None:
                h, x = ops.add_rms_norm(m, x, next_norm, eps, True, x_norm=layer.post_mlp_norm)
            else:
                h, x = residual_hooks.after_layer(i, m, x, next_norm, eps, True, x_norm=layer.post_mlp_norm)
        return h
