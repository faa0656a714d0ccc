"""Checkpoint loading: every key and shape checked (one error listing all problems), fusion, sharding."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from inferlab.errors import InputError
from inferlab.models.config import read_model_spec
from inferlab.models.loader import load_weights

CPU = torch.device("cpu")


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_fused_weights_equal_the_checkpoint_tensors(tiny_checkpoint):
    path = tiny_checkpoint("tiny-qwen2")
    spec = read_model_spec(path)
    w = load_weights(path, spec, torch.float32, CPU)
    raw = load_file(str(path / "model.safetensors"))
    a = "model.layers.1.self_attn."
    expected_qkv = torch.cat([raw[a + "q_proj.weight"], raw[a + "k_proj.weight"], raw[a + "v_proj.weight"]])
    torch.testing.assert_close(w.layers[1].qkv, expected_qkv, atol=0, rtol=0)
    torch.testing.assert_close(
        w.layers[1].qkv_bias,
        torch.cat([raw[a + "q_proj.bias"], raw[a + "k_proj.bias"], raw[a + "v_proj.bias"]]),
        atol=0,
        rtol=0,
    )
    m = "model.layers.1.mlp."
    torch.testing.assert_close(w.layers[1].gate_up, torch.cat([raw[m + "gate_proj.weight"], raw[m + "up_proj.weight"]]))
    assert w.lm_head is w.embed  # tied


def test_dtype_cast_and_untied_head(tiny_checkpoint):
    path = tiny_checkpoint("tiny-llama3-rope")
    w = load_weights(path, read_model_spec(path), torch.bfloat16, CPU)
    assert w.embed.dtype == torch.bfloat16 and w.lm_head is not w.embed
    raw = load_file(str(path / "model.safetensors"))
    torch.testing.assert_close(w.lm_head, raw["lm_head.weight"].to(torch.bfloat16), atol=0, rtol=0)


def test_every_problem_is_listed_in_one_error(tiny_checkpoint, tmp_path):
    path = _copy(tiny_checkpoint("tiny"), tmp_path / "broken")
    tensors = load_file(str(path / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    tensors["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(3, 64)
    tensors["model.layers.0.extra.weight"] = torch.zeros(2)
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.zeros(8)  # old exports: ignored
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(InputError) as err:
        load_weights(path, read_model_spec(path), torch.float32, CPU)
    message = str(err.value)
    assert "missing (1): model.layers.1.mlp.up_proj.weight" in message
    assert "unexpected (1): model.layers.0.extra.weight" in message
    assert "model.layers.0.self_attn.q_proj.weight: [3, 64] (expected [64, 64])" in message
    assert "inv_freq" not in message


def test_a_config_that_lies_about_the_shape_is_caught(tiny_checkpoint, tmp_path):
    path = _copy(tiny_checkpoint("tiny"), tmp_path / "lying")
    config = json.loads((path / "config.json").read_text())
    config["intermediate_size"] = 96
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="wrong shape \\(6\\)"):  # gate, up, down in both layers
        load_weights(path, read_model_spec(path), torch.float32, CPU)


def test_sharded_checkpoint_loads_like_the_single_file(tiny_checkpoint, tmp_path):
    single = tiny_checkpoint("tiny")
    path = _copy(single, tmp_path / "sharded")
    tensors = load_file(str(path / "model.safetensors"))
    (path / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(path / file))
        weight_map |= {k: file for k in keys}
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    spec = read_model_spec(path)
    a = load_weights(single, spec, torch.float32, CPU)
    b = load_weights(path, spec, torch.float32, CPU)
    torch.testing.assert_close(a.layers[1].qkv, b.layers[1].qkv, atol=0, rtol=0)
    torch.testing.assert_close(a.embed, b.embed, atol=0, rtol=0)


def test_no_safetensors_is_a_clear_error(tmp_path, tiny_checkpoint):
    path = _copy(tiny_checkpoint("tiny"), tmp_path / "empty")
    (path / "model.safetensors").unlink()
    with pytest.raises(InputError, match="no \\*.safetensors"):
        load_weights(path, read_model_spec(path), torch.float32, CPU)
