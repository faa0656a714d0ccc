"""Gemma-family config.json -> ModelSpec (both transformers layouts, read as transformers reads them), the
rotary tables of Gemma 3's two ropes, refusals, and the loader's key checks for the Gemma layouts."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from inferlab.engine.forwards.registry import forward_class
from inferlab.errors import ConfigError, InputError, UnsupportedError
from inferlab.models.config import read_model_spec
from inferlab.models.loader import load_weights
from inferlab.models.rope import RotaryTables

BASE = {
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 256,
    "eos_token_id": 1,
}
GEMMA2 = dict(BASE, architectures=["Gemma2ForCausalLM"], model_type="gemma2")
GEMMA3 = dict(BASE, architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", sliding_window=16)


def _write(path, config: dict):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


def _hf_config(path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path)


def test_gemma2_both_layouts_and_transformers_agree(tmp_path):
    v4 = dict(GEMMA2, rope_theta=5000.0, sliding_window=16)  # no layer_types: the even/odd rule
    v5 = dict(GEMMA2, sliding_window=16, rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
              layer_types=["sliding_attention", "full_attention"] * 3)  # fmt: skip
    a, b = read_model_spec(_write(tmp_path / "v4", v4)), read_model_spec(_write(tmp_path / "v5", v5))
    assert a == b
    hf = _hf_config(tmp_path / "v4")
    assert a.layer_windows == tuple(16 if t == "sliding_attention" else 0 for t in hf.layer_types) == (16, 0) * 3
    assert a.rope.theta == hf.rope_parameters["rope_theta"] == 5000.0
    # left out of config.json: transformers' defaults
    assert (a.attn_logit_softcap, a.final_logit_softcap) == (hf.attn_logit_softcapping, hf.final_logit_softcapping)
    assert (a.attn_logit_softcap, a.final_logit_softcap, a.query_pre_attn_scalar) == (50.0, 30.0, 256)
    assert a.attention_scale == 256**-0.5 and a.post_norms and a.norm_unit_offset and not a.qk_norm
    assert a.activation == "gelu_tanh" and a.embedding_scale == 8.0 and a.tie_word_embeddings
    nulls = dict(v4, attn_logit_softcapping=None, final_logit_softcapping=None)
    nulls = read_model_spec(_write(tmp_path / "nulls", nulls))
    assert nulls.attn_logit_softcap is None and nulls.final_logit_softcap is None


def test_gemma3_both_layouts_and_transformers_agree(tmp_path):
    v4 = dict(GEMMA3, rope_theta=1e6, rope_local_base_freq=1e4, sliding_window_pattern=3,
              rope_scaling={"rope_type": "linear", "factor": 8.0})  # fmt: skip
    types = ["sliding_attention", "sliding_attention", "full_attention"] * 2
    v5 = dict(GEMMA3, layer_types=types, rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    })  # fmt: skip
    a, b = read_model_spec(_write(tmp_path / "v4", v4)), read_model_spec(_write(tmp_path / "v5", v5))
    assert a == b
    hf = _hf_config(tmp_path / "v4")
    assert list(hf.layer_types) == types
    assert a.layer_windows == (16, 16, 0, 16, 16, 0)
    full, local = hf.rope_parameters["full_attention"], hf.rope_parameters["sliding_attention"]
    assert (a.rope.rope_type, a.rope.theta, a.rope.param("factor")) == (full["rope_type"], full["rope_theta"], 8.0)
    assert (a.local_rope.rope_type, a.local_rope.theta) == (local["rope_type"], local["rope_theta"])
    assert a.rope_of(0) == a.local_rope and a.rope_of(2) == a.rope
    assert a.qk_norm and a.post_norms and a.attn_logit_softcap is None and a.final_logit_softcap is None
    default = read_model_spec(_write(tmp_path / "default", GEMMA3))  # sliding_window_pattern 6: layer 5 global
    assert default.layer_windows == (16,) * 5 + (0,)
    assert (default.rope.theta, default.local_rope.theta) == (1e6, 1e4)
    # transformers' Gemma 3 attention never applies attn_logit_softcapping: neither do we
    capped = read_model_spec(_write(tmp_path / "cap", dict(GEMMA3, attn_logit_softcapping=50.0)))
    assert capped.attn_logit_softcap is None


def test_gemma3_rotary_tables_match_transformers_per_layer_type(tmp_path):
    from transformers import AutoModelForCausalLM

    path = _write(tmp_path, dict(GEMMA3, rope_theta=1e6, rope_local_base_freq=1e4,
                                 rope_scaling={"rope_type": "linear", "factor": 8.0}))  # fmt: skip
    spec = read_model_spec(path)
    hf_rotary = AutoModelForCausalLM.from_config(_hf_config(path)).model.rotary_emb
    positions = torch.arange(200)[None, :]
    for layer_type, rope in (("full_attention", spec.rope), ("sliding_attention", spec.local_rope)):
        cos, sin = hf_rotary(torch.zeros(1), positions, layer_type)
        tables = RotaryTables.build(rope, spec.head_dim, 200, torch.device("cpu"))
        torch.testing.assert_close(tables.cos, cos[0], atol=0, rtol=0)
        torch.testing.assert_close(tables.sin, sin[0], atol=0, rtol=0)


def test_gemma1_reads_as_transformers_reads_it(tmp_path):
    legacy = dict(BASE, architectures=["GemmaForCausalLM"], model_type="gemma", hidden_act="gelu")
    legacy.pop("head_dim")
    spec = read_model_spec(_write(tmp_path / "a", legacy))
    assert spec.activation == "gelu_tanh"  # the official configs' "gelu" means the tanh approximation
    assert spec.head_dim == 256 == _hf_config(tmp_path / "a").head_dim  # Gemma's default, not hidden / heads
    assert spec.num_kv_heads == 1 and spec.tie_word_embeddings and not spec.post_norms and not spec.layer_windows
    assert spec.attention_scale == 256**-0.5 and spec.window(3) == 0 and spec.rope_of(3) == spec.rope


@pytest.mark.parametrize(
    "config,error,match",
    [
        (dict(GEMMA2, hidden_activation="relu"), UnsupportedError, "relu.*gelu_pytorch_tanh"),
        (dict(GEMMA3, use_bidirectional_attention=True), UnsupportedError, "bidirectional"),
        (dict(GEMMA2, attention_bias=True), UnsupportedError, "attention_bias"),
        (dict(GEMMA3, layer_types=["chunked_attention"] * 6), UnsupportedError, "chunked_attention"),
        (dict(GEMMA3, layer_types=["full_attention"] * 5), ConfigError, "5 layer_types"),
        (dict(GEMMA3, rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 2.0}}), None, None),
    ],
)
def test_what_the_engine_cannot_run_is_refused_by_name(tmp_path, config, error, match):
    if error is None:  # an unknown rope type is refused when the tables are built, naming it
        spec = read_model_spec(_write(tmp_path, config))
        with pytest.raises(UnsupportedError, match="yarn"):
            RotaryTables.build(spec.rope, spec.head_dim, 8, torch.device("cpu"))
        return
    with pytest.raises(error, match=match):
        read_model_spec(_write(tmp_path, config))


def test_registry_lists_the_gemma_text_models_only():
    assert {forward_class(a).__name__ for a in ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM")} == {
        "GemmaModel"
    }
    with pytest.raises(UnsupportedError, match="Gemma3ForConditionalGeneration.*is not supported by the inferlab engine"):
        forward_class("Gemma3ForConditionalGeneration")


def test_loader_checks_the_gemma_keys(tiny_checkpoint, tmp_path):
    path = shutil.copytree(tiny_checkpoint("tiny-gemma3"), tmp_path / "broken")
    tensors = load_file(str(path / "model.safetensors"))
    del tensors["model.layers.2.pre_feedforward_layernorm.weight"]
    tensors["model.layers.0.self_attn.q_norm.weight"] = torch.zeros(64)
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(InputError) as err:
        load_weights(path, read_model_spec(path), torch.float32, torch.device("cpu"))
    message = str(err.value)
    assert "missing (1): model.layers.2.pre_feedforward_layernorm.weight" in message
    assert "model.layers.0.self_attn.q_norm.weight: [64] (expected [32])" in message
    spec = read_model_spec(tiny_checkpoint("tiny-gemma2"))  # Gemma 2 has no q/k norms: they would be unexpected
    weights = load_weights(tiny_checkpoint("tiny-gemma2"), spec, torch.float32, torch.device("cpu"))
    assert weights.layers[1].pre_mlp_norm.shape == (64,) and weights.layers[1].q_norm is None
    assert weights.lm_head is weights.embed
