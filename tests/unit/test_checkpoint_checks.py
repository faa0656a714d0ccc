"""Damaged or hostile checkpoint folders: one clear error each (the file, the field, the fix), before any
allocation or output file; never a traceback."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from inferlab.cli import main
from inferlab.errors import InputError
from inferlab.models.config import read_model_spec


def damaged(tiny, tmp_path, name, change):
    folder = tmp_path / name
    shutil.copytree(tiny, folder)
    change(folder)
    return folder


def set_field(key, value):
    def change(folder):
        config = json.loads((folder / "config.json").read_text())
        config[key] = value
        (folder / "config.json").write_text(json.dumps(config))
    return change


@pytest.mark.parametrize("key, value, message", [
    ("num_hidden_layers", 1e9, "num_hidden_layers = 1000000000.0 is not a whole number"),
    ("num_hidden_layers", 10**9, "num_hidden_layers = 1,000,000,000 is outside 1..4,096"),
    ("hidden_size", "64", "hidden_size = '64' is not a whole number"),
    ("vocab_size", 0, "vocab_size = 0 is outside 1..16,777,216"),
    ("architectures", "LlamaForCausalLM", "has no 'architectures' list"),
    ("eos_token_id", "x", "has a field of the wrong type"),
])
def test_config_sizes_and_types_are_checked_before_anything_is_sized(tiny_checkpoint, tmp_path, key, value, message):
    folder = damaged(tiny_checkpoint("tiny"), tmp_path, "m", set_field(key, value))
    with pytest.raises(InputError, match="config.json") as refused:
        read_model_spec(folder)
    assert message in str(refused.value)


def _pickle_only(folder):
    weights = load_file(str(folder / "model.safetensors"))
    torch.save(weights, folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


def _truncated(folder):
    weights = folder / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)  # a download cut short


def _replaced_by(target):
    def change(folder):
        (folder / "config.json").unlink()
        (folder / "config.json").symlink_to(target)
    return change


def _weights_loop(folder):
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("model.safetensors")


def _fifo_config(folder):
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")  # reading it would wait forever


CASES = {
    "a list": (lambda folder: (folder / "config.json").write_text("[1, 2, 3]"), "holds a JSON list"),
    "truncated weights": (_truncated, "model.safetensors is truncated"),
    "weights a link loop": (_weights_loop, "model.safetensors cannot be read (Too many levels of symbolic links)"),
    "config.json -> /dev/zero": (_replaced_by("/dev/zero"), "config.json is not a regular file"),
    "config.json a FIFO": (_fifo_config, "config.json is not a regular file"),
    "config.json a dangling link": (_replaced_by("nowhere.json"), "config.json is a symbolic link to a file that "
                                                                  "does not exist"),
    "broken tokenizer": (lambda folder: (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {'),
                         "tokenizer.json is not valid JSON"),
    "pickle only": (_pickle_only, "has no *.safetensors weights (it has pytorch_model.bin: pickle files"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", ["generate", "conformers"])
def test_a_damaged_folder_is_one_message_and_no_file(tiny_checkpoint, tmp_path, capsys, case, command):
    change, message = CASES[case]
    folder = damaged(tiny_checkpoint("tiny"), tmp_path, "m", change)
    work = tmp_path / "work"
    work.mkdir()
    if command == "generate":
        (work / "in.jsonl").write_text('{"id": "a", "prompt": "hello"}\n')
        argv = ["generate", "--input", str(work / "in.jsonl"), "--output", str(work / "out.jsonl")]
    else:
        (work / "in.smi").write_text("CCO ethanol\n")
        argv = ["conformers", "generate", "--input", str(work / "in.smi"), "--output", str(work / "out.sdf")]
    assert main(argv + ["--model", str(folder), "--device", "cpu", "--max-slots", "2"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert sorted(p.name for p in work.iterdir()) == [("in.jsonl" if command == "generate" else "in.smi")]


def test_the_transformers_workloads_check_the_config_too(tiny_checkpoint, tmp_path, capsys):
    folder = damaged(tiny_checkpoint("tiny"), tmp_path, "m", CASES["a list"][0])
    (tmp_path / "in.jsonl").write_text('{"id": "a", "prompt": "hello"}\n')
    assert main(["hidden-states", "--model", str(folder), "--input", str(tmp_path / "in.jsonl"), "--output",
                 str(tmp_path / "h.safetensors"), "--layers", "1", "--device", "cpu"]) == 2
    assert "config.json holds a JSON list" in capsys.readouterr().err
    assert not (tmp_path / "h.safetensors").exists() and not (tmp_path / "h.safetensors.d").exists()
