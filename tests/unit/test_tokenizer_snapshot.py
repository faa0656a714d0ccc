"""Tokenizer snapshots (models/tokenizer_snapshot.py): the first load_tokenizer of a folder goes through
transformers and keeps its backend; later loads answer every call the engine, the constraint compiler and
the conformer pipeline make exactly as the transformers tokenizer does, without importing transformers; a
changed folder or a damaged snapshot goes back through transformers; the rest is transformers' own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferlab.constraints.token_automaton import token_texts
from inferlab.models.tokenizer_loading import load_hf_tokenizer, load_tokenizer
from inferlab.models.tokenizer_snapshot import SnapshotTokenizer
from inferlab.workloads.conformers.reference_model import reference_model_dir


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("INFERLAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _texts() -> list[str]:
    from rdkit import RDConfig

    smiles = (Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi").read_text().split("\n")[:400]
    smiles = [line.split()[0] for line in smiles if line.strip()]
    conformer = ("[SMILES]C[C@H](N)C(=O)O[/SMILES][CONFORMER][C]<1.2345,-0.5000,0.0001>[C@H]<-1.0000,0.1234,"
                 "9.9999>[N]<0.0000,0.0000,-12.3456>([C]<2.0,3.0,4.0>)=[O]<...>[/CONFORMER]")
    return smiles + [conformer, conformer + "<|endoftext|>", "hello world<|endoftext|><|im_start|>user\nhi",
                     " \u00e9\u4e2d\U0001f600 \t\n  x", "", "1234567890.5,-3", "   leading and trailing   "]


@pytest.mark.parametrize("which", ["qwen3-chem", "reference model", "builtin"])
def test_a_snapshot_answers_as_transformers_does(which, cache, qwen3_chem_dir, tiny_checkpoint):
    folder = {"qwen3-chem": qwen3_chem_dir, "reference model": reference_model_dir()}.get(which) \
        or tiny_checkpoint("tiny")
    first = load_tokenizer(folder)  # through transformers; keeps the snapshot
    assert not isinstance(first, SnapshotTokenizer) and list((cache / "tokenizers").glob("*.backend.json"))
    snap, hf = load_tokenizer(folder), load_hf_tokenizer(folder)
    assert isinstance(snap, SnapshotTokenizer)
    assert len(snap) == len(hf) and snap.vocab_size == hf.vocab_size and snap.get_vocab() == hf.get_vocab()
    for name in ("eos_token", "eos_token_id", "pad_token", "pad_token_id", "bos_token", "bos_token_id",
                 "padding_side"):
        assert getattr(snap, name) == getattr(hf, name), name
    assert {i: (t.content, t.special) for i, t in snap.added_tokens_decoder.items()} == \
        {i: (t.content, t.special) for i, t in hf.added_tokens_decoder.items()}
    texts = _texts()
    assert snap(texts).input_ids == hf(texts).input_ids
    for add in (False, True):  # the constraint compiler's call (constraints/program.py): ids with offsets
        ours, theirs = snap(texts, add_special_tokens=add, return_offsets_mapping=True), \
            hf(texts, add_special_tokens=add, return_offsets_mapping=True)
        assert ours["offset_mapping"] == [list(o) for o in theirs["offset_mapping"]]
        assert ours["input_ids"] == theirs["input_ids"]
        assert snap(texts[0], return_offsets_mapping=True)["offset_mapping"] == \
            list(hf(texts[0], return_offsets_mapping=True)["offset_mapping"])
    for text in texts:
        ids = hf(text).input_ids
        assert snap(text).input_ids == ids and snap(text)["attention_mask"] == hf(text)["attention_mask"]
        assert snap.encode(text, add_special_tokens=False) == hf.encode(text, add_special_tokens=False)
        for skip in (False, True):
            assert snap.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)
    every = list(range(0, len(hf), max(1, len(hf) // 3000)))
    assert snap.convert_ids_to_tokens(every) == hf.convert_ids_to_tokens(every)
    assert snap.batch_decode([[i] for i in every]) == hf.batch_decode([[i] for i in every])
    assert token_texts(snap) == token_texts(hf)  # the constraint compiler's view of the vocabulary


def test_the_rest_is_answered_by_transformers(cache, qwen3_chem_dir):
    load_tokenizer(qwen3_chem_dir)
    snap, hf = load_tokenizer(qwen3_chem_dir), load_hf_tokenizer(qwen3_chem_dir)
    messages = [{"role": "user", "content": "CCO"}]
    template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>{% endfor %}"
    assert snap.apply_chat_template(messages, chat_template=template) == \
        hf.apply_chat_template(messages, chat_template=template)
    padded = snap(["CCO", "c1ccccc1O"], padding=True)
    assert padded["input_ids"] == hf(["CCO", "c1ccccc1O"], padding=True)["input_ids"]


def test_a_changed_folder_or_a_damaged_snapshot_loads_through_transformers(cache, qwen3_chem_dir, tmp_path, caplog):
    folder = tmp_path / "tok"
    folder.mkdir()
    for f in Path(qwen3_chem_dir).iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    load_tokenizer(folder)
    assert isinstance(load_tokenizer(folder), SnapshotTokenizer)
    config = folder / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"model_max_length": 131072', '"model_max_length": 4096'))
    changed = load_tokenizer(folder)  # another key: a new snapshot, not the old one
    assert not isinstance(changed, SnapshotTokenizer) and changed.model_max_length == 4096
    assert load_tokenizer(folder).model_max_length == 4096
    for backend in (cache / "tokenizers").glob("*.backend.json"):
        backend.write_text('{"version": ')  # a crash mid-write
    assert not isinstance(load_tokenizer(folder), SnapshotTokenizer) and "unreadable" in caplog.text
    assert isinstance(load_tokenizer(folder), SnapshotTokenizer)  # rewritten by that load


def test_snapshots_off_and_a_tokenizer_with_clean_up_always_load_through_transformers(cache, qwen3_chem_dir,
                                                                                       tmp_path, monkeypatch):
    monkeypatch.setenv("INFERLAB_TOKENIZER_SNAPSHOTS", "0")
    load_tokenizer(qwen3_chem_dir)
    assert not isinstance(load_tokenizer(qwen3_chem_dir), SnapshotTokenizer) and not cache.exists()
    monkeypatch.delenv("INFERLAB_TOKENIZER_SNAPSHOTS")
    folder = tmp_path / "tok"
    folder.mkdir()
    for f in Path(qwen3_chem_dir).iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = folder / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"clean_up_tokenization_spaces": false',
                                                 '"clean_up_tokenization_spaces": true'))
    load_tokenizer(folder)
    assert not isinstance(load_tokenizer(folder), SnapshotTokenizer)


def test_a_snapshot_load_imports_no_transformers(cache, qwen3_chem_dir):
    """Nor does what a preparing process does with it: a molecule's prompt and constraint program."""
    load_tokenizer(qwen3_chem_dir)
    code = ("import sys\nfrom inferlab.models.tokenizer_loading import load_tokenizer\n"
            "from inferlab.workloads.conformers.pipeline.prepare import _load_state, prepare_with\n"
            f"tok = load_tokenizer({str(qwen3_chem_dir)!r})\n"
            f"prepared = prepare_with(_load_state({str(qwen3_chem_dir)!r}, 'v3-fixed4'), 'C[C@H](N)C(=O)O')\n"
            "assert prepared.error is None and prepared.program is not None, prepared.error\n"
            "print(type(tok).__name__, any(m.startswith('transformers') for m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["SnapshotTokenizer", "False"]
