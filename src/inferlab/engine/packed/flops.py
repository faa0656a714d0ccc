"""Model FLOPs of a packed prefill: what achieved TFLOP/s is counted in (the lab's rows, the latency planner).

Counted: the projections, 2 x (q, k, v, o, gate, up, down weights) per token per layer, and attention,
4 x heads x head_dim per visible (query, key) pair per layer (q.k and p.v), over each row's causal pairs
(a window W caps a query's keys at W). Not counted: embedding, norms, rope, activations, the head (a few
per mille of the total for the models here). Padding never counts: every backend's rows are charged the
same FLOPs for the same texts.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from inferlab.models.config import ModelSpec


def layer_window(spec: ModelSpec, layer: int) -> int:
    """Positions a query of `layer` sees, itself included (0: all earlier ones): Gemma 2/3's per-layer windows,
    or a Llama-family model's single sliding_window (Mistral)."""
    if spec.layer_windows:
        return spec.window(layer)
    return spec.sliding_window or 0


def causal_pairs(n: int, window: int = 0) -> int:
    """Visible (query, key) pairs of a row of n tokens: n(n + 1) / 2, or with a window W < n: each query sees at
    most W keys."""
    if not window or window >= n:
        return n * (n + 1) // 2
    return window * (window + 1) // 2 + (n - window) * window


def projection_params(spec: ModelSpec) -> int:
    """Weights of one layer's projections (q, k, v, o, gate, up, down)."""
    h = spec.hidden_size
    return h * (2 * spec.q_size + 2 * spec.kv_size) + 3 * h * spec.intermediate_size


def projection_flops(spec: ModelSpec, tokens: int, num_layers: int | None = None) -> float:
    """The projections' share of prefill_flops: 2 x their weights per token per layer."""
    layers = spec.num_layers if num_layers is None else num_layers
    return 2.0 * tokens * layers * projection_params(spec)


def prefill_flops(spec: ModelSpec, lengths: Sequence[int], num_layers: int | None = None) -> float:
    """FLOPs of a forward over rows of `lengths` tokens through the first `num_layers` layers (default all)."""
    layers = spec.num_layers if num_layers is None else num_layers
    flops = projection_flops(spec, sum(lengths), layers)
    per_pair = 4.0 * spec.num_heads * spec.head_dim
    for window, count in Counter(layer_window(spec, i) for i in range(layers)).items():
        flops += count * per_pair * sum(causal_pairs(n, window) for n in lengths)
    return flops
