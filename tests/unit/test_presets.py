import json

import pytest
from safetensors.torch import load_file
from transformers import AutoConfig, AutoTokenizer

from inferlab.cli import main
from inferlab.errors import ConfigError, InputError
from inferlab.models.checkpoint_init import init_checkpoint
from inferlab.models.presets import PRESETS, get_preset


def test_every_preset_builds_a_config():
    for name, preset in PRESETS.items():
        config = preset.make_config()
        assert config.vocab_size > 0, name


def test_large_shapes_match_the_issue():
    c = get_preset("llama-380m").make_config()
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (1024, 16, 16, 8)
    assert (c.head_dim, c.intermediate_size, c.vocab_size, c.max_position_embeddings) == (64, 4096, 128256, 2048)
    rope = getattr(c, "rope_parameters", None) or {"rope_theta": c.rope_theta}  # transformers 5 vs 4
    assert c.tie_word_embeddings and rope["rope_theta"] == 500000.0
    q = get_preset("qwen3-0.6b").make_config()
    assert (q.hidden_size, q.num_hidden_layers, q.head_dim, q.intermediate_size, q.vocab_size) == (1024, 28, 128, 3072, 151936)
    g = get_preset("gemma-2b").make_config()  # google/gemma-2b's config.json
    assert (g.hidden_size, g.num_hidden_layers, g.num_attention_heads, g.num_key_value_heads) == (2048, 18, 8, 1)
    assert (g.head_dim, g.intermediate_size, g.vocab_size, g.max_position_embeddings) == (256, 16384, 256000, 8192)
    assert g.hidden_act == "gelu_pytorch_tanh" and g.tie_word_embeddings and g.rms_norm_eps == 1e-6
    rope = getattr(g, "rope_parameters", None) or {"rope_theta": g.rope_theta}
    assert rope["rope_theta"] == 10000.0


def test_the_conformer_reference_shape_is_the_issues():
    c = get_preset("conformer-ref-shape").make_config()  # issue 27: the trained reference model's shape
    heads = (c.num_attention_heads, c.num_key_value_heads, c.head_dim)
    assert (c.hidden_size, c.num_hidden_layers, heads) == (256, 8, (4, 2, 64))
    assert (c.intermediate_size, c.vocab_size, c.max_position_embeddings) == (1024, 4096, 2048)
    assert c.tie_word_embeddings and c.model_type == "qwen3"
    attention = c.hidden_size * (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim * 2  # qkv and o
    per_layer = attention + 3 * c.hidden_size * c.intermediate_size
    assert 8e6 <= c.num_hidden_layers * per_layer + c.vocab_size * c.hidden_size <= 10e6


def test_unknown_preset_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="choose one of: tiny"):
        get_preset("llama-9000")


def test_init_is_deterministic_and_complete(tmp_path):
    a = init_checkpoint("tiny", tmp_path / "a", seed=3, dtype="float32")
    b = init_checkpoint("tiny", tmp_path / "b", seed=3, dtype="float32")
    c = init_checkpoint("tiny", tmp_path / "c", seed=4, dtype="float32")
    wa, wb, wc = (load_file(p / "model.safetensors") for p in (a, b, c))
    assert wa.keys() == wb.keys()
    assert all((wa[k] == wb[k]).all() for k in wa)
    assert any((wa[k] != wc[k]).any() for k in wa)
    config = AutoConfig.from_pretrained(a)
    tok = AutoTokenizer.from_pretrained(a)
    assert config.eos_token_id == tok.eos_token_id and len(tok) <= config.vocab_size
    assert json.loads((a / "inferlab_preset.json").read_text())["seed"] == 3


def test_init_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("keep me")
    with pytest.raises(InputError, match="not empty"):
        init_checkpoint("tiny", tmp_path / "x")


def test_cli_init_with_the_qwen3_chem_tokenizer(tmp_path, qwen3_chem_dir):
    rc = main(["model", "init", "--preset", "tiny-qwen3", "--out", str(tmp_path / "m"), "--tokenizer", str(qwen3_chem_dir)])
    assert rc == 0
    tok = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert len(tok) == 151673 and tok.eos_token_id == 151643


def test_builtin_tokenizer_groups_digits_like_llama3(tiny_checkpoint):
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint("tiny"))
    pieces = [tok.decode([i]) for i in tok.encode("[C]<-2.7704,1.2345>", add_special_tokens=False)]
    assert pieces == ["[", "C", "]<", "-", "2", ".", "770", "4", ",", "1", ".", "234", "5", ">"]
