"""The tokens of a conformer text where the model decides a stereo element: the recipe weights them in the loss
(TrainConfig.stereo_weight).

A tetrahedral centre's hand is set by the last-written of the centre and its neighbours: until that atom's
block the others' positions allow either hand, its block puts it on one side. A stereo double bond's E/Z is
set likewise by the last-written of its two atoms and their neighbours. Those blocks' coordinate tokens are
where a tag must act: a few dozen of a text's hundreds, most of them digits whose loss is sampling noise, so
in the plain mean loss the tags' signal is faint; their own loss says whether a recipe learns the tags.

Atoms are numbered in SMILES order, the order of the text's coordinate blocks (RDKit numbers a parsed
SMILES's atoms in the order they are written; the count is checked against the blocks).
"""

from __future__ import annotations

from collections.abc import Sequence

from rdkit import Chem

_CENTRES = (Chem.ChiralType.CHI_TETRAHEDRAL_CW, Chem.ChiralType.CHI_TETRAHEDRAL_CCW)
_BONDS = (Chem.BondStereo.STEREOE, Chem.BondStereo.STEREOZ, Chem.BondStereo.STEREOCIS, Chem.BondStereo.STEREOTRANS)


def deciding_atoms(canonical_smiles: str) -> tuple[list[int], int]:
    """(sorted indices of the atoms whose blocks decide a specified stereo element, the molecule's atom count)."""
    mol = Chem.MolFromSmiles(canonical_smiles)
    if mol is None:
        raise ValueError(f"RDKit cannot read {canonical_smiles!r}")
    deciding = set()
    for atom in mol.GetAtoms():
        if atom.GetChiralTag() in _CENTRES:
            deciding.add(max([atom.GetIdx()] + [n.GetIdx() for n in atom.GetNeighbors()]))
    for bond in mol.GetBonds():
        if bond.GetBondType() == Chem.BondType.DOUBLE and bond.GetStereo() in _BONDS:
            ends = (bond.GetBeginAtom(), bond.GetEndAtom())
            deciding.add(max(n.GetIdx() for end in ends for n in [end, *end.GetNeighbors()]))
    return sorted(deciding), mol.GetNumAtoms()


def block_token_positions(text: str, offsets: Sequence[tuple[int, int]], atoms: Sequence[int],
                          num_atoms: int) -> list[int]:
    """Indices (into the text's tokens, whose character spans are `offsets`) of the tokens that write a
    character inside the coordinate blocks of `atoms` (between the block's `<` and `>`, both excluded)."""
    opens = [i for i, c in enumerate(text) if c == "<"]
    closes = [i for i, c in enumerate(text) if c == ">"]
    if len(opens) != num_atoms or len(closes) != num_atoms:
        raise ValueError(f"the text has {len(opens)} coordinate blocks, its molecule {num_atoms} atoms")
    spans = [(opens[a] + 1, closes[a]) for a in atoms]  # [first, end) characters of each block's content
    return [k for k, (start, end) in enumerate(offsets)
            if any(start < block_end and end > block_start for block_start, block_end in spans)]
