"""Every path that meets a model the engine does not run ends in one line (no traceback) naming a fix the
command has: `conformers generate`, which has no other backend, never advises `--backend hf`; `generate`
advises it only where transformers knows the model, and an unknown model_type is one line, not
transformers' traceback."""

from __future__ import annotations

import json

import pytest

from inferlab.cli import main

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
         "max_position_embeddings": 512, "rms_norm_eps": 1e-6}


def _checkpoint(tmp_path, name, config):
    """config.json and a whole (if tiny) safetensors file: every backend checks the weights before the model."""
    import numpy as np
    from safetensors.numpy import save_file

    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file({"placeholder": np.zeros(1, dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("config", [
    {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2},
    {**LLAMA, "mlp_bias": True},
], ids=["gpt2", "llama-mlp-bias"])
def test_conformers_never_advise_a_backend_flag_they_do_not_have(tmp_path, capsys, config):
    model = _checkpoint(tmp_path, "m", config)
    (tmp_path / "in.smi").write_text("CCO ethanol\n")
    code = main(["conformers", "generate", "--model", str(model), "--input", str(tmp_path / "in.smi"),
                 "--output", str(tmp_path / "out.sdf")])
    line = _one_line_error(capsys)
    assert code == 2 and "--backend" not in line and "is not supported by the inferlab engine" in line
    assert "conformer generation runs on the inferlab engine alone" in line


def test_an_unknown_model_type_is_one_line_naming_the_fixes(tmp_path, capsys):
    model = _checkpoint(tmp_path, "weird", {**LLAMA, "architectures": ["FooForCausalLM"], "model_type": "foo-bar"})
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "hi"}\n')
    code = main(["generate", "--model", str(model), "--input", str(prompts), "--output", str(tmp_path / "o.jsonl")])
    line = _one_line_error(capsys)
    assert code == 2 and "model_type 'foo-bar', which transformers" in line and "pip install -U transformers" in line
    assert "--backend hf" not in line and "inferlab model presets" in line

    texts = tmp_path / "t.jsonl"
    texts.write_text('{"id": "a", "text": "hi"}\n')
    code = main(["classify", "--model", str(model), "--input", str(texts), "--output", str(tmp_path / "c.jsonl"),
                 "--backend", "inferlab"])
    line = _one_line_error(capsys)
    assert code == 2 and "transformers cannot run it either" in line and "--backend hf" not in line


def test_generate_on_the_engine_alone_names_the_hf_backend_where_transformers_runs_the_model(tmp_path, capsys):
    model = _checkpoint(tmp_path, "m", {**LLAMA, "mlp_bias": True})
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt_ids": [5, 6]}\n')
    code = main(["generate", "--model", str(model), "--input", str(prompts), "--output", str(tmp_path / "o.jsonl"),
                 "--backend", "inferlab"])
    line = _one_line_error(capsys)
    assert code == 2 and "mlp_bias=true is not supported by the inferlab engine; --backend hf" in line
