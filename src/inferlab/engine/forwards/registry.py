"""The forward class of each architecture family (models/registry.py names the architectures and their
family): forward_class(architecture) -> the class the engine builds with (spec, weights, ops, rotary);
encoder_forward_class(architecture) -> the same for the encoder (engine/packed), which also runs the
sequence classifiers (models/registry.py CLASSIFIERS) on their causal LM's forward."""

from __future__ import annotations

from inferlab.engine.forwards.gemma import GemmaModel
from inferlab.engine.forwards.llama import LlamaModel
from inferlab.models.registry import GEMMA, LLAMA, encoder_family_for, family_for

FORWARDS: dict[str, type] = {LLAMA: LlamaModel, GEMMA: GemmaModel}


def forward_class(architecture: str) -> type:
    """UnsupportedError (naming the supported list) for an architecture not listed."""
    return FORWARDS[family_for(architecture)]


def encoder_forward_class(architecture: str) -> type:
    """A causal LM's or a sequence classifier's forward; UnsupportedError (naming both lists) otherwise."""
    return FORWARDS[encoder_family_for(architecture)]
