"""load_hf_tokenizer: the class named by tokenizer_config.json loads the tokenizer AutoTokenizer would,
without importing the auto-model machinery (torch among it); folders it cannot decide go to AutoTokenizer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferlab.models.tokenizer_loading import load_hf_tokenizer, tokenizer_class_of

SAMPLES = ["[CONFORMER] C 1.234 -0.500 2.000", "CC(=O)Oc1ccccc1C(=O)O", "hello world<|endoftext|>", " \u00e9\u4e2d\U0001f600"]


def _same_tokenizer(a, b) -> None:
    assert type(a) is type(b)
    assert len(a) == len(b) and a.eos_token_id == b.eos_token_id and a.pad_token_id == b.pad_token_id
    for text in SAMPLES:
        assert a(text)["input_ids"] == b(text)["input_ids"]
    ids = list(range(0, len(a), max(1, len(a) // 500)))
    assert a.convert_ids_to_tokens(ids) == b.convert_ids_to_tokens(ids)


@pytest.mark.parametrize("which", ["qwen3-chem", "builtin"])
def test_same_tokenizer_as_auto_tokenizer(which, qwen3_chem_dir, tiny_checkpoint):
    from transformers import AutoTokenizer

    folder = qwen3_chem_dir if which == "qwen3-chem" else tiny_checkpoint("tiny")
    assert tokenizer_class_of(Path(folder)) is not None  # the fast path is taken for both
    _same_tokenizer(load_hf_tokenizer(folder), AutoTokenizer.from_pretrained(str(folder)))


def test_without_a_named_class_auto_tokenizer_decides(tmp_path: Path, qwen3_chem_dir):
    folder = tmp_path / "tok"
    folder.mkdir()
    for f in Path(qwen3_chem_dir).iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "NoSuchTokenizerInTransformers"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert tokenizer_class_of(folder) is None
    config.pop("tokenizer_class")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert tokenizer_class_of(folder) is None


def test_loading_imports_no_torch(qwen3_chem_dir):
    """The point of the module: AutoTokenizer's import pulls torch and the generation stack (13.5 s on the
    H100 host); the class-direct load must not."""
    code = ("import sys\nfrom inferlab.models.tokenizer_loading import load_hf_tokenizer\n"
            f"load_hf_tokenizer({str(qwen3_chem_dir)!r})\n"
            "heavy = sorted(m for m in sys.modules if m == 'torch' or m.startswith('transformers.generation'))\n"
            "print(','.join(heavy))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
