"""`inferlab hidden-states` end to end on the tiny preset, checked against transformers' own
`output_hidden_states` for each prompt alone (no padding, batch of one)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModel, AutoTokenizer
from workload_testkit import TEXTS, OomAboveRows, read_jsonl, write_jsonl

from inferlab.cli import main
from inferlab.errors import ConfigError
from inferlab.workloads.hf_loading import ModelLoadConfig
from inferlab.workloads.hidden_states import HiddenStatesOptions, collect_hidden_states, load_base_model

NUM_LAYERS = 2  # the tiny preset


@pytest.fixture(scope="module")
def tiny_dir(tiny_checkpoint):
    return tiny_checkpoint("tiny")


@pytest.fixture(scope="module")
def reference(tiny_dir):
    """pooled hidden state of one prompt through transformers directly: {layer: [hidden]} fp32."""
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModel.from_pretrained(tiny_dir).eval()

    def pooled(text: str, pool: str) -> dict[int, torch.Tensor]:
        ids = torch.tensor([tok(text)["input_ids"]])
        with torch.no_grad():
            states = model(input_ids=ids, output_hidden_states=True).hidden_states  # L+1 x [1, T, H]
        assert len(states) == NUM_LAYERS + 1
        return {i: (h[0, -1] if pool == "last" else h[0].mean(0)) for i, h in enumerate(states)}

    return pooled


@pytest.fixture(scope="module")
def loaded(tiny_dir):
    return load_base_model(ModelLoadConfig(str(tiny_dir), dtype="float32", device="cpu"))


def read_output(path):
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    return json.loads(meta["ids"]), tensors, meta


@pytest.mark.parametrize("pool, backend", [("last", "auto"), ("mean", "auto"), ("mean", "hf")])
def test_cli_pooled_states_match_transformers_per_prompt(tmp_path, tiny_dir, reference, pool, backend, capsys):
    inp = write_jsonl(tmp_path / "p.jsonl", [{"id": k, "prompt": v} for k, v in TEXTS.items()])
    out = tmp_path / "acts.safetensors"
    rc = main(["hidden-states", "--model", str(tiny_dir), "--input", str(inp), "--output", str(out),
               "--layers", "0", "1", "-1", "--pool", pool, "--batch-size", "2", "--device", "cpu",
               "--dtype", "float32", "--backend", backend])
    assert rc == 0
    assert f"backend: {'inferlab' if backend == 'auto' else 'hf'} (" in capsys.readouterr().out
    ids, tensors, meta = read_output(out)
    assert ids == list(TEXTS)  # input order
    assert sorted(tensors) == ["layer_0", "layer_1", "layer_2"]  # -1 resolved to L = 2
    assert meta["pool"] == pool and json.loads(meta["layers"]) == [0, 1, 2]
    for row, key in enumerate(ids):
        expected = reference(TEXTS[key], pool)
        for layer in (0, 1, 2):
            torch.testing.assert_close(tensors[f"layer_{layer}"][row], expected[layer], atol=1e-5, rtol=1e-5)


def test_errors_resume_and_settings_check(tmp_path, loaded, reference):
    keys = list(TEXTS)
    first = [{"id": k, "prompt": TEXTS[k]} for k in keys[:2]]
    later = [{"id": k, "prompt": TEXTS[k]} for k in keys[2:]] + [
        {"id": "empty", "prompt": ""},
        "not json",
        {"id": "over", "prompt": "q" * 250},
    ]
    out = tmp_path / "acts.safetensors"
    options = HiddenStatesOptions(layers=(1,), pool="mean", max_length=200, shard_rows=2, batch_size=8)
    report1 = collect_hidden_states(loaded, write_jsonl(tmp_path / "a.jsonl", first), out, options)
    assert report1.rows_ok == 2 and report1.shards_written == 1
    report2 = collect_hidden_states(loaded, write_jsonl(tmp_path / "b.jsonl", first + later), out, options)
    assert report2.rows_skipped == 2 and report2.rows_ok == 3 and report2.rows_error == 3
    assert report2.shards_written == 2  # shard_rows=2: two chunks of the new input held valid rows
    index = read_jsonl(out.with_name("acts.safetensors.d") / "index.jsonl")
    index_ids = [r["id"] for r in index]
    assert len(index_ids) == len(set(index_ids)) == 8  # each id recorded once across both runs
    errors = {r["id"]: r["error"] for r in index if r["status"] == "error"}
    assert "empty" in errors["empty"] and "not valid JSON" in errors["line-7"] and "over the maximum" in errors["over"]
    ids, tensors, meta = read_output(out)
    assert ids == keys and meta["failed"] == "3"
    for row, key in enumerate(ids):
        torch.testing.assert_close(tensors["layer_1"][row], reference(TEXTS[key], "mean")[1], atol=1e-5, rtol=1e-5)
    with pytest.raises(ConfigError, match="layers=\\[1\\] then, \\[2\\] now"):
        collect_hidden_states(loaded, tmp_path / "b.jsonl", out, HiddenStatesOptions(layers=(2,), pool="mean",
                                                                                     max_length=200, shard_rows=2))


def test_simulated_oom_backs_off_and_every_row_is_written_once(tmp_path, loaded, reference):
    texts = {f"p{i}": ("token " * (i % 5 + 1)) + str(i) for i in range(19)}
    texts["huge"] = "w" * 90  # over the simulated device's 80 tokens even alone
    inp = write_jsonl(tmp_path / "p.jsonl", [{"id": k, "prompt": v} for k, v in texts.items()])
    out = tmp_path / "acts.safetensors"
    inner = loaded.model
    wrapper = OomAboveRows(inner, max_rows=4, max_len=80)
    loaded.model = wrapper
    try:
        report = collect_hidden_states(loaded, inp, out, HiddenStatesOptions(layers=(-1,), pool="last", batch_size=64))
    finally:
        loaded.model = inner
    assert wrapper.batch_rows[0] == 20 and max(wrapper.batch_rows) == 20
    assert report.backoff.oom_events >= 3 and report.rows_ok == 19 and report.rows_error == 1
    ids, tensors, _ = read_output(out)
    assert ids == [k for k in texts if k != "huge"]
    for row, key in enumerate(ids):
        torch.testing.assert_close(tensors["layer_2"][row], reference(texts[key], "last")[2], atol=1e-5, rtol=1e-5)
    index = read_jsonl(out.with_name("acts.safetensors.d") / "index.jsonl")
    assert sorted(r["id"] for r in index) == sorted(texts)  # exactly once each
    assert [r for r in index if r["id"] == "huge"][0]["status"] == "error"


def test_layer_numbers_are_checked(loaded, tmp_path):
    inp = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "prompt": "x"}])
    with pytest.raises(ConfigError, match="layer 3 is out of range"):
        collect_hidden_states(loaded, inp, tmp_path / "o.safetensors", HiddenStatesOptions(layers=(3,)))
    with pytest.raises(ConfigError, match="pool"):
        HiddenStatesOptions(layers=(1,), pool="max")


def test_other_architecture_and_embedding_layer(tmp_path, tiny_checkpoint):
    path = tiny_checkpoint("tiny-qwen2")  # qkv bias, untied norms: hooks find its layers the same way
    loaded_qwen = load_base_model(ModelLoadConfig(str(path), dtype="float32", device="cpu"))
    inp = write_jsonl(tmp_path / "p.jsonl", [{"id": k, "prompt": v} for k, v in TEXTS.items()])
    out = tmp_path / "acts.safetensors"
    collect_hidden_states(loaded_qwen, inp, out, HiddenStatesOptions(layers=(0, -2), pool="mean", batch_size=4))
    ids, tensors, _ = read_output(out)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    for row, key in enumerate(ids):
        with torch.no_grad():
            states = model(input_ids=torch.tensor([tok(TEXTS[key])["input_ids"]]), output_hidden_states=True).hidden_states
        torch.testing.assert_close(tensors["layer_0"][row], states[0][0].mean(0), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(tensors["layer_1"][row], states[1][0].mean(0), atol=1e-5, rtol=1e-5)
