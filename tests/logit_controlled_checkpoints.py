"""Tiny checkpoints whose next-token logits the test chooses (a known model for the constraint pressure's
tests): a random checkpoint of the "tiny" Llama preset with every layer's output projections zeroed, so
the residual stream at a position is its token's embedding, and the final RMSNorm of a one-hot embedding
e_s is sqrt(hidden) * e_s. The logits of the next token then depend on the current token alone:
- `favouring(token)`: every embedding is e_0 and the tied head row of `token` is `margin` times the
  others': every position predicts `token` with probability ~1;
- `bigram(successors)`: token t's embedding is its own e_s, and an untied head maps it to successors[t]
  with logit sqrt(hidden) * `strength`: the model writes the chain the map describes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def _rewrite(base: Path, out: Path, change) -> Path:
    """Copy the checkpoint folder `base` to `out` and apply change(weights, config) to its one shard."""
    shutil.copytree(base, out)
    (shard,) = out.glob("*.safetensors")
    weights, config = load_file(shard), json.loads((out / "config.json").read_text())
    for name, value in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            value.zero_()  # the layers add nothing to the residual stream
        elif name.endswith("norm.weight"):
            value.fill_(1.0)
    change(weights, config)
    save_file({k: v.contiguous() for k, v in weights.items()}, shard, metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def favouring(base: Path, out: Path, token: int, margin: float = 3.0) -> Path:
    """Every next token is `token` with probability ~1 (logit 8 x margin against 8 for every other id)."""
    def change(weights, config):
        embed = weights["model.embed_tokens.weight"]  # tied: also the head
        embed.zero_()
        embed[:, 0] = 1.0
        embed[token, 0] = margin

    assert json.loads((base / "config.json").read_text())["tie_word_embeddings"]
    return _rewrite(base, out, change)


def bigram(base: Path, out: Path, successors: dict[int, int], strength: float = 3.0) -> Path:
    """After token t comes successors[t] with probability ~1 (logit sqrt(hidden) x strength, 0 elsewhere);
    tokens outside the map predict nothing in particular."""
    def change(weights, config):
        embed = weights["model.embed_tokens.weight"]
        vocab, hidden = embed.shape
        slots = {t: i + 1 for i, t in enumerate(sorted(set(successors)))}
        assert len(slots) < hidden, "more tokens in the chain than hidden dimensions"
        embed.zero_()
        embed[:, 0] = 1.0
        head = torch.zeros(vocab, hidden)
        for t, slot in slots.items():
            embed[t] = 0.0
            embed[t, slot] = 1.0
            head[successors[t], slot] = strength
        weights["lm_head.weight"] = head
        config["tie_word_embeddings"] = False

    return _rewrite(base, out, change)
