"""The reference model's data, piece by piece (no full build): the scaffold split (deterministic, large groups
in train, acyclic molecules apart, shares near their targets, its file), the probe coordinates, one molecule's
texts (each conformer text is the pipeline's template filled with its blocks, in canonical orientation, and
valid for its constraint program; a held-out molecule gets none), its stereo variants (the mirror image of a
chiral molecule decodes strictly to the inverted tags' stereo, E/Z kept; none for a meso or unspecified
molecule; open stereo read from each conformer; deterministic; cut exactly by the reduced tokenizer), the
token store and the batches."""

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
    assert [back.stereo_tokens(i).tolist() for i in range(3)] == [[], [], []]
    with pytest.raises(InputError, match="uint16"):
        token_store([[70000]], [0])


def test_the_stereo_positions_travel_with_their_sequences_into_the_batch_mask(tmp_path):
    store = token_store([[5, 6, 7, 8], [8, 9], [9, 10, 11]], [1, 1, 1], [[2, 3], [], [1]])
    write_token_store(tmp_path / "s.npz.xz", store)
    back = read_token_store(tmp_path / "s.npz.xz")
    assert [back.stereo_tokens(i).tolist() for i in range(3)] == [[2, 3], [], [1]]
    _, labels, stereo = batch_arrays(back, np.array([2, 0]), pad_id=0)
    assert stereo.tolist() == [[False, True, False, False, False, False, False, False],
                               [False, False, True, True, False, False, False, False]]
    assert (labels[stereo] != IGNORE).all()
    with pytest.raises(ValueError, match="outside its generation"):
        token_store([[5, 6, 7]], [2], [[1]])  # a prompt token is never weighted


def test_batches_cover_an_epoch_within_the_budget_with_the_conformer_tokens_as_labels():
    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 400, size=500)
    store = token_store([rng.integers(1, 300, size=n) for n in lengths], [20] * len(lengths))
    batches = epoch_batches(store.lengths, 4096, np.random.default_rng(1))
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    assert all(len(b) * padded_length(int(store.lengths[b].max())) <= 4096 for b in batches)
    assert [b.tolist() for b in batches] == [b.tolist() for b in epoch_batches(store.lengths, 4096,
                                                                                 np.random.default_rng(1))]
    ids, labels, _ = batch_arrays(store, batches[0], pad_id=0)
    for r, row in enumerate(batches[0]):
        n = int(store.lengths[row])
        assert ids[r, :n].tolist() == store.sequence(int(row)).tolist() and (ids[r, n:] == 0).all()
        assert (labels[r, :20] == IGNORE).all() and (labels[r, n:] == IGNORE).all()
        assert labels[r, 20:n].tolist() == store.sequence(int(row))[20:].tolist()


def _canonical(smiles: str) -> str:
    return Chem.MolToSmiles(Chem.MolFromSmiles(smiles))


def _decoded_stereo(text: str, smiles: str):
    """The pipeline's verdict on `text` decoded strictly by `smiles`'s template, and the decoded molecule."""
    from inferlab.workloads.conformers.chemistry.stereo import stereo_agreement

    mol = build_template(smiles, get_profile("v3-fixed4")).check(text, get_profile("v3-fixed4")).mol
    reference = Chem.Mol(mol)
    reference.RemoveAllConformers()
    return stereo_agreement(reference, mol), mol


def _distances(mol) -> np.ndarray:
    xyz = mol.GetConformer().GetPositions()
    return np.sort(np.linalg.norm(xyz[:, None] - xyz[None], axis=-1).ravel())


@pytest.mark.parametrize("smiles", [
    "C[C@H](N)C(=O)O",  # L-alanine
    "C/C=C/[C@H](N)O",  # a centre beside an E double bond: the bond's stereo stays
    "C[C@@]12CC[C@H]3[C@@H](CC[C@@H]4C[C@@H](O)CC[C@@]43C)[C@@H]1CCC2=O",  # a steroid: 7 centres
])
def test_a_chiral_molecules_mirror_image_decodes_to_the_inverted_tags_stereo(maker, smiles):
    from inferlab.workloads.conformers.chemistry.stereo import stereo_agreement
    from inferlab.workloads.conformers.training.stereo_variants import MIRROR

    smiles = _canonical(smiles)
    texts = maker.make("t:4", smiles, TRAIN)
    mirrors = [v for v in texts.variants if v.kind == MIRROR]
    inverted = _canonical(smiles.replace("@@", "!").replace("@", "@@").replace("!", "@"))  # every tag inverted
    assert len(mirrors) == 1 and mirrors[0].canonical_smiles == inverted != smiles
    mirror = mirrors[0]
    assert mirror.prompt == build_template(inverted, get_profile("v3-fixed4")).prompt
    assert len(mirror.conformers) == NUM_CONFORMERS and len(mirror.probes) == len(PROBE_SIGNS)
    assert texts.stereo == {"own": [NUM_CONFORMERS, NUM_CONFORMERS], MIRROR: [NUM_CONFORMERS, NUM_CONFORMERS]}
    original = Chem.MolFromSmiles(smiles)
    for own_text, text in zip(texts.conformers, mirror.conformers):
        agreement, mol = _decoded_stereo(text, inverted)  # strict decoding: template.check
        assert agreement.ok and agreement.mismatches == 0 and agreement.specified > 0
        assert stereo_agreement(original, mol).ok is False  # the mirrored geometry is not the original's isomer
        _, own = _decoded_stereo(own_text, smiles)
        assert np.abs(_distances(own) - _distances(mol)).max() < 1e-3  # the same conformer, reflected


@pytest.mark.parametrize("smiles, why", [
    ("C[C@H](O)[C@@H](C)O", "meso"),  # meso-2,3-butanediol: its own mirror image
    ("C[C@H]1CC[C@@H](C)CC1", "meso"),  # cis-1,4-dimethylcyclohexane: no chiral centre, its own mirror image
    ("CC(N)C(=O)O", None),  # no tag to invert
    ("CCOC(=O)c1ccccc1", None),  # no stereo at all
])
def test_a_meso_or_unspecified_molecule_gets_no_mirror_image(maker, smiles, why):
    from inferlab.workloads.conformers.training.stereo_variants import MIRROR

    texts = maker.make("t:5", _canonical(smiles), TRAIN)
    assert texts.dropped_at is None and len(texts.conformers) == NUM_CONFORMERS
    assert not [v for v in texts.variants if v.kind == MIRROR]
    assert [v["at"] for v in texts.variants_left_out if v["kind"] == MIRROR] == ([why] if why else [])


def test_open_stereo_is_read_from_each_conformer_into_a_prompt_of_its_own(maker):
    from inferlab.workloads.conformers.training.stereo_variants import ASSIGNED

    smiles = "CC(N)C(=O)O"  # alanine, the centre left open: ETKDG sets it per conformer
    texts = maker.make("t:6", smiles, VALIDATION)
    assigned = [v for v in texts.variants if v.kind == ASSIGNED]
    assert {v.canonical_smiles for v in assigned} <= {"C[C@H](N)C(=O)O", "C[C@@H](N)C(=O)O"}
    assert sum(len(v.conformers) for v in assigned) == NUM_CONFORMERS  # every conformer makes one text
    blocks = {tuple(re.findall(r"<([^<>]*)>", text)) for text in texts.conformers}
    for variant in assigned:
        for text in variant.conformers:
            assert _decoded_stereo(text, variant.canonical_smiles)[0].ok
            assert tuple(re.findall(r"<([^<>]*)>", text)) in blocks  # an own conformer's coordinates, tagged
    assert texts.stereo == {ASSIGNED: [NUM_CONFORMERS, NUM_CONFORMERS]}  # the own prompt specifies nothing
    assert texts.enumerated is not None and texts.enumerated.conformers == []  # the assign_stereo prompt
    assert texts.enumerated.canonical_smiles in {"C[C@H](N)C(=O)O", "C[C@@H](N)C(=O)O"}


def test_a_held_out_molecule_gets_no_variant_and_variants_are_deterministic(maker):
    from inferlab.workloads.conformers.training.conformer_texts import MoleculeTexts

    held = maker.make("t:7", "C[C@H](N)C(=O)O", HELD_OUT)
    assert held.conformers == [] and held.variants == [] and held.stereo == {}
    smiles = _canonical("CC(O)[C@H](N)C(=O)O")  # one centre specified, one open: a mirror and stereo from 3D
    first, again = maker.make("t:8", smiles, TRAIN), maker.make("t:8", smiles, TRAIN)
    assert {v.kind for v in first.variants} == {"mirror", "assigned"}
    assert first.to_json() == again.to_json()  # seeded by the recipe's seed and the molecule only
    assert MoleculeTexts.from_json(first.to_json()) == first  # a work folder's chunk reads back whole


def test_the_reduced_tokenizer_cuts_the_variants_and_the_assigned_prompts_as_qwen3_chem(maker, tmp_path,
                                                                                     qwen3_chem_dir):
    from inferlab.models.tokenizer_loading import load_tokenizer
    from inferlab.models.vocabulary_reduction import read_source_ids
    from inferlab.workloads.conformers.training.hand_pairs import wrong_hand_text
    from inferlab.workloads.conformers.training.token_build import build_tokens

    kept = [maker.make("t:9", _canonical("C[C@H](N)C(=O)O"), TRAIN),
            maker.make("t:10", _canonical("CC1CCC(C)CC1"), VALIDATION),
            maker.make("t:11", "CCCN=c1ssc(=O)n1CCC", HELD_OUT)]  # the preset prompts it as CCC/N=c1/ssc(=O)n1CCC
    figures = build_tokens(kept, tmp_path)  # raises at the first text cut differently
    variants = figures["stereo_variants"]
    assert figures["exactness"]["differences"] == 0
    assert variants["mirror"]["sequences"] == {TRAIN: NUM_CONFORMERS, VALIDATION: 0}
    assert variants["assigned"]["sequences"] == {TRAIN: 0, VALIDATION: NUM_CONFORMERS}
    assert figures["sequences"] == {TRAIN: 2 * NUM_CONFORMERS, VALIDATION: 2 * NUM_CONFORMERS}
    train = read_token_store(tmp_path / "train.npz.xz")
    assert sum(train.lengths) == figures["tokens"][TRAIN] and len(train.lengths) == 2 * NUM_CONFORMERS
    full, small = load_tokenizer(qwen3_chem_dir), load_tokenizer(tmp_path / "tokenizer")
    source_ids = np.asarray(read_source_ids(tmp_path / "tokenizer"))
    assert kept[2].enumerated is not None and "/" in kept[2].enumerated.prompt
    for prompt in [kept[2].enumerated.prompt, *(v.prompt for t in kept for v in t.variants)]:
        assert source_ids[small(prompt)["input_ids"]].tolist() == full(prompt)["input_ids"]
    # the hand pairs: alanine's own and mirror texts reflected; the ring's assigned cis/trans have no hand
    assert figures["hand_pairs"] == {TRAIN: 2 * NUM_CONFORMERS, VALIDATION: 0}
    pairs = read_token_store(tmp_path / "train_hand_pairs.npz.xz")
    assert pairs.pair_rows.tolist() == list(range(2 * NUM_CONFORMERS))
    texts = kept[0].conformers + kept[0].variants[0].conformers
    for i, row in enumerate(pairs.pair_rows):
        prompt = int(train.prompt_lengths[row])
        assert pairs.prompt_lengths[i] == prompt and np.array_equal(pairs.sequence(i)[:prompt], train.sequence(row)[:prompt])
        smiles = kept[0].canonical_smiles if i < NUM_CONFORMERS else kept[0].variants[0].canonical_smiles
        template = build_template(smiles, get_profile("v3-fixed4"))
        wrong = small.decode(pairs.sequence(i)[prompt:-1].tolist())
        assert wrong == wrong_hand_text(template, texts[i], get_profile("v3-fixed4")) != texts[i]
    assert read_token_store(tmp_path / "validation_hand_pairs.npz.xz").pair_rows.tolist() == []


def test_a_work_folder_made_before_the_stereo_variants_is_refused(tmp_path):
    import json

    from inferlab.workloads.conformers.training import data_build

    config = data_build.BuildConfig(tmp_path / "data")
    rows = [("nci:1", "CCO", TRAIN)]
    data_build._record_molecule_list(config, rows)  # a new folder: recorded
    data_build._record_molecule_list(config, rows)  # the same recipe: resumed
    record = json.loads((config.work / "molecules.json").read_text())
    del record["stereo_variants"]  # chunks written by the recipe before them hold no variant texts
    (config.work / "molecules.json").write_text(json.dumps(record))
    with pytest.raises(InputError, match="another molecule list or recipe"):
        data_build._record_molecule_list(config, rows)
