"""The Llama-family forward (Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3) over the engine's static KV cache.

One layer, as in transformers, with the residual add fused into the next norm:
    h = norm(x); q, k, v = rope(split(h @ Wqkv)); cache[slot, pos] = k, v; a = attn(q, cache) @ Wo
    h, x = norm(x + a); m = (silu(h @ Wg) * (h @ Wu)) @ Wd; h, x = norm_next(x + m)
The last line is where the residual stream after layer i (transformers' decoder layer output) exists:
`residual_hooks` (residual_hooks.py) steer and collect it there (one fused op).
The entry points (`prefill`, `decode`, the LM head) and their attention come from DecoderForward (decoder.py).
The small fused operations come from an `Ops` set (ops.py: torch on CPU, Triton on CUDA); the projections go
through a GemmPlan (gemm_plan.py). Sampling is not here (sampler.py).
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


class LlamaModel(DecoderForward):
    def __init__(self, spec: ModelSpec, weights: ModelWeights, ops: Ops, rotary: RotaryTables) -> None:
        super().__init__(spec, weights, ops, rotary)
        self.gemm = GemmPlan(ops.silu_mul)  # cuBLAS everywhere until the engine tunes it (engine/gemm_plan.py)

    def _layers(self, tokens: torch.Tensor, attend: Attend, residual_hooks: ResidualHooks | None = None,
                num_layers: int | None = None) -> torch.Tensor:  # the contract: decoder.py's docstring
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
            if residual_hooks is None:
                h, x = ops.add_rms_norm(m, x, next_norm, eps)
            else:  # x = the residual after layer i, steered and collected
                h, x = residual_hooks.after_layer(i, m, x, next_norm, eps)
        return h
