"""config.json -> ModelSpec (both rope layouts), the architecture registry, rope tables vs transformers."""

from __future__ import annotations

import json

import pytest
import torch

from inferlab.errors import ConfigError, InputError, UnsupportedError
from inferlab.models.config import read_model_spec
from inferlab.engine.forwards.registry import encoder_forward_class, forward_class
from inferlab.models.registry import ARCHITECTURES, CLASSIFIERS, encoder_family_for, family_for
from inferlab.models.rope import RotaryTables, inverse_frequencies

LLAMA_BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "eos_token_id": 5,
}
LLAMA3_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def _write(tmp_path, config: dict, generation: dict | None = None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return tmp_path


def test_transformers4_and_5_rope_layouts_give_the_same_spec(tmp_path):
    v4 = dict(LLAMA_BASE, rope_theta=500000.0, rope_scaling=dict(LLAMA3_SCALING, rope_type="llama3"))
    v5 = dict(LLAMA_BASE, rope_parameters=dict(LLAMA3_SCALING, rope_type="llama3", rope_theta=500000.0))
    old_style = dict(LLAMA_BASE, rope_theta=500000.0, rope_scaling=dict(LLAMA3_SCALING, type="llama3"))
    specs = [
        read_model_spec(_write(tmp_path / name, cfg)) for name, cfg in [("v4", v4), ("v5", v5), ("old", old_style)]
    ]
    assert specs[0].rope == specs[1].rope == specs[2].rope
    assert specs[0].rope.rope_type == "llama3" and specs[0].rope.theta == 500000.0
    assert specs[0].rope.param("factor") == 8.0


def test_family_differences_are_explicit(tiny_checkpoint):
    qwen2 = read_model_spec(tiny_checkpoint("tiny-qwen2"))
    qwen3 = read_model_spec(tiny_checkpoint("tiny-qwen3"))
    llama = read_model_spec(tiny_checkpoint("tiny-llama3-rope"))
    assert qwen2.qkv_bias and not qwen2.qk_norm and qwen2.head_dim == 16 and qwen2.tie_word_embeddings
    assert qwen3.qk_norm and not qwen3.qkv_bias and qwen3.head_dim == 32 != qwen3.hidden_size // qwen3.num_heads
    assert not llama.tie_word_embeddings and llama.rope.rope_type == "llama3"
    assert qwen3.eos_token_ids == (151643,) and qwen2.sliding_window is None


def test_eos_ids_merge_config_and_generation_config(tmp_path):
    spec = read_model_spec(_write(tmp_path, dict(LLAMA_BASE, eos_token_id=[5, 6]), {"eos_token_id": [6, 7]}))
    assert spec.eos_token_ids == (5, 6, 7)


def test_sliding_window_only_when_enabled(tmp_path):
    mistral = dict(LLAMA_BASE, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=128)
    assert read_model_spec(_write(tmp_path / "a", mistral)).sliding_window == 128
    qwen_off = dict(LLAMA_BASE, model_type="qwen2", sliding_window=128, use_sliding_window=False)
    assert read_model_spec(_write(tmp_path / "b", qwen_off)).sliding_window is None
    qwen_on = dict(qwen_off, use_sliding_window=True)
    assert read_model_spec(_write(tmp_path / "c", qwen_on)).sliding_window == 128


def test_bad_configs_are_refused_by_name(tmp_path):
    with pytest.raises(InputError, match="no config.json"):
        read_model_spec(tmp_path)
    with pytest.raises(ConfigError, match="not a multiple"):
        read_model_spec(_write(tmp_path, dict(LLAMA_BASE, num_key_value_heads=3)))
    with pytest.raises(UnsupportedError, match="mlp_bias"):
        read_model_spec(_write(tmp_path, dict(LLAMA_BASE, mlp_bias=True)))


def test_unknown_architecture_names_the_supported_list():
    with pytest.raises(UnsupportedError) as err:
        family_for("GPT2LMHeadModel")
    message = str(err.value)
    assert "GPT2LMHeadModel" in message and "--backend" not in message  # each command names its own fix
    assert all(name in message for name in ARCHITECTURES)


def test_each_classifier_runs_on_its_causal_lms_forward_in_the_encoder_only():
    for classifier, causal in CLASSIFIERS.items():
        assert encoder_family_for(classifier) == family_for(causal)
        assert encoder_forward_class(classifier) is forward_class(causal)
        assert encoder_forward_class(causal) is forward_class(causal)
        with pytest.raises(UnsupportedError):
            forward_class(classifier)  # the generation engine has no score head
    with pytest.raises(UnsupportedError) as err:
        encoder_family_for("GPT2ForSequenceClassification")
    assert "--backend" not in str(err.value) and all(name in str(err.value) for name in [*ARCHITECTURES, *CLASSIFIERS])


def test_unknown_rope_type_is_refused(tmp_path):
    spec = read_model_spec(_write(tmp_path, dict(LLAMA_BASE, rope_parameters={"rope_type": "yarn", "rope_theta": 1e4})))
    with pytest.raises(UnsupportedError, match="yarn.*llama3"):
        inverse_frequencies(spec.rope, spec.head_dim)


@pytest.mark.parametrize("preset", ["tiny", "tiny-llama3-rope", "tiny-qwen3"])
def test_rotary_tables_match_transformers(tiny_checkpoint, preset):
    from transformers import AutoConfig, AutoModelForCausalLM

    path = tiny_checkpoint(preset)
    spec = read_model_spec(path)
    hf_rotary = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path)).model.rotary_emb
    tables = RotaryTables.build(spec.rope, spec.head_dim, 300, torch.device("cpu"))
    positions = torch.arange(300)[None, :]
    cos, sin = hf_rotary(torch.zeros(1, dtype=torch.float32), positions)
    torch.testing.assert_close(tables.cos, cos[0], atol=0, rtol=0)
    torch.testing.assert_close(tables.sin, sin[0], atol=0, rtol=0)
