"""Template: SMILES + profile -> prompt and constraint segments that reproduce the encoder exactly."""

from __future__ import annotations

import re

import pytest
from conformer_molecules import EDGE_CASE_SMILES
from rdkit import Chem

from inferlab.constraints.segments import Copy, EndOfSequence, Hole
from inferlab.errors import InputError
from inferlab.workloads.conformers.chemistry.decode import decode_generation
from inferlab.workloads.conformers.chemistry.encode import encode_conformer
from inferlab.workloads.conformers.chemistry.profiles import PROFILES, get_profile
from inferlab.workloads.conformers.chemistry.template import build_template


def split_encoder_text(text: str) -> list[str]:
    """Independent reference: the encoder's text cut at every block content, `<` and `>` kept."""
    return re.split(r"(?<=<)[^<>]*(?=>)", text)


@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_template_filled_with_encoder_blocks_is_the_encoder_text(nci_conformers, profile_name):
    profile = PROFILES[profile_name]
    for mol in nci_conformers:
        encoded = encode_conformer(mol, profile)
        # The template starts from the SMILES text, not from the 3D molecule.
        template = build_template(Chem.MolToSmiles(Chem.RemoveHs(mol)), profile)
        text = encoded.generation_text(profile)
        assert template.fill(encoded.blocks) == text
        assert list(template.copy_texts) == split_encoder_text(text)
        assert template.canonical_smiles == encoded.canonical_smiles
        assert template.check(text, profile).canonical_smiles == encoded.canonical_smiles


@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_segment_shape(profile_name):
    profile = PROFILES[profile_name]
    for smiles in EDGE_CASE_SMILES.values():
        template = build_template(smiles, profile)
        segments = template.segments
        assert isinstance(segments[0], Copy) and segments[0].text.startswith("[CONFORMER]")
        assert isinstance(segments[-1], EndOfSequence)
        assert isinstance(segments[-2], Copy) and segments[-2].text.endswith("[/CONFORMER]")
        body = segments[:-1]
        assert all(isinstance(s, Copy) for s in body[0::2])
        assert all(s == Hole(profile.hole_grammar) for s in body[1::2])
        assert len(body[1::2]) == template.num_atoms == Chem.RemoveHs(Chem.MolFromSmiles(smiles)).GetNumAtoms()
        assert all(s.text.startswith(">") and s.text.endswith("<") for s in body[2:-1:2])
        assert template.prompt == f"[SMILES]{template.canonical_smiles}[/SMILES]"


def test_template_example():
    template = build_template("OCC", get_profile("v3-fixed4"))
    assert template.prompt == "[SMILES]CCO[/SMILES]"
    assert template.segments == (
        Copy("[CONFORMER][C]<"),
        Hole("coord3-fixed4"),
        Copy(">[C]<"),
        Hole("coord3-fixed4"),
        Copy(">[O]<"),
        Hole("coord3-fixed4"),
        Copy(">[/CONFORMER]"),
        EndOfSequence(),
    )
    assert build_template("OCC", get_profile("v2-stripped")).skeleton == "[CONFORMER][C]<>[C]<>[OH]<>[/CONFORMER]"


@pytest.mark.parametrize("smiles", ["C1CC", "not a smiles", "C(C)(C)(C)(C)C", ""])
def test_invalid_smiles_is_an_input_error_naming_it(smiles):
    with pytest.raises(InputError, match=re.escape(repr(smiles)) if smiles else "empty"):
        build_template(smiles, get_profile("v3-fixed4"))


def test_check_rejects_other_descriptors_and_molecules():
    profile = get_profile("v3-fixed4")
    template = build_template("CCO", profile)
    block = "0.0000,0.0000,0.0000"
    assert template.check(template.fill([block] * 3), profile).mol.GetNumAtoms() == 3
    with pytest.raises(InputError, match="structure differs"):
        template.check(template.fill([block] * 3).replace("[O]", "[OH]"), profile)  # a v2 descriptor
    with pytest.raises(InputError, match="structure differs"):
        template.check(f"[CONFORMER][C]<{block}>[C]<{block}>[/CONFORMER]", profile)  # an atom missing
    with pytest.raises(InputError, match="structure differs"):
        template.check(f"[CONFORMER][C]<{block}>[C]<{block}>[N]<{block}>[/CONFORMER]", profile)
    with pytest.raises(InputError, match="coord3-fixed4"):
        template.check(template.fill([block, block, "0.9587abra,0.0000,0.0000"]), profile)


def test_check_keeps_radicals_that_plain_decoding_cannot_tell_apart():
    profile = get_profile("v3-fixed4")
    template = build_template("CC1(C)CCCC(C)(C)N1[O]", profile)  # TEMPO: `[O]` is a radical here
    text = template.fill(["0.0000,0.0000,0.0000"] * template.num_atoms)
    assert template.check(text, profile).canonical_smiles == template.canonical_smiles
    assert decode_generation(text, profile).canonical_smiles != template.canonical_smiles  # read as N-OH


def test_prompt_ids_take_the_bos_from_the_tokenizer(qwen3_chem_dir):
    from transformers import AutoTokenizer

    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer

    template = build_template("CCO", get_profile("v3-fixed4"))
    qwen = AutoTokenizer.from_pretrained(str(qwen3_chem_dir))
    assert qwen.decode(template.prompt_ids(qwen)) == "[SMILES]CCO[/SMILES]"  # no BOS in qwen3-chem
    assert template.prompt_ids(qwen)[0] == qwen.convert_tokens_to_ids("[SMILES]")
    builtin = build_builtin_tokenizer()
    ids = template.prompt_ids(builtin)
    assert ids[0] == builtin.bos_token_id and builtin.decode(ids[1:]) == "[SMILES]CCO[/SMILES]"
