"""The training step's forward and loss under torch.compile: a trial lever of the recipe (`train --compile`).

A step of the recipe's 8M-parameter model spends ~75% of its GPU time in fp32 elementwise kernels (RMSNorm,
QK-norm, RoPE, the one-hot loss: benchmarks/checks/2026-12-02-train-speed), which inductor fuses. Two things
make the model compile with the attention the eager recipe runs:
- transformers builds an explicit causal mask while dynamo traces (its SDPA path skips the mask only when it
  can read the padding mask eagerly), and FlashAttention refuses an explicit mask. The model instead runs
  CAUSAL_ATTENTION, registered here: SDPA with is_causal=True and no mask. A batch's pads all sit at the end
  of its rows (batches.py), so causal attention alone never lets a real token see a pad, as on the eager path.
- the batches have many lengths (length buckets): `dynamic=True` traces one graph with symbolic sizes
  instead of one compile per bucket.
`training probe --compile` says whether two compiled runs end with bitwise equal weights on a device (the
recipe's condition) and how fast the step is; the recipe itself runs eager.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

CAUSAL_ATTENTION = "inferlab_causal_sdpa"


def causal_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [B, heads, L, D], key/value [B, kv_heads, L, D]
    -> ([B, L, heads, D], no weights). The mask is ignored: this implementation has no mask function, so
    transformers passes None."""
    out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling, dropout_p=dropout,
                                         enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


def use_causal_attention(model: torch.nn.Module) -> None:
    """Register CAUSAL_ATTENTION with transformers (once per process is enough; again is harmless) and make
    `model` run it."""
    from transformers import AttentionInterface

    AttentionInterface.register(CAUSAL_ATTENTION, causal_sdpa)
    model.set_attn_implementation(CAUSAL_ATTENTION)


def compiled(loss_fn: Callable, backend: str = "inductor") -> Callable:
    """`loss_fn` (model, ids, labels, stereo) -> tensors, compiled once with symbolic batch sizes.

    Inductor's memory-coalescing analysis (a tiling heuristic) fails an assertion on this graph's symbolic
    sizes in torch 2.11 (tiling_utils.get_pw_red_splits): it is off for this compile."""
    options = {"triton.coalesce_tiling_analysis": False} if backend == "inductor" else None
    return torch.compile(loss_fn, dynamic=True, backend=backend, options=options)
