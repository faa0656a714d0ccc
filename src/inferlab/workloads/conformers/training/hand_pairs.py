"""Hand pairs: a training conformer text of a molecule with specified tetrahedral centres, written again
reflected under the same prompt (every centre of the wrong hand), for the recipe's hand loss (train_loop.py).

Why: a centre's hand is invisible to every distance (a conformer and its mirror image share the distance
matrix), so the plain loss rewards it by at most ln 2 per centre, and every recipe measured with it alone
wrote centres at chance (docs/decisions.md). The two texts of a pair share the prompt, tags, graph, bond
lengths, angles and E/Z: ranking the right text above the reflected one is a signal about the hand and
nothing else. The reflection is the one scripts/reference_hand_preference.py scores: x negated, then the
canonical orientation again (the training texts' frame), written by the pipeline's encoder.
"""

from __future__ import annotations

from rdkit import Chem
from rdkit.Chem import rdMolTransforms

from inferlab.errors import InferlabError
from inferlab.workloads.conformers.chemistry.encode import encode_conformers
from inferlab.workloads.conformers.chemistry.profiles import FormatProfile
from inferlab.workloads.conformers.chemistry.stereo import contradicted_centres, specified_stereo, stereo_agreement
from inferlab.workloads.conformers.chemistry.stereo_mirror import mirror_image
from inferlab.workloads.conformers.chemistry.template import ConformerTemplate


def reflected_conformer(mol: Chem.Mol) -> Chem.Mol:
    """`mol` with every conformer reflected (x negated) and put in canonical orientation again."""
    reflected = mirror_image(mol)
    for conformer in reflected.GetConformers():
        rdMolTransforms.CanonicalizeConformer(conformer)
    return reflected


def wrong_hand_text(template: ConformerTemplate, text: str, profile: FormatProfile) -> str | None:
    """The generation text of `text`'s conformer reflected, under `template` (the same tags). None when the
    molecule specifies no tetrahedral centre, when `text` itself contradicts its stereo, when the reflection
    does not invert exactly the specified centres while keeping every specified double bond, or when it is the
    same stereoisomer (by RDKit's perception of these geometries: a pair must differ in the hand alone)."""
    mol = template.check(text, profile).mol
    centres, _ = specified_stereo(mol)
    if not centres or contradicted_centres(mol):  # no centre, or the text itself is not of the right hand
        return None
    try:
        wrong = encode_conformers(reflected_conformer(mol), profile)[0].generation_text(profile)
        reflected = template.check(wrong, profile).mol
        if contradicted_centres(reflected) != sorted(centres):
            return None
        reference = Chem.Mol(mol)
        reference.RemoveAllConformers()
        if stereo_agreement(reference, reflected).ok is not False:  # an achiral molecule (meso, ring cis/trans):
            return None  # the reflection is the same stereoisomer, numbered otherwise
    except (InferlabError, RuntimeError, ValueError):  # RDKit's perception refusing the reflected geometry
        return None
    return wrong
