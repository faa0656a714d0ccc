"""Hand pairs (training/hand_pairs.py) and the hand loss (train_loop.py): a tetrahedral text's reflection
inverts exactly its centres and keeps every distance and E/Z; an achiral reflection makes no pair; the
margin is the two texts' log-likelihood difference; the ranking loss moves it; the loop logs it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem import rdMolTransforms
from transformers import Qwen3ForCausalLM

from inferlab.workloads.conformers.chemistry.encode import encode_conformers
from inferlab.workloads.conformers.chemistry.etkdg import embed_etkdg
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.smiles import parse_smiles
from inferlab.workloads.conformers.chemistry.stereo import contradicted_centres, specified_stereo
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.training.batches import IGNORE, pair_batch_arrays
from inferlab.workloads.conformers.training.hand_pairs import wrong_hand_text
from inferlab.workloads.conformers.training.model_shape import ModelShape, model_config
from inferlab.workloads.conformers.training.token_store import (
    hand_pair_store,
    read_token_store,
    token_store,
    write_token_store,
)
from inferlab.workloads.conformers.training.train_loop import RECIPE, HandPairs, pair_margins, train

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

PROFILE = get_profile("v3-fixed4")
TINY = ModelShape(hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64)
TINY_RUN = replace(RECIPE, steps=4, tokens_per_batch=2048, warmup_steps=2, eval_every=2, log_every=1,
                   hand_tokens_per_batch=1024)


def conformer_texts(smiles: str, count: int = 2):
    """(template, generation texts of `count` ETKDG conformers in canonical orientation), as the data's."""
    template = build_template(Chem.MolToSmiles(Chem.MolFromSmiles(smiles)), PROFILE)
    mol = Chem.RemoveHs(embed_etkdg(parse_smiles(template.canonical_smiles), count, 7, threads=1, label=smiles))
    for conformer in mol.GetConformers():
        rdMolTransforms.CanonicalizeConformer(conformer)
    return template, [e.generation_text(PROFILE) for e in encode_conformers(mol, PROFILE)]


def _distances(mol) -> np.ndarray:
    xyz = mol.GetConformer().GetPositions()
    return np.linalg.norm(xyz[:, None] - xyz[None], axis=-1)  # [atoms, atoms], in template order


@pytest.mark.parametrize("smiles", [
    "C[C@H](N)C(=O)O",  # one centre
    "C/C=C/[C@H](N)O",  # a centre beside an E bond: the bond stays E
    "C[C@@]12CC[C@H]3[C@@H](CC[C@@H]4C[C@@H](O)CC[C@@]43C)[C@@H]1CCC2=O",  # a steroid: 7 centres
])
def test_the_reflected_text_inverts_exactly_the_centres_and_keeps_every_distance(smiles):
    template, texts = conformer_texts(smiles)
    for text in texts:
        wrong = wrong_hand_text(template, text, PROFILE)
        assert wrong is not None and wrong != text
        right_mol, wrong_mol = (template.check(t, PROFILE).mol for t in (text, wrong))
        centres, _ = specified_stereo(right_mol)
        assert contradicted_centres(right_mol) == [] and contradicted_centres(wrong_mol) == sorted(centres)
        assert np.abs(_distances(right_mol) - _distances(wrong_mol)).max() < 1e-3  # fixed4 truncation only


@pytest.mark.parametrize("smiles", [
    "CCOC(=O)c1ccccc1",  # no stereo
    "C[C@H](O)[C@@H](C)O",  # meso: its reflection is itself
    "C[C@H]1CC[C@@H](C)CC1",  # ring cis/trans: tags, but no hand
])
def test_an_achiral_molecule_makes_no_pair(smiles):
    template, texts = conformer_texts(smiles, 1)
    assert wrong_hand_text(template, texts[0], PROFILE) is None


def test_a_text_of_the_wrong_hand_itself_makes_no_pair():
    template, texts = conformer_texts("C[C@H](N)C(=O)O", 1)
    wrong = wrong_hand_text(template, texts[0], PROFILE)
    assert wrong_hand_text(template, wrong, PROFILE) is None  # never a pair that ranks the wrong hand first


def synthetic_pairs(seed: int = 0, n: int = 24):
    """(store, hand pair store): n texts whose 6-token prompt ends in a tag, 6 or 7, and whose generation tokens
    have the tag's parity; each reflection has every generation token one higher (the other parity, a stand-in
    for the flipped hand: the split's token counts alone do not tell them apart)."""
    rng = np.random.default_rng(seed)
    sequences = []
    for k, tag in zip(rng.integers(20, 60, n), rng.integers(6, 8, n)):
        sequences.append(np.concatenate([np.arange(1, 6), [tag], 2 * rng.integers(5, 28, size=k) + tag % 2]))
    store = token_store(sequences, [6] * n)
    wrong = [np.concatenate([s[:6], s[6:] + 1]) for s in sequences]
    return store, hand_pair_store(token_store(wrong, [6] * n), list(range(n)))


def test_a_hand_pair_store_round_trips_with_its_rows(tmp_path):
    store, pairs = synthetic_pairs()
    back = read_token_store(write_token_store(tmp_path / "pairs.npz.xz", pairs))
    assert back.pair_rows.tolist() == list(range(len(store))) and np.array_equal(back.tokens, pairs.tokens)
    assert read_token_store(write_token_store(tmp_path / "plain.npz.xz", store)).pair_rows is None
    with pytest.raises(ValueError, match="rows"):
        hand_pair_store(pairs, [0])


def test_the_margin_is_the_log_likelihood_difference_of_the_two_texts():
    store, pairs = synthetic_pairs()
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(model_config(TINY, 64, 0)).eval()
    indices = np.array([3, 0, 7])
    ids, labels = (torch.from_numpy(a) for a in pair_batch_arrays(pairs, store, indices, 0))
    assert ids.shape[0] == 6 and (labels[:, :6] == IGNORE).all()
    with torch.no_grad():
        margins = pair_margins(model, ids, labels)

        def log_likelihood(sequence: np.ndarray) -> float:  # one text alone, no padding
            tensor = torch.from_numpy(sequence.astype(np.int64))[None]
            log_p = model(input_ids=tensor).logits[0, :-1].log_softmax(-1)
            return float(log_p.gather(-1, tensor[0, 1:, None])[5:].sum())  # the labels after the 6-token prompt

        expected = [log_likelihood(store.sequence(i)) - log_likelihood(pairs.sequence(i)) for i in indices]
    assert margins.tolist() == pytest.approx(expected, abs=1e-4)


def test_the_hand_loss_ranks_the_right_texts_above_their_reflections():
    store, pairs = synthetic_pairs()
    validation_store, validation_pairs = synthetic_pairs(seed=1, n=8)
    hand = HandPairs(pairs, validation_pairs)
    config = replace(TINY_RUN, steps=60, eval_every=60, log_every=60, warmup_steps=5, peak_lr=3e-3)

    def run(weight: float) -> list[dict]:
        torch.manual_seed(0)
        rows: list[dict] = []
        model = Qwen3ForCausalLM(model_config(TINY, 64, 0))
        train(model, store, validation_store, replace(config, hand_weight=weight), torch.device("cpu"), 0,
              rows.append, hand)
        return rows

    ranked, plain = run(8.0), run(0.0)
    assert "hand_accuracy" not in plain[-1] and "val_hand_accuracy" not in plain[-1]
    assert ranked[-1]["val_hand_accuracy"] == 1.0 and ranked[-1]["hand_loss"] < 0.1


def test_a_step_on_the_hand_loss_raises_the_margins():
    store, pairs = synthetic_pairs()
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(model_config(TINY, 64, 0))
    ids, labels = (torch.from_numpy(a) for a in pair_batch_arrays(pairs, store, np.arange(8), 0))
    before = pair_margins(model, ids, labels)
    torch.nn.functional.softplus(-before).sum().backward()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter -= 1e-3 * parameter.grad
        after = pair_margins(model, ids, labels)
    assert float(after.mean()) > float(before.mean()) + 0.01


def test_a_hand_weight_without_pairs_is_refused():
    store, _ = synthetic_pairs()
    model = Qwen3ForCausalLM(model_config(TINY, 64, 0))
    with pytest.raises(ValueError, match="hand pairs"):
        train(model, store, store, replace(TINY_RUN, hand_weight=1.0), torch.device("cpu"), 0, lambda row: None)
