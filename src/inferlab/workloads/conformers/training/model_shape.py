"""The reference model's shape: a Qwen3 causal LM (QK-norm included, the flagship family) small enough to
train in minutes and to commit (<= 25 MB of bf16 safetensors), with the reduced vocabulary padded to a
multiple of VOCAB_MULTIPLE (tidy GEMM shapes; the padded rows are never a token) and tied embeddings.

With the ~350-token vocabulary: ~8.0M parameters, ~16 MB in bf16, of which the embedding is ~0.1M.
MAX_POSITIONS holds the longest text of the data (~1,100 tokens at 40 heavy atoms) with room to spare.
"""

from __future__ import annotations

from dataclasses import dataclass

VOCAB_MULTIPLE = 64


@dataclass(frozen=True)
class ModelShape:
    hidden: int = 256
    layers: int = 8
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    intermediate: int = 1024
    max_positions: int = 2048
    rope_theta: float = 10_000.0


REFERENCE_SHAPE = ModelShape()


def padded_vocabulary(tokens: int) -> int:
    return -(-tokens // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def model_config(shape: ModelShape, tokens: int, eos_token_id: int):
    """transformers' Qwen3Config of `shape` for a tokenizer of `tokens` tokens."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=padded_vocabulary(tokens), hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim, max_position_embeddings=shape.max_positions, rope_theta=shape.rope_theta,
        rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False, attention_dropout=0.0,
        bos_token_id=None, eos_token_id=eos_token_id, pad_token_id=eos_token_id,
    )
