"""The template as a regex (what vLLM's structured outputs and xgrammar's HF processor are given): it
fullmatches the encoder's text of every molecule in every profile, rejects corrupted texts, and the peers'
own regex engines (xgrammar, llguidance; where installed) accept the tokenised text and then EOS."""

from __future__ import annotations

import re

import pytest
from conformer_molecules import EDGE_CASE_SMILES, embed, nci_smiles
from hypothesis import given, settings
from hypothesis import strategies as st
from rdkit import Chem

from inferlab.constraints.segments import Copy, EndOfSequence, Hole
from inferlab.errors import ConfigError
from inferlab.workloads.conformers.chemistry.encode import encode_conformer
from inferlab.workloads.conformers.chemistry.profiles import PROFILES, get_profile
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.chemistry.template_regex import escape_literal, template_regex


def encoded_text_and_regex(mol: Chem.Mol, profile_name: str) -> tuple[str, str]:
    profile = PROFILES[profile_name]
    text = encode_conformer(mol, profile).generation_text(profile)
    template = build_template(Chem.MolToSmiles(Chem.RemoveHs(mol)), profile)
    return text, template_regex(template.segments)


@settings(max_examples=30, deadline=None)
@given(smiles=st.sampled_from(nci_smiles(2000)), seed=st.integers(0, 2**16),
       profile_name=st.sampled_from(sorted(PROFILES)))
def test_the_regex_fullmatches_the_encoder_text_of_nci_molecules(smiles, seed, profile_name):
    mol = embed(smiles, seed=seed)
    if mol is None:
        return  # RDKit cannot embed this one: nothing to encode
    try:
        text, pattern = encoded_text_and_regex(mol, profile_name)
    except Exception as e:  # noqa: BLE001 - molecules the format refuses (dative bonds) have no template either
        if "dative" in str(e).lower():
            return
        raise
    assert re.fullmatch(pattern, text) is not None


@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_the_regex_fullmatches_edge_cases(profile_name):
    for smiles in EDGE_CASE_SMILES.values():
        mol = embed(smiles)
        if mol is not None:
            text, pattern = encoded_text_and_regex(mol, profile_name)
            assert re.fullmatch(pattern, text) is not None, smiles


def corruptions(text: str, profile_name: str) -> dict[str, str]:
    """Texts that differ from a valid conformer in one way the constraint forbids."""
    first_value = re.search(r"<(-?\d+(?:\.\d+)?)", text).group(1)
    out = {
        "descriptor changed": text.replace("[C]", "[N]", 1),
        "closing tag missing": text.removesuffix("[/CONFORMER]"),
        "block content cut": re.sub(r"<[^<>]*>", "<1.0000>", text, count=1),
        "four-digit integer part": text.replace(f"<{first_value}", "<1234" + first_value[first_value.find("."):]
                                                if "." in first_value else "<1234.5", 1),
        "space in a block": text.replace(",", ", ", 1),
        "trailing text": text + "x",
    }
    if profile_name.endswith("fixed4"):
        out["five decimals"] = text.replace(f"<{first_value}", f"<{first_value}1", 1)
        out["negative zero"] = re.sub(r"<[^,<>]*,", "<-0.0000,", text, count=1)
    else:
        out["trailing zero"] = re.sub(r"<[^,<>]*,", "<1.50,", text, count=1)
    return out


@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_the_regex_rejects_corrupted_texts(profile_name):
    mol = embed("CC(=O)Nc1ccc(O)cc1", seed=3)
    text, pattern = encoded_text_and_regex(mol, profile_name)
    for what, bad in corruptions(text, profile_name).items():
        assert bad != text, what
        assert re.fullmatch(pattern, bad) is None, what


def test_escaping_is_literal_and_end_of_sequence_must_come_last():
    literal = "[C@@H]1(Cl)c2cc{3}n.|$^*+?\\x"
    assert re.fullmatch(escape_literal(literal), literal) is not None
    assert re.fullmatch(escape_literal(literal), literal.replace(".", "a")) is None
    assert template_regex([Copy("a"), Hole("coord3-fixed4"), Copy(">"), EndOfSequence()]).startswith("a(?:")
    with pytest.raises(ConfigError, match="EndOfSequence"):
        template_regex([Copy("a"), EndOfSequence(), Copy("b")])
    with pytest.raises(ConfigError, match="unknown"):
        template_regex([Hole("no-such-grammar")])


@pytest.fixture(scope="module")
def chem_tokenizer(qwen3_chem_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen3_chem_dir))


def _valid_and_invalid(profile_name: str) -> tuple[str, str, str]:
    mol = embed("C[C@H](N)C(=O)Oc1ccccc1/C=C/Br", seed=5)
    text, pattern = encoded_text_and_regex(mol, profile_name)
    return text, corruptions(text, profile_name)["block content cut"], pattern


@pytest.fixture(scope="module")
def xgrammar_info(chem_tokenizer):
    """xgrammar's view of the tokenizer (seconds for a 150k vocabulary): built once, read by each profile's test."""
    xgr = pytest.importorskip("xgrammar")
    return xgr.TokenizerInfo.from_huggingface(chem_tokenizer, stop_token_ids=[chem_tokenizer.eos_token_id])


@pytest.fixture(scope="module")
def llguidance_tokenizer(chem_tokenizer):
    """llguidance's view of the tokenizer (seconds for a 150k vocabulary): built once, read by each profile's test."""
    pytest.importorskip("llguidance")
    import llguidance.hf

    return llguidance.hf.from_tokenizer(chem_tokenizer)


@pytest.mark.parametrize("profile_name", ["v3-fixed4", "v2-stripped"])
def test_xgrammar_accepts_the_tokenised_text_then_eos(chem_tokenizer, xgrammar_info, profile_name):
    xgr = pytest.importorskip("xgrammar")
    text, bad, pattern = _valid_and_invalid(profile_name)
    eos = chem_tokenizer.eos_token_id
    info = xgrammar_info
    compiled = xgr.GrammarCompiler(info).compile_regex(pattern)
    matcher = xgr.GrammarMatcher(compiled)
    assert all(matcher.accept_token(t) for t in chem_tokenizer(text, add_special_tokens=False)["input_ids"])
    assert matcher.accept_token(eos) and matcher.is_terminated()
    rejecting = xgr.GrammarMatcher(compiled)
    assert not all(rejecting.accept_token(t) for t in chem_tokenizer(bad, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("profile_name", ["v3-fixed4", "v2-stripped"])
def test_llguidance_accepts_the_tokenised_text_then_eos(chem_tokenizer, llguidance_tokenizer, profile_name):
    import llguidance

    text, bad, pattern = _valid_and_invalid(profile_name)
    eos = chem_tokenizer.eos_token_id
    ll_tokenizer = llguidance_tokenizer
    grammar = llguidance.grammar_from("regex", pattern)  # what vLLM's guidance backend builds
    matcher = llguidance.LLMatcher(ll_tokenizer, grammar)
    assert not matcher.get_error()
    assert matcher.consume_tokens(chem_tokenizer(text, add_special_tokens=False)["input_ids"])
    assert matcher.is_accepting() and matcher.consume_token(eos)
    rejecting = llguidance.LLMatcher(ll_tokenizer, grammar)
    assert not rejecting.consume_tokens(chem_tokenizer(bad, add_special_tokens=False)["input_ids"])


def test_the_regex_needs_the_profile_hole_grammar():
    template = build_template("CCO", get_profile("v3-stripped"))
    pattern = template_regex(template.segments)
    assert re.fullmatch(pattern, template.fill(["1.5,0,-2"] * 3)) is not None
    assert re.fullmatch(pattern, template.fill(["1.5000,0,-2"] * 3)) is None
