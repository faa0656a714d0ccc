"""The transformers backend of `inferlab generate` (workloads/hf_text_backend.py): a tiny GPT-2, an
architecture the engine does not implement, falls back under `--backend auto` (with a warning) and its
greedy rows equal transformers' own `generate` run one prompt at a time; `--backend hf` serves a model the
engine supports too; a constrained request or an over-long prompt becomes an error row, not a crash."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
)

from inferlab.cli import main
from inferlab.constraints.program import compile_program
from inferlab.engine import EngineConfig
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
from inferlab.types import Request, SamplingParams
from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE, get_profile
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.text import open_backend

PROMPTS = {"a": "Hello world", "b": "count count count", "c": "x", "d": "The quick brown fox jumps"}
NEW_TOKENS = 6
POSITIONS = 48


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A tiny random GPT-2 (GPT2LMHeadModel: not in the engine's registry) with our built-in tokenizer."""
    out = tmp_path_factory.mktemp("tiny-gpt2")
    tokenizer = build_builtin_tokenizer()
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=POSITIONS, n_embd=32, n_layer=2, n_head=4,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def write_prompts(path, prompts: dict[str, str], **extra) -> None:
    path.write_text("".join(json.dumps({"id": rid, "prompt": text, **extra}) + "\n" for rid, text in prompts.items()))


def read_rows(path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def generate(model, inp, out, *extra) -> int:
    return main(["generate", "--model", str(model), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--dtype", "float32", "--temperature", "0", "--max-new-tokens", str(NEW_TOKENS),
                 "--max-slots", "3", *extra])


def reference_tokens(model_dir, prompts: dict[str, str]) -> dict[str, list[int]]:
    """transformers' greedy generate on each prompt alone (no padding), cut after its first EOS."""
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    eos = tokenizer.eos_token_id
    tokens = {}
    for rid, text in prompts.items():
        ids = torch.tensor([tokenizer(text).input_ids])
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
        new = out[0, ids.shape[1]:].tolist()
        tokens[rid] = new[: new.index(eos) + 1] if eos in new else new
    return tokens


def test_auto_falls_back_to_transformers_for_gpt2(gpt2_dir, tmp_path, caplog):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_prompts(inp, PROMPTS)
    with caplog.at_level(logging.WARNING, logger="inferlab.workloads.text"):
        assert generate(gpt2_dir, inp, out, "--backend", "auto") == 0
    assert any("GPT2LMHeadModel" in r.getMessage() and "falling back" in r.getMessage() for r in caplog.records)
    rows = read_rows(out)
    expected = reference_tokens(gpt2_dir, PROMPTS)
    assert set(rows) == set(PROMPTS)
    for rid, row in rows.items():
        assert row["error"] is None and row["finish_reason"] in ("length", "eos"), row
        assert row["token_ids"] == expected[rid], rid  # batched, left-padded rows equal one prompt alone
        assert row["output_tokens"] == len(expected[rid]) and isinstance(row["text"], str)
    assert generate(gpt2_dir, inp, out, "--backend", "auto") == 0  # a rerun finds every row done
    assert read_rows(out) == rows


def test_inferlab_backend_refuses_gpt2_with_a_pointer_to_hf(gpt2_dir, tmp_path, capsys):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_prompts(inp, {"a": "x"})
    assert generate(gpt2_dir, inp, out, "--backend", "inferlab") == 2
    message = capsys.readouterr().err
    assert "'GPT2LMHeadModel' is not supported by the inferlab engine" in message and "--backend hf" in message


def test_backend_hf_on_a_model_the_engine_supports(tiny_checkpoint, tmp_path):
    model = tiny_checkpoint("tiny")
    prompts = {"a": "Hello world", "b": "count count"}
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_prompts(inp, prompts)
    assert generate(model, inp, out, "--backend", "hf") == 0
    rows = read_rows(out)
    expected = reference_tokens(model, prompts)
    assert {rid: row["token_ids"] for rid, row in rows.items()} == expected
    assert all(row["error"] is None for row in rows.values())


def test_over_long_prompt_and_constrained_request_are_error_results(gpt2_dir, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_prompts(inp, {"ok": "x", "long": "word " * 60, "empty": ""})
    assert generate(gpt2_dir, inp, out, "--backend", "hf") == 0
    rows = read_rows(out)
    assert rows["ok"]["error"] is None and rows["ok"]["token_ids"]
    assert rows["long"]["finish_reason"] == "error" and f"{POSITIONS} positions" in rows["long"]["error"]
    assert rows["empty"]["finish_reason"] == "error" and "empty" in rows["empty"]["error"]

    backend = open_backend("hf", EngineConfig(model=str(gpt2_dir), device="cpu", dtype="float32"))
    tokenizer = build_builtin_tokenizer()
    template = build_template("CO", get_profile(DEFAULT_PROFILE))
    program = compile_program(template.segments, tokenizer)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4)
    results = {r.id: r for r in backend.generate([
        Request("constrained", prompt_ids=tuple(template.prompt_ids(tokenizer)), sampling=greedy, constraint=program),
        Request("plain", prompt="x", sampling=greedy),
    ])}
    assert results["constrained"].finish_reason == "error" and "inferlab engine" in results["constrained"].error
    plain = results["plain"]
    assert plain.error is None and (len(plain.token_ids) == 4 or plain.finish_reason == "eos")


def test_the_engine_config_reader_refuses_gpt2_clearly(gpt2_dir):
    from inferlab.errors import UnsupportedError
    from inferlab.models.config import read_model_spec

    with pytest.raises(UnsupportedError, match="GPT2LMHeadModel"):
        read_model_spec(gpt2_dir)


def test_backend_hf_reads_safetensors_only(gpt2_dir, tmp_path, capsys):
    """A checkpoint whose weights are a pickle (pytorch_model.bin) is refused before it is loaded, as by the
    engine: transformers would unpickle it, and a pickle can run code (only torch's weights_only stood
    in the way). The transformers loader itself asks for safetensors too."""
    from inferlab.errors import InputError
    from inferlab.workloads.hf_loading import from_pretrained_for_inference

    import shutil

    pickled = tmp_path / "pickled"
    shutil.copytree(gpt2_dir, pickled)
    state = AutoModelForCausalLM.from_pretrained(str(gpt2_dir)).state_dict()
    for weights in pickled.glob("*.safetensors"):
        weights.unlink()
    torch.save(state, pickled / "pytorch_model.bin")  # what save_pretrained wrote before safetensors
    inp = tmp_path / "in.jsonl"
    write_prompts(inp, {"a": "Hello"})
    assert generate(pickled, inp, tmp_path / "out.jsonl", "--backend", "hf") == 2
    assert "pickle files, which are never read" in capsys.readouterr().err
    with pytest.raises(InputError, match="no \\*.safetensors weights"):
        from_pretrained_for_inference(AutoModelForCausalLM, pickled, torch.float32, None, torch.device("cpu"))
