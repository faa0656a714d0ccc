"""The engine's weight layout: what models/loader.py produces and engine/forwards/llama.py / gemma.py read.

Fused at load: q/k/v become one [q_size + 2 * kv_size, hidden] matrix and gate/up one [2 * intermediate,
hidden] matrix, so a layer runs four matmuls instead of seven. Plain containers, no behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LayerWeights:
    input_norm: torch.Tensor  # [hidden]
    qkv: torch.Tensor  # [q_size + 2 * kv_size, hidden]: rows q, then k, then v
    qkv_bias: torch.Tensor | None  # [q_size + 2 * kv_size] (Qwen2, Llama with attention_bias)
    q_norm: torch.Tensor | None  # [head_dim] (Qwen3)
    k_norm: torch.Tensor | None  # [head_dim] (Qwen3)
    o: torch.Tensor  # [hidden, q_size]
    o_bias: torch.Tensor | None  # [hidden]
    post_norm: torch.Tensor  # [hidden]: post_attention_layernorm (Llama, Gemma: the MLP's input norm; Gemma 2/3:
    #                          the attention output's norm before the residual add)
    gate_up: torch.Tensor  # [2 * intermediate, hidden]: rows gate, then up
    down: torch.Tensor  # [hidden, intermediate]
    pre_mlp_norm: torch.Tensor | None = None  # [hidden] Gemma 2/3: pre_feedforward_layernorm (the MLP's input)
    post_mlp_norm: torch.Tensor | None = None  # [hidden] Gemma 2/3: post_feedforward_layernorm (the MLP's output)


@dataclass
class ModelWeights:
    embed: torch.Tensor  # [vocab, hidden]
    layers: list[LayerWeights]
    final_norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor | None  # [vocab, hidden]; the same tensor as `embed` when embeddings are tied; None when
    #                              loaded without it (models/loader.py HEADS: a classifier, hidden states only)
    score: torch.Tensor | None = None  # [num_labels, hidden]: a sequence classifier's head (loader head="score")

    def nbytes(self) -> int:
        """Bytes of distinct weight storage (a tied head is counted once)."""
        seen: set[int] = set()
        total = 0
        tensors = [self.embed, self.final_norm, self.lm_head, self.score]
        for layer in self.layers:
            tensors += list(vars(layer).values())
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                continue
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
        return total
