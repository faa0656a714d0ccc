"""The mirror image of a conformer: the free repair of a conformer written with the wrong hand.

A reflection (x -> -x) keeps every interatomic distance, so bond lengths, angles and the conformer's RMSD to
any reference's mirror image are unchanged; it inverts every tetrahedral centre and keeps every double
bond's E/Z (a cis pair stays cis). So a conformer whose tetrahedral centres are all inverted and whose double
bonds are right becomes, mirrored, a conformer with its input's stereo. Why this is sound for a model that
writes the hand at chance (docs/decisions.md, "Why the pipeline mirrors a wrong-handed conformer"): such a
model gives a conformer and its mirror image the same probability, so the mirror of a wrong-handed sample
is a sample of the right hand. A conformer with some centres right and some wrong (or a double bond
wrong) cannot be repaired this way; a stereo retry draws it again.

Not here: deciding whether the stereo is right (stereo.py), when to mirror (pipeline/judge.py).
"""

from __future__ import annotations

from rdkit import Chem


def mirror_image(mol: Chem.Mol) -> Chem.Mol:
    """A copy of `mol` with every conformer reflected through the yz plane (x negated); tags and bonds kept."""
    mirrored = Chem.Mol(mol)
    for conformer in mirrored.GetConformers():
        positions = conformer.GetPositions()  # [atoms, 3] float64
        for index, (x, y, z) in enumerate(positions):
            conformer.SetAtomPosition(index, (-float(x), float(y), float(z)))
    return mirrored
