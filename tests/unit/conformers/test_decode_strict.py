"""The strict decoder refuses every malformed text with a reason, instead of guessing."""

from __future__ import annotations

import pytest

from inferlab.errors import InputError
from inferlab.workloads.conformers.chemistry.decode import decode_enriched, decode_generation
from inferlab.workloads.conformers.chemistry.profiles import get_profile

FIXED4 = get_profile("v3-fixed4")
STRIPPED = get_profile("v3-stripped")
GOOD = "[C]<1.0000,2.0000,3.0000>[C]<-1.5000,0.0000,10.2500>[O]<0.1234,-0.1234,0.0001>"


def test_good_text_decodes():
    decoded = decode_generation(f"[CONFORMER]{GOOD}[/CONFORMER]", FIXED4)
    assert decoded.canonical_smiles == "CCO"
    assert list(decoded.mol.GetConformer().GetAtomPosition(1)) == [-1.5, 0.0, 10.25]


@pytest.mark.parametrize(
    "body, reason",
    [
        (GOOD.replace("3.0000>", "0.9587abra>"), "coord3-fixed4"),  # junk glued to a number
        (GOOD.replace("1.0000,", "1.2.3,"), "coord3-fixed4"),  # two decimal points
        (GOOD.replace("1.0000,2.0000,3.0000", "1.0000,2.0000"), "coord3-fixed4"),  # a value missing
        (GOOD.replace("1.0000,2.0000,3.0000", "1.0000,,3.0000"), "coord3-fixed4"),  # an empty value
        (GOOD.replace("3.0000>", "3.0000,4.0000>"), "coord3-fixed4"),  # four values
        (GOOD.replace("3.0000>", "3.000>"), "coord3-fixed4"),  # three decimals in fixed4
        (GOOD.replace("1.0000,", "1.0000, "), "coord3-fixed4"),  # a space
        (GOOD.replace("[O]<0.1234,-0.1234,0.0001>", "[O]"), "no complete <x,y,z> block"),  # block missing
        (GOOD.replace("[O]<0.1234,-0.1234,0.0001>", "[O]<0.1234,-0.1234,0.0001"), "no complete"),  # unclosed
        (GOOD + ">", "unexpected text"),  # stray '>'
        (GOOD + "C", "unexpected text"),  # a bare atom without descriptor and block
        ("x" + GOOD, "unexpected text"),
        (GOOD.replace("[C]<-1.5000", "[C]<<-1.5000"), "no complete"),
        ("", "no atoms"),
        ("[C]<1.0000,2.0000,3.0000>(", "cannot be parsed: syntax error near character 2"),  # unclosed branch
        ("[C]<1.0000,2.0000,3.0000>1", "cannot be parsed: unclosed ring"),  # unclosed ring
        ("=[O]<0.0000,0.0000,0.0000>".join(["[C]<0.0000,0.0000,0.0000>", "", ""]), "not a valid molecule: Explicit valence for atom # 1 O"),  # C=O=O
    ],
)
def test_malformed_bodies_are_errors(body, reason):
    with pytest.raises(InputError, match=reason):
        decode_enriched(body, FIXED4)


@pytest.mark.parametrize(
    "text, reason",
    [
        (GOOD + "[/CONFORMER]", "does not start with"),
        ("[CONFORMER]" + GOOD, "does not end with"),
        ("[CONFORMER]" + GOOD + "[/CONFORMER]junk", "does not end with"),
        (" [CONFORMER]" + GOOD + "[/CONFORMER]", "does not start with"),
    ],
)
def test_text_outside_the_tags_is_an_error(text, reason):
    with pytest.raises(InputError, match=reason):
        decode_generation(text, FIXED4)


def test_stripped_profile_reads_stripped_values_only():
    body = "[C]<1.25,0,-3.1>[O]<10,-0.5,0.0001>"
    assert decode_enriched(body, STRIPPED).canonical_smiles == "CO"
    with pytest.raises(InputError, match="coord3-fixed4"):
        decode_enriched(body, FIXED4)
    with pytest.raises(InputError, match="coord3-stripped"):
        decode_enriched(GOOD, STRIPPED)  # 1.0000 has trailing zeros


def test_error_names_the_atom_and_position():
    with pytest.raises(InputError, match=r"atom 2 \[O\] at character 52"):
        decode_enriched(GOOD.replace("0.0001>", "0.0001x>"), FIXED4)
