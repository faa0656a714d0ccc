"""Bytes a decode step must read (weights + live KV), for the achieved-bandwidth figure beside tok/s,
and the counting of tokens actually generated. Backend-independent: read from the checkpoint's
config.json and safetensors headers, never from a loaded model.

What we count (docs/lab.md says the same): per decode step, every weight once (a tied embedding once,
as the LM head; an untied input embedding not at all, since a lookup reads only `batch` rows), plus for
each row the K and V of its live positions: prompt + tokens generated so far. A static cache that
attends over all its allocated positions does more work than this, which the figure does not credit.
The prefill is not counted in bytes but its time is in the denominator (a slight under-estimate).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class ModelTraffic:
    weight_bytes: float  # read once per decode step, at the cell's dtype
    kv_bytes_per_position: float  # layers * 2 (K and V) * kv_heads * head_dim * dtype bytes
    max_positions: int | None

    @classmethod
    def from_checkpoint(cls, model_dir: Path, dtype: str) -> "ModelTraffic":
        from safetensors import safe_open

        config = json.loads((model_dir / "config.json").read_text())
        config = config.get("text_config", config)
        elem = _DTYPE_BYTES[dtype]
        numel: dict[str, int] = {}
        for shard in sorted(model_dir.glob("*.safetensors")):
            with safe_open(str(shard), framework="pt") as f:
                for name in f.keys():
                    size = 1
                    for dim in f.get_slice(name).get_shape():
                        size *= dim
                    numel[name] = size
        total = sum(numel.values())
        has_lm_head = any(n.endswith("lm_head.weight") for n in numel)
        embed = sum(v for n, v in numel.items() if n.endswith("embed_tokens.weight"))
        if has_lm_head:
            total -= embed  # untied: the input embedding is a lookup of `batch` rows per step
        heads = config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        kv = config["num_hidden_layers"] * 2 * kv_heads * head_dim * elem
        return cls(weight_bytes=float(total * elem), kv_bytes_per_position=float(kv),
                   max_positions=config.get("max_position_embeddings"))

    def decode_bytes(self, prompt_tokens: int, tokens_per_row: list[int]) -> float:
        """Bytes read by the decode steps of one batched call. The first token of each row comes from
        the prefill; the batch steps until its longest row is done; row r's step j reads P + j positions."""
        steps = max(tokens_per_row, default=0) - 1
        if steps <= 0:
            return 0.0
        kv_positions = 0
        for n in tokens_per_row:
            s = max(n - 1, 0)
            kv_positions += s * prompt_tokens + s * (s + 1) // 2
        return steps * self.weight_bytes + kv_positions * self.kv_bytes_per_position


def count_generated(generated: Any, eos_token_ids: frozenset[int]) -> list[int]:
    """Tokens actually produced per row: up to and including the first EOS; what follows is padding.
    generated  # [batch, new] tensor or list of lists of ids"""
    rows = generated.tolist() if hasattr(generated, "tolist") else generated
    counts = []
    for row in rows:
        n = len(row)
        for i, token in enumerate(row):
            if token in eos_token_ids:
                n = i + 1
                break
        counts.append(n)
    return counts
