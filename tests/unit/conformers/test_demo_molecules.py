"""The demo's molecules (workloads/conformers/demo/molecules.py): held out by the reference model's split, taken
in turn from each source, specified stereo first and then the smallest; NCI's first without the split."""

from __future__ import annotations

from rdkit import Chem

from inferlab.workloads.conformers.chemistry.stereo import specified_stereo
from inferlab.workloads.conformers.demo.molecules import HELD_OUT_ORIGIN, NCI_ORIGIN, _representable, demo_molecules
from inferlab.workloads.conformers.reference_model import SPLIT_FILE
from inferlab.workloads.conformers.training.scaffold_split import HELD_OUT, read_split


def test_the_demo_takes_held_out_molecules_in_turn_from_each_source_stereo_first():
    chosen = demo_molecules(9, 8, 20)
    assert chosen.origin == HELD_OUT_ORIGIN
    split = {row.id: row for row in read_split(SPLIT_FILE)}
    sources = sorted({row.source for row in split.values()})
    assert [m.source for m in chosen.molecules] == sources * 3
    for m in chosen.molecules:
        row = split[m.id]
        assert row.split == HELD_OUT and 8 <= m.heavy_atoms <= 20 and m.heavy_atoms == row.num_atoms
        centres, bonds = specified_stereo(Chem.MolFromSmiles(row.canonical_smiles))
        assert m.stereo == len(centres) + len(bonds)
    for source in sources:
        taken = [m for m in chosen.molecules if m.source == source]
        keys = [(m.stereo == 0, m.heavy_atoms, m.id) for m in taken]
        assert keys == sorted(keys)
        # a molecule of this source left out that ranks before the last one taken is one the format cannot write
        passed = [row for row in split.values() if row.source == source and row.split == HELD_OUT
                  and 8 <= row.num_atoms <= 20 and row.id not in {m.id for m in taken}
                  and (_stereo(row.canonical_smiles) == 0, row.num_atoms, row.id) < keys[-1]]
        assert all(_representable(r.id, r.canonical_smiles, source, 8, 20) is None for r in passed), passed
    assert any(m.stereo for m in chosen.molecules) and any(m.source == "nci" for m in chosen.molecules)


def _stereo(smiles: str) -> int:
    centres, bonds = specified_stereo(Chem.MolFromSmiles(smiles))
    return len(centres) + len(bonds)


def test_without_the_split_the_demo_takes_ncis_first_molecules(tmp_path):
    chosen = demo_molecules(3, 4, 10, split_file=tmp_path / "split.tsv")
    assert chosen.origin == NCI_ORIGIN
    assert [m.source for m in chosen.molecules] == ["nci"] * 3
    assert all(m.id.startswith("nci-") and 4 <= m.heavy_atoms <= 10 for m in chosen.molecules)
