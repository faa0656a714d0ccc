"""The shipped trained classifier: its labelled set (RDKit's NCI molecules -> aromatic rings), the recipe
(deterministic, and past a stated accuracy on a tiny budget), the preset built from the shipped weights, and the
held-out texts a classify cell reads."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from inferlab.errors import ConfigError
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
from inferlab.models.checkpoint_init import init_checkpoint
from inferlab.models.trained import file_sha256, weights_path
from inferlab.models.trained.aromatic_rings import HELD_OUT_EVERY, LABELS, aromatic_ring_class, aromatic_ring_set
from inferlab.models.trained.recipe import Recipe, accuracy, save_weights, state_bytes, train


def test_the_labelled_set_is_rdkits_nci_file_labelled_by_its_aromatic_rings():
    assert aromatic_ring_class("CCO") == 0
    assert aromatic_ring_class("C1=CC=CC=C1O") == 1  # Kekulé benzene: RDKit perceives the ring
    assert aromatic_ring_class("C1=CC=C2C=CC=CC2=C1") == 2  # naphthalene
    assert aromatic_ring_class("C1=CC=C2C=C3C=CC=CC3=CC2=C1") == 2  # anthracene: "two or more"
    assert aromatic_ring_class("C1CCCCC1") == 0 and aromatic_ring_class("not a smiles") is None
    labelled = aromatic_ring_set()
    assert len(labelled.train) + len(labelled.test) == 4991  # 4,999 lines, 8 that RDKit cannot read
    assert all(int(r.id) % HELD_OUT_EVERY == 0 for r in labelled.test)
    assert not {r.id for r in labelled.test} & {r.id for r in labelled.train}
    for split in (labelled.train, labelled.test):
        shares = [sum(r.label == k for r in split) / len(split) for k in range(len(LABELS))]
        assert all(0.25 < s < 0.45 for s in shares), shares  # about a third each: no class is a free guess
    aromatic_atom = re.compile(r"(?<![A-Z])[bcnops]")  # a lowercase atom, not the second letter of Cl, Co, Zn...
    assert not any(aromatic_atom.search(r.text) for r in labelled.train + labelled.test)  # Kekulé: not spelled out


@pytest.mark.slow
def test_the_recipe_is_deterministic():
    a, _ = train(Recipe(steps=3, batch_size=8))
    b, _ = train(Recipe(steps=3, batch_size=8))
    wa, wb = state_bytes(a), state_bytes(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    c, _ = train(Recipe(steps=3, batch_size=8, seed=1))
    assert any(not torch.equal(wa[k], v) for k, v in state_bytes(c).items())


def test_the_weights_file_is_the_same_bytes_for_the_same_weights(tmp_path):
    weights = {"b": torch.ones(3, dtype=torch.bfloat16), "a": torch.zeros(2, 2, dtype=torch.bfloat16)}
    for name in ("one", "two", "three"):
        save_weights(weights, tmp_path / name, Recipe(steps=7), 0.5, 10)
    assert len({file_sha256(tmp_path / name) for name in ("one", "two", "three")}) == 1


@pytest.mark.slow
def test_the_recipe_learns_the_task_on_a_tiny_budget():
    """40 steps of 16 rows (a sixth of a pass) reach 84% on the first 200 held-out rows here; the majority class
    is 35%. The stated bound leaves room for another CPU's rounding."""
    model, tokenizer = train(Recipe(steps=40, batch_size=16))
    assert accuracy(model, tokenizer, aromatic_ring_set().test[:200]) >= 0.75


@pytest.mark.slow
def test_the_preset_carries_the_shipped_weights_and_they_classify_held_out_molecules(tmp_path):
    shipped = weights_path("qwen2-cls-aromatic")
    with safe_open(str(shipped), "pt") as f:
        facts = json.loads(f.metadata()["inferlab"])
    assert facts["held_out_accuracy"] >= 0.97 and facts["held_out_rows"] == 997 and facts["recipe"]["steps"] == 400
    out = init_checkpoint("qwen2-cls-aromatic", tmp_path / "ckpt", seed=5, dtype="bfloat16")  # the seed is unused
    record = json.loads((out / "inferlab_preset.json").read_text())
    assert record["trained_weights"] == {"name": "qwen2-cls-aromatic", "sha256": file_sha256(shipped)}
    written, ours = load_file(out / "model.safetensors"), load_file(shipped)
    assert written.keys() == ours.keys() and all(torch.equal(written[k], ours[k]) for k in ours)
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(out, dtype=torch.float32)
    assert list(model.config.id2label.values()) == list(LABELS)
    assert accuracy(model, build_builtin_tokenizer(), aromatic_ring_set().test[:300]) >= 0.95


def test_a_trained_preset_refuses_another_tokenizer(tmp_path):
    with pytest.raises(ConfigError, match="trained with the built-in tokenizer.*leave out --tokenizer"):
        init_checkpoint("qwen2-cls-aromatic", tmp_path / "x", tokenizer_dir=tmp_path)
    assert not (tmp_path / "x").exists()


def test_a_cell_reads_the_held_out_rows_in_its_token_range_or_says_how_many_there_are():
    from inferlab.bench.scenarios.classify_texts import cell_texts

    tokenizer = build_builtin_tokenizer()
    texts, labels = cell_texts("nci-aromatic-rings", tokenizer, 5, 30, 40, seed=0, distribution="uniform")
    by_text = {r.text: r.label for r in aromatic_ring_set().test}
    assert [by_text[t] for t in texts] == labels and len(texts) == 5
    assert all(30 <= len(tokenizer(t)["input_ids"]) <= 40 for t in texts)
    with pytest.raises(ConfigError, match=r"has 997 held-out rows of 1-512 tokens, fewer than num_samples=2000"):
        cell_texts("nci-aromatic-rings", tokenizer, 2000, 1, 512, seed=0, distribution="uniform")


def test_the_trained_weights_are_package_data():
    """A wheel carries the weights only if pyproject names them."""
    from pathlib import Path

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert "*.safetensors" in pyproject["tool"]["setuptools"]["package-data"]["inferlab.models.trained"]
    assert weights_path("qwen2-cls-aromatic").stat().st_size <= 5 * 1024 * 1024  # small enough to commit


def test_the_labs_cache_keeps_a_trained_presets_checkpoint_apart_per_weights(tmp_path):
    """Retrained weights get a fresh build; a random preset's folder keeps its name."""
    from inferlab.bench.model_refs import preset_cache_dir

    digest = file_sha256(weights_path("qwen2-cls-aromatic"))
    trained = preset_cache_dir(tmp_path, "qwen2-cls-aromatic", "")
    assert trained.name == f"qwen2-cls-aromatic-seed0-builtin-weights-{digest[:12]}"
    assert preset_cache_dir(tmp_path, "tiny-qwen2-cls", "").name == "tiny-qwen2-cls-seed0-builtin"
