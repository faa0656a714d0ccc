"""The forward class of each architecture family (models/registry.py names the architectures and their
family): forward_class(architecture) -> the class the engine builds with (spec, weights, ops, rotary)."""

from __future__ import annotations

from inferlab.engine.forwards.gemma import GemmaModel
from inferlab.engine.forwards.llama import LlamaModel
from inferlab.models.registry import GEMMA, LLAMA, family_for

FORWARDS: dict[str, type] = {LLAMA: LlamaModel, GEMMA: GemmaModel}


def forward_class(architecture: str) -> type:
    """UnsupportedError (naming the supported list and --backend hf) for an architecture not listed."""
    return FORWARDS[family_for(architecture)]
