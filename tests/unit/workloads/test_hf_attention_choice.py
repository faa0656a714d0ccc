"""hf_loading.attention_for: Gemma 2's soft-capped attention never runs on SDPA.

transformers 5.17 (the H100's) declares SDPA support for Gemma 2 and, asked for its default attention, runs
SDPA, which drops the attention soft-cap without a word: the device check's reference of 2026-11-25 was such a
model, 0.48 away from its own eager fp32 forward on tiny-gemma2, and the engine's correct logits read as a
FAIL. These tests put transformers 5.17's declaration back (5.24 sets _supports_sdpa = False itself).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.models.gemma2 import modeling_gemma2

from inferlab.errors import UnsupportedError
from inferlab.workloads.hf_loading import attention_for, from_pretrained_for_inference

CPU = torch.device("cpu")


@pytest.fixture
def sdpa_declared_for_gemma2(monkeypatch):
    monkeypatch.setattr(modeling_gemma2.Gemma2PreTrainedModel, "_supports_sdpa", True)  # as transformers 5.17


def test_gemma2_loads_eager_by_default_and_refuses_sdpa(tiny_checkpoint, sdpa_declared_for_gemma2):
    path = tiny_checkpoint("tiny-gemma2")
    plain = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    assert plain.config._attn_implementation == "sdpa"  # the trap: transformers' own default here
    model = from_pretrained_for_inference(AutoModelForCausalLM, path, torch.float32, None, CPU)
    assert model.config._attn_implementation == "eager"
    with pytest.raises(UnsupportedError, match="--attn eager"):
        from_pretrained_for_inference(AutoModelForCausalLM, path, torch.float32, "sdpa", CPU)
    assert attention_for(path, "eager") == "eager"


def test_other_models_keep_the_attention_asked_for(tiny_checkpoint):
    """Gemma 3 carries attn_logit_softcapping in its config but never applies it: SDPA stays allowed."""
    for preset in ("tiny", "tiny-gemma3"):
        path = tiny_checkpoint(preset)
        assert attention_for(path, None) is None and attention_for(path, "sdpa") == "sdpa"
