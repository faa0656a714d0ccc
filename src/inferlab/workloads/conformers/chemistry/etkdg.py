"""The project's ETKDG embedding: RDKit ETKDGv3 with a random seed, exactly `num_confs` conformers or an InputError.

One function, so that the evaluation's reference sets (evaluation/reference.py) and the reference model's
training conformers (training/) are made by the same parameters and differ only by their seed.
Not here: parsing SMILES (smiles.py), what is done with the conformers.
"""

from __future__ import annotations

from rdkit import Chem
from rdkit.Chem import AllChem

from inferlab.errors import InputError


def embed_etkdg(mol: Chem.Mol, num_confs: int, seed: int, threads: int = 0, label: str = "the molecule") -> Chem.Mol:
    """`mol` with explicit hydrogens added and `num_confs` ETKDGv3 conformers (threads 0 = all cores);
    InputError (naming `label`) when RDKit embeds fewer or raises."""
    with_hs = Chem.AddHs(mol)
    params = AllChem.ETKDGv3()
    params.randomSeed = seed
    params.numThreads = threads
    try:
        ids = list(AllChem.EmbedMultipleConfs(with_hs, numConfs=num_confs, params=params))
    except RuntimeError as e:  # RDKit raises on some inputs (e.g. bad distance bounds around metals)
        raise InputError(f"RDKit could not embed {label}: {str(e).strip().splitlines()[0]}") from None
    if len(ids) < num_confs:
        raise InputError(f"RDKit embedded {len(ids)} of {num_confs} conformers of {label}")
    return with_hs
