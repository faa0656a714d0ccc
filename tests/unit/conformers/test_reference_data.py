"""The reference model's data, piece by piece (no full build): the scaffold split (deterministic, large groups
in train, acyclic molecules apart, shares near their targets, its file), the probe coordinates, one molecule's
texts (each conformer text is the pipeline's template filled with its blocks, in canonical orientation, and
valid for its constraint program; a held-out molecule gets none), the token store and the batches."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from rdkit import Chem

from inferlab.constraints.grammars import GRAMMARS
from inferlab.errors import InputError
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.training.batches import IGNORE, batch_arrays, epoch_batches, padded_length
from inferlab.workloads.conformers.training.conformer_texts import (
    NUM_CONFORMERS,
    PROBE_SIGNS,
    TextMaker,
    probe_blocks,
)
from inferlab.workloads.conformers.training.scaffold_split import (
    HELD_OUT,
    SHARES,
    TRAIN,
    VALIDATION,
    SplitRow,
    assign_splits,
    group_key,
    held_out_smi_text,
    read_split,
    split_text,
)
from inferlab.workloads.conformers.training.token_store import read_token_store, token_store, write_token_store


def test_the_split_is_by_group_deterministic_and_near_its_shares():
    keys = [f"scaffold-{k % 3000}" for k in range(9000)] + ["c1ccccc1"] * 1500  # one group of 14%
    splits = assign_splits(keys, seed=5)
    assert splits == assign_splits(keys, seed=5) and splits != assign_splits(keys, seed=6)
    by_key = {}
    for key, split in zip(keys, splits):
        assert by_key.setdefault(key, split) == split  # a group never straddles two splits
    assert by_key["c1ccccc1"] == TRAIN
    shares = {split: n / len(keys) for split, n in Counter(splits).items()}
    for split in (TRAIN, VALIDATION, HELD_OUT):
        assert abs(shares[split] - SHARES[split]) < 0.02, shares
    assert group_key("CCO", "") == "acyclic:CCO" and group_key("c1ccccc1O", "c1ccccc1") == "c1ccccc1"


def test_the_split_file_round_trips_and_refuses_another_file(tmp_path):
    rows = [SplitRow("nci:1", "nci", "CCO", 3, "", TRAIN),
            SplitRow("nci:2", "nci", "c1ccccc1", 6, "c1ccccc1", HELD_OUT)]
    path = tmp_path / "split.tsv"
    path.write_text(split_text(rows))
    assert read_split(path) == rows
    path.write_text("smiles\tname\nCCO\tethanol\n")
    with pytest.raises(InputError, match="not a split file"):
        read_split(path)


def test_the_held_out_molecules_file_takes_the_sources_in_turn_and_matches_the_committed_split():
    rows = [SplitRow("nci:1", "nci", "CCO", 3, "", HELD_OUT), SplitRow("nci:2", "nci", "CCN", 3, "", HELD_OUT),
            SplitRow("nci:3", "nci", "CCC", 3, "", TRAIN), SplitRow("nci:4", "nci", "CCS", 3, "", HELD_OUT),
            SplitRow("chembl_drugs:1", "chembl_drugs", "C[C@H](N)O", 4, "", HELD_OUT)]
    assert held_out_smi_text(rows).splitlines() == ["CCO nci:1", "C[C@H](N)O chembl_drugs:1", "CCN nci:2",
                                                    "CCS nci:4"]
    from inferlab.workloads.conformers.reference_model import HELD_OUT_FILE, SPLIT_FILE

    assert HELD_OUT_FILE.read_text() == held_out_smi_text(read_split(SPLIT_FILE))  # the committed pair agrees


def test_probe_coordinates_are_fixed4_blocks_with_the_signs_asked():
    import random

    block = re.compile(GRAMMARS["coord3-fixed4"])
    for sign in PROBE_SIGNS:
        blocks = probe_blocks(200, random.Random(1), sign)
        assert all(block.fullmatch(b) for b in blocks) and "-0.0000" not in ",".join(blocks)
        values = [float(v) for b in blocks for v in b.split(",")]
        assert all(abs(v) < 100 for v in values)
        negatives = sum(v < 0 for v in values)
        assert {"positive": negatives == 0, "negative": negatives == len(values) - values.count(0.0),
                "random": 0 < negatives < len(values)}[sign]


@pytest.fixture(scope="module")
def maker(qwen3_chem_dir):
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.models.tokenizer_loading import load_tokenizer

    tokenizer = load_tokenizer(qwen3_chem_dir)
    return TextMaker(tokenizer, grammar_set_for(tokenizer), seed=3)


def test_a_molecules_texts_are_the_templates_fills_in_canonical_orientation(maker):
    smiles = Chem.MolToSmiles(Chem.MolFromSmiles("C[C@H](N)C(=O)Oc1ccccc1"))  # a stereo centre, a ring, branches
    texts = maker.make("t:1", smiles, TRAIN)
    assert texts.dropped_at is None and len(texts.conformers) == NUM_CONFORMERS and len(texts.probes) == 3
    profile = get_profile("v3-fixed4")
    template = build_template(smiles, profile)
    assert texts.prompt == template.prompt
    for text in texts.conformers:
        blocks = re.findall(r"<([^<>]*)>", text)
        assert text == template.fill(blocks)  # what the constrained decoder writes for these coordinates
        mol = template.check(text, profile).mol
        xyz = mol.GetConformer().GetPositions()
        assert np.abs(xyz.mean(axis=0)).max() < 1e-3  # centroid at the origin (up to the 4-decimal cut)
        inertia = np.cov(xyz.T)
        assert np.abs(inertia - np.diag(np.diag(inertia))).max() < 1e-3  # principal axes on x, y, z
    assert len(set(texts.conformers)) == NUM_CONFORMERS
    assert maker.make("t:1", smiles, TRAIN).conformers == texts.conformers  # seeded by the recipe's seed


def test_a_held_out_molecule_has_probes_but_no_conformer_text(maker):
    texts = maker.make("t:2", "CCOC(=O)c1ccccc1", HELD_OUT)
    assert texts.dropped_at is None and texts.conformers == [] and len(texts.probes) == 3


def test_a_molecule_the_data_cannot_use_is_dropped_with_the_stage(maker):
    texts = maker.make("t:3", "OC(=O)[C@@H](C)N", TRAIN)  # not in canonical form (C[C@H](N)C(=O)O)
    assert texts.dropped_at == "canonical form" and "not stable" in texts.error


def test_the_token_store_round_trips(tmp_path):
    store = token_store([[5, 6, 7], [8], [9, 10]], [1, 1, 0])
    write_token_store(tmp_path / "s.npz.xz", store)
    back = read_token_store(tmp_path / "s.npz.xz")
    assert [back.sequence(i).tolist() for i in range(3)] == [[5, 6, 7], [8], [9, 10]]
    assert back.prompt_lengths.tolist() == [1, 1, 0] and back.tokens.dtype == np.uint16
    with pytest.raises(InputError, match="uint16"):
        token_store([[70000]], [0])


def test_batches_cover_an_epoch_within_the_budget_with_the_conformer_tokens_as_labels():
    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 400, size=500)
    store = token_store([rng.integers(1, 300, size=n) for n in lengths], [20] * len(lengths))
    batches = epoch_batches(store.lengths, 4096, np.random.default_rng(1))
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    assert all(len(b) * padded_length(int(store.lengths[b].max())) <= 4096 for b in batches)
    assert [b.tolist() for b in batches] == [b.tolist() for b in epoch_batches(store.lengths, 4096,
                                                                                 np.random.default_rng(1))]
    ids, labels = batch_arrays(store, batches[0], pad_id=0)
    for r, row in enumerate(batches[0]):
        n = int(store.lengths[row])
        assert ids[r, :n].tolist() == store.sequence(int(row)).tolist() and (ids[r, n:] == 0).all()
        assert (labels[r, :20] == IGNORE).all() and (labels[r, n:] == IGNORE).all()
        assert labels[r, 20:n].tolist() == store.sequence(int(row))[20:].tolist()
