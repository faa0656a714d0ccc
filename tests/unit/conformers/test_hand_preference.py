"""scripts/reference_hand_preference.py: the two texts of a pair differ only in their coordinates, the
reflected one has every centre of the other hand by the pipeline's own check, and the molecules are the
tagged ones of each split."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from rdkit import Chem

from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.stereo import stereo_agreement
from inferlab.workloads.conformers.chemistry.template import build_template

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "reference_hand_preference.py"
SMILES = "C[C@@H](O)[C@H](N)C(=O)O"  # two specified centres


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("reference_hand_preference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _judged(smiles: str, text: str) -> bool:
    profile = get_profile("v3-fixed4")
    mol = build_template(smiles, profile).check(text, profile).mol
    reference = Chem.Mol(mol)
    reference.RemoveAllConformers()
    return stereo_agreement(reference, mol).ok


def test_a_pair_differs_only_in_coordinates_and_the_reflection_has_the_other_hand(script):
    prompt, right, wrong = script.hand_pair(SMILES, seed=1)
    assert "[SMILES]" in prompt and right != wrong
    blocks = re.compile(r"<[^>]*>")
    assert blocks.sub("<>", right) == blocks.sub("<>", wrong)  # the same tags, atoms and structure
    assert _judged(SMILES, right) and not _judged(SMILES, wrong)


def test_the_selection_takes_tagged_molecules_of_each_split(script, tmp_path):
    split = tmp_path / "split.tsv"
    split.write_text("id\tsource\tcanonical_smiles\tnum_atoms\tscaffold\tsplit\n"
                     "a\tx\tCCO\t3\t\ttrain\n"
                     f"b\tx\t{SMILES}\t8\t\ttrain\n"
                     "c\tx\tC[C@H](N)C(=O)O\t6\t\theld_out\n"
                     "d\tx\tC[C@H](N)C(=O)O\t6\t\tvalidation\n")
    assert script.tagged_molecules(split, per_split=5, max_heavy_atoms=30) == {
        "train": [SMILES], "held_out": ["C[C@H](N)C(=O)O"]}
    assert script.tagged_molecules(split, per_split=5, max_heavy_atoms=7)["train"] == []
