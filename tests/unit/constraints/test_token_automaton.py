"""Token-level automata against the tokenizers themselves and Python's `re`."""

from __future__ import annotations

import re
from collections import deque

import pytest
import numpy as np
from constraint_helpers import make_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from inferlab.constraints.grammars import GRAMMARS
from inferlab.constraints.token_automaton import DEAD_STATE, build_grammar_set, grammar_set_for
from inferlab.errors import ConfigError, UnsupportedError

GRAMMAR_NAMES = sorted(GRAMMARS)


def _run(grammar_set, name: str, token_ids: list[int]) -> int:
    state = grammar_set.grammars[name].start_state
    for tok in token_ids:
        state = grammar_set.next_state(state, tok)
    return state


def _decode(tokenizer, ids) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def test_qwen_candidates_are_the_fourteen_coordinate_tokens(qwen_case):
    # The study of the qwen3-chem vocabulary (3dmolgen-study.md 3.2): 0-9 . , - ,- -. are the only tokens
    # made of coordinate characters that can appear; `-.` cannot occur in our grammars (no value is "-.5").
    expected = {str(d) for d in range(10)} | {".", ",", "-", ",-"}
    for name in GRAMMAR_NAMES:
        texts = {_decode(qwen_case.tokenizer, [t]) for t in qwen_case.grammar_set.grammars[name].candidate_tokens}
        assert texts == expected


def test_llama_candidates_include_every_digit_group(llama_case):
    tok = llama_case.tokenizer
    vocab = tok.get_vocab()
    digit_groups = {t for t in vocab if set(t) <= set("0123456789") and 1 <= len(t) <= 3}
    assert len(digit_groups) == 1110  # 10 + 100 + 1000: "770" is one token
    for name in GRAMMAR_NAMES:
        texts = {_decode(tok, [t]) for t in llama_case.grammar_set.grammars[name].candidate_tokens}
        assert texts == digit_groups | {".", ",", "-", ",-"}


@pytest.mark.parametrize("name", GRAMMAR_NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_canonical_tokenization_of_accepted_strings_is_accepted(case, name, data):
    text = data.draw(st.from_regex(GRAMMARS[name], fullmatch=True))
    ids = case.tokenizer(text, add_special_tokens=False).input_ids
    state = _run(case.grammar_set, name, ids)
    assert bool(case.grammar_set.accepting[state]), (text, ids)


@pytest.mark.parametrize("name", GRAMMAR_NAMES)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_token_sequences_agree_with_re(case, name, data):
    grammar_set = case.grammar_set
    candidates = grammar_set.grammars[name].candidate_tokens
    lures = case.tokenizer(">]<[a", add_special_tokens=False).input_ids + [case.tokenizer.eos_token_id]
    ids = data.draw(st.lists(st.sampled_from(candidates + tuple(lures)), max_size=12))
    state = _run(grammar_set, name, ids)
    text = _decode(case.tokenizer, ids)
    assert bool(grammar_set.accepting[state]) == bool(re.fullmatch(GRAMMARS[name], text)), text
    if state != DEAD_STATE:  # live: some completion must exist; find one through the tables, check with re
        completion = _path_to_acceptance(grammar_set, state)
        assert re.fullmatch(GRAMMARS[name], text + _decode(case.tokenizer, completion)), (text, completion)


def _all_candidates(grammar_set) -> list[int]:
    return sorted({t for info in grammar_set.grammars.values() for t in info.candidate_tokens})


def _path_to_acceptance(grammar_set, state: int) -> list[int]:
    parent = {state: None}
    queue = deque([state])
    while queue:
        s = queue.popleft()
        if grammar_set.accepting[s]:
            path = []
            while parent[s] is not None:
                s, tok = parent[s]
                path.append(tok)
            return path[::-1]
        for tok in _all_candidates(grammar_set):
            t = grammar_set.next_state(s, tok)
            if t != DEAD_STATE and t not in parent:
                parent[t] = (s, tok)
                queue.append(t)
    raise AssertionError(f"live state {state} cannot reach acceptance")


def test_every_live_state_reaches_acceptance(case):
    table = case.grammar_set.transitions.tolist()
    reaches = set(np.flatnonzero(case.grammar_set.accepting).tolist())
    for _ in range(len(table)):
        reaches |= {s for s, row in enumerate(table) if any(t in reaches for t in row)}
    assert reaches == set(range(1, len(table)))
    # and the host-side allowed list is exactly the candidates with a live move
    gs = case.grammar_set
    start = gs.grammars["coord3-fixed4"].start_state
    expected = [t for t in _all_candidates(gs) if gs.next_state(start, t) != DEAD_STATE]
    assert gs.allowed_tokens(start) == expected


def test_token_bounds(qwen_case, llama_case):
    # Fewest: "0.0000,0.0000,0.0000" is 20 qwen tokens (one per character) and 14 built-in tokens
    # (0 . 000 0); "0,0,0" is 5 for both. Most: the 29 characters of "-999.9999,-999.9999,-999.9999", each
    # a token of its own (both vocabularies hold every single character).
    bounds = {
        (qwen_case.name, "coord3-fixed4"): (20, 29),
        (llama_case.name, "coord3-fixed4"): (14, 29),
        (qwen_case.name, "coord3-stripped"): (5, 29),
        (llama_case.name, "coord3-stripped"): (5, 29),
    }
    for case in (qwen_case, llama_case):
        for name in GRAMMAR_NAMES:
            info = case.grammar_set.grammars[name]
            assert (info.min_tokens, info.max_tokens) == bounds[(case.name, name)]
    shortest = llama_case.tokenizer("0.0000,0.0000,0.0000", add_special_tokens=False).input_ids
    assert len(shortest) == 14


def test_tables_shapes_and_dead_entries(case):
    gs = case.grammar_set
    assert gs.transitions.shape == (gs.num_states, gs.num_classes) and gs.transitions.dtype == np.int64
    assert gs.token_class.shape == (len(case.tokenizer),)
    assert (gs.transitions[DEAD_STATE] == DEAD_STATE).all() and (gs.transitions[:, 0] == DEAD_STATE).all()
    assert not gs.accepting[DEAD_STATE]
    eos = case.tokenizer.eos_token_id
    assert gs.token_class[eos] == 0 and gs.next_state(1, eos) == DEAD_STATE
    assert gs.next_state(1, case.model_vocab - 1) == DEAD_STATE  # a padded id
    starts = sorted(info.start_state for info in gs.grammars.values())
    assert starts[0] == 1 and sum(info.num_states for info in gs.grammars.values()) == gs.num_states - 1


def test_grammar_sets_are_cached_per_tokenizer(qwen_case, llama_case):
    assert grammar_set_for(qwen_case.tokenizer) is qwen_case.grammar_set
    assert qwen_case.grammar_set.key != llama_case.grammar_set.key
    subset = grammar_set_for(llama_case.tokenizer, ("coord3-stripped",))
    assert list(subset.grammars) == ["coord3-stripped"] and subset.key != llama_case.grammar_set.key
    with pytest.raises(ConfigError, match="known grammars: coord3-fixed4, coord3-stripped"):
        grammar_set_for(llama_case.tokenizer, ("coord9",))


def test_unbounded_and_unspellable_grammars_are_refused(llama_case):
    with pytest.raises(UnsupportedError, match="unbounded"):
        build_grammar_set(llama_case.tokenizer, {"digits": "[0-9]+"})
    # The built-in byte-level vocabulary holds no whole token for a two-byte character.
    with pytest.raises(UnsupportedError, match="no sequence of this tokenizer's tokens"):
        build_grammar_set(llama_case.tokenizer, {"accent": "é{1,2}"})


def test_tokens_that_decode_differently_in_context_are_not_candidates():
    # SentencePiece style: "▁1" decodes alone to "1" but inside a sequence to " 1".
    vocab = {t: i for i, t in enumerate(["▁", "1", "2", "▁1"])}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[("▁", "1")], fuse_unk=False))
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Metaspace()
    raw.add_special_tokens(["</s>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="</s>")
    assert tok.decode([3]) == "1"
    gs = build_grammar_set(tok, {"digits": "[0-9]{1,3}"})
    assert gs.grammars["digits"].candidate_tokens == (1, 2)


def test_multi_character_tokens_step_through_several_characters():
    tok = make_tokenizer(list("0123.") + ["12", "3."], [("1", "2"), ("3", ".")])
    gs = build_grammar_set(tok, {"num": "[0-9]{1,2}\\.[0-9]"})
    ids = tok("12.3", add_special_tokens=False).input_ids
    assert [tok.decode([i]) for i in ids] == ["12", ".", "3"]
    assert gs.accepting[_run(gs, "num", ids)]
    three_dot = tok.convert_tokens_to_ids("3.")
    assert gs.accepting[_run(gs, "num", [three_dot, 0])]  # "3." + "0"
    assert _run(gs, "num", [1, 2, 3, three_dot]) == DEAD_STATE  # "1233." has three integer digits


def test_token_texts_fast_path_equals_batch_decode_for_every_id(case):
    from inferlab.constraints.token_automaton import _python_decode, token_texts

    ids = [[i] for i in range(len(case.tokenizer))]
    assert token_texts(case.tokenizer) == _python_decode(case.tokenizer, ids)


def test_token_texts_falls_back_when_the_backend_disagrees(llama_case, caplog):
    from inferlab.constraints.token_automaton import _python_decode, token_texts

    class SkewedBackend:  # decodes id 0 differently from transformers
        def __init__(self, inner):
            self.inner = inner

        def decode_batch(self, ids, skip_special_tokens):
            texts = self.inner.decode_batch(ids, skip_special_tokens=skip_special_tokens)
            return ["<skewed>", *texts[1:]]

    class Wrapped:
        def __init__(self, tok):
            self.tok, self.backend_tokenizer = tok, SkewedBackend(tok.backend_tokenizer)
            self.added_tokens_decoder = tok.added_tokens_decoder

        def __len__(self):
            return len(self.tok)

        def batch_decode(self, *args, **kwargs):
            return self.tok.batch_decode(*args, **kwargs)

    wrapped = Wrapped(llama_case.tokenizer)
    texts = token_texts(wrapped)
    assert texts == _python_decode(llama_case.tokenizer, [[i] for i in range(len(wrapped))])
    assert "decodes some ids differently" in caplog.text
