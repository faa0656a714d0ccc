"""The tokens where a conformer text decides its stereo: the blocks the recipe weights in the loss."""

import pytest

from inferlab.workloads.conformers.training.stereo_tokens import block_token_positions, deciding_atoms


def test_a_centre_is_decided_by_its_last_written_neighbour_and_a_bond_by_its_last_written_neighbour():
    assert deciding_atoms("C[C@@H](N)C(=O)O") == ([3], 6)  # centre 1, neighbours 0, 2, 3
    assert deciding_atoms("C/C=C/C(C)C") == ([3], 6)  # the bond 1=2, neighbours 0 and 3
    assert deciding_atoms("N[C@@H]1CC[C@H](C)CC1O") == ([6, 7], 9)  # centre 1 closes its ring at 7
    assert deciding_atoms("CC(N)C(=O)O") == ([], 6)  # stereo left open: nothing decided
    assert deciding_atoms("c1ccccc1") == ([], 6)


def test_the_positions_are_the_tokens_inside_the_deciding_blocks_only():
    text = "[CONFORMER][C]<1.0,2.0,-3.0>[C@@H]<4.0,5.0,6.0>([N]<7.0,8.0,9.0>)[/CONFORMER]"
    # a hand cut: each character of the blocks its own token, the structure in a few merged tokens
    pieces = ["[CONFORMER]", "[C", "]<", *"1.0,2.0", ",-", *"3.0", ">[", "C", "@@", "H", "]<", *"4.0,5.0,6.0",
              ">(", "[", "N", "]<", *"7.0,8.0,9.0", ">", ")", "[/CONFORMER]"]
    assert "".join(pieces) == text
    offsets, start = [], 0
    for piece in pieces:
        offsets.append((start, start + len(piece)))
        start += len(piece)
    chosen = block_token_positions(text, offsets, [0, 2], 3)
    assert "".join(pieces[k] for k in chosen) == "1.0,2.0,-3.0" + "7.0,8.0,9.0"
    with pytest.raises(ValueError, match="2 atoms"):
        block_token_positions(text, offsets, [0], 2)
