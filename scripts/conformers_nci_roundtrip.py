"""Round-trip check of the conformer format over RDKit's whole NCI first_5K set (CPU, about 2.5 minutes).

For every molecule RDKit can embed (ETKDG, one conformer) and every profile: the template filled with the
encoder's blocks must equal the encoder's text, `ConformerTemplate.check` must return the same canonical
molecule, and plain `decode_generation` is compared too (it differs only on molecules whose own bracket
atoms look like wrapped bare atoms, e.g. `[S]`, `[I]`; see docs/conformers.md).

    PYTHONPATH=src python scripts/conformers_nci_roundtrip.py [--limit N]
"""

from __future__ import annotations

import argparse
import collections
import os
import time

from rdkit import Chem, RDConfig, rdBase
from rdkit.Chem import AllChem

from inferlab.errors import InferlabError
from inferlab.workloads.conformers.chemistry.decode import decode_generation
from inferlab.workloads.conformers.chemistry.encode import encode_conformer
from inferlab.workloads.conformers.chemistry.profiles import PROFILES
from inferlab.workloads.conformers.chemistry.template import build_template


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    blocker = rdBase.BlockLogs()  # noqa: F841  (RDKit's own warnings would drown the summary)
    started, counts, notes = time.perf_counter(), collections.Counter(), []
    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        lines = f.readlines()[: args.limit]
    for line in lines:
        smiles = line.split()[0]
        mol = Chem.MolFromSmiles(smiles)
        if mol is None:
            counts["unparsable"] += 1
            continue
        mol = Chem.AddHs(mol)
        params = AllChem.ETKDGv3()
        params.randomSeed = 3
        try:
            if AllChem.EmbedMolecule(mol, params) != 0:
                counts["not embedded"] += 1
                continue
        except RuntimeError:
            counts["embedder raised"] += 1
            continue
        counts["molecules"] += 1
        canonical = Chem.MolToSmiles(Chem.RemoveHs(mol))
        for profile in PROFILES.values():
            try:
                encoded = encode_conformer(mol, profile)
                template = build_template(smiles, profile)
                text = encoded.generation_text(profile)
                checked = template.check(text, profile).canonical_smiles
                exact = template.fill(encoded.blocks) == text and checked == canonical
                counts["template exact" if exact else "template MISMATCH"] += 1
                if decode_generation(text, profile).canonical_smiles != canonical:
                    counts["plain decode differs"] += 1
                    notes.append(f"{profile.name}: {canonical}")
            except InferlabError as e:
                counts["ERROR"] += 1
                notes.append(f"{profile.name}: {smiles}: {e}")
    print(dict(counts), f"{time.perf_counter() - started:.0f} s")
    for note in notes[:20]:
        print(" ", note)


if __name__ == "__main__":
    main()
