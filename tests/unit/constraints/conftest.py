"""Fixtures for the constraint tests: the two tokenizers the design must serve (qwen3-chem: one token per
digit; our built-in Llama-3-style BPE: digits grouped 1-3) with their cached GrammarSets."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from transformers import AutoTokenizer

from inferlab.constraints.token_automaton import GrammarSet, grammar_set_for
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer


@dataclass(frozen=True)
class TokenizerCase:
    name: str
    tokenizer: object
    grammar_set: GrammarSet
    model_vocab: int  # the padded embedding size a model of this tokenizer has


@pytest.fixture(scope="session")
def qwen_case(qwen3_chem_dir) -> TokenizerCase:
    tok = AutoTokenizer.from_pretrained(str(qwen3_chem_dir))
    return TokenizerCase("qwen3-chem", tok, grammar_set_for(tok), 151936)


@pytest.fixture(scope="session")
def llama_case() -> TokenizerCase:
    tok = build_builtin_tokenizer()
    return TokenizerCase("builtin-llama3", tok, grammar_set_for(tok), 2048)


@pytest.fixture(scope="session", params=["qwen3-chem", "builtin-llama3"])
def case(request) -> TokenizerCase:
    return request.getfixturevalue("qwen_case" if request.param == "qwen3-chem" else "llama_case")


@pytest.fixture(autouse=True, scope="module")
def _one_cpu_thread_here(one_cpu_thread):
    yield
