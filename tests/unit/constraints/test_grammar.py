"""The regex subset compiler against Python's `re` (the reference), and the minimality of its automata."""

from __future__ import annotations

import itertools
import re

import pytest
from constraint_helpers import ALPHABET, patterns
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferlab.constraints.grammar import DEAD, compile_grammar
from inferlab.constraints.grammars import GRAMMARS
from inferlab.errors import ConfigError

@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns(), texts=st.lists(st.text(alphabet=ALPHABET + "x", max_size=7), max_size=20))
def test_random_patterns_accept_exactly_what_re_accepts(pattern, texts):
    dfa = compile_grammar(pattern)
    for text in texts:
        assert dfa.matches(text) == bool(re.fullmatch(pattern, text)), (pattern, text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), pattern=patterns())
def test_strings_re_generates_are_accepted(data, pattern):
    dfa = compile_grammar(pattern)
    for _ in range(5):
        assert dfa.matches(data.draw(st.from_regex(pattern, fullmatch=True)))


@pytest.mark.parametrize("name", sorted(GRAMMARS))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_named_grammars_agree_with_re(name, data):
    pattern = GRAMMARS[name]
    dfa = compile_grammar(pattern)
    positive = data.draw(st.from_regex(pattern, fullmatch=True))
    assert dfa.matches(positive)
    # Mutations of a real value: deleting, duplicating or swapping characters.
    i = data.draw(st.integers(0, len(positive) - 1))
    for mutated in (positive[:i] + positive[i + 1 :], positive[:i] + positive[i] + positive[i:], positive + "0"):
        assert dfa.matches(mutated) == bool(re.fullmatch(pattern, mutated)), mutated


def _distinguishable_pairs(dfa) -> set[tuple[int, int]]:
    """Table filling (an independent algorithm): pairs of states some suffix tells apart."""
    states = range(dfa.num_states)
    marked = {(p, q) for p in states for q in states if (p in dfa.accepting) != (q in dfa.accepting)}
    changed = True
    while changed:
        changed = False
        for p, q in itertools.product(states, states):
            if (p, q) in marked:
                continue
            for ch in dfa.alphabet:
                tp, tq = dfa.step(p, ch), dfa.step(q, ch)
                if (tp == DEAD) != (tq == DEAD) or (tp != DEAD and (tp, tq) in marked):
                    marked |= {(p, q), (q, p)}
                    changed = True
                    break
    return marked


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns())
def test_automata_are_minimal_and_trim(pattern):
    dfa = compile_grammar(pattern)
    if dfa.start == DEAD:
        return
    marked = _distinguishable_pairs(dfa)
    for p in range(dfa.num_states):
        for q in range(p + 1, dfa.num_states):
            assert (p, q) in marked, f"states {p} and {q} of {pattern!r} are equivalent"
    # Trim: every state reachable from the start (BFS numbering) and able to reach acceptance.
    for s in range(dfa.num_states):
        assert s in dfa.accepting or dfa.transitions[s], f"state {s} of {pattern!r} is dead"


@settings(max_examples=150, deadline=None)
@given(pattern=patterns())
def test_boundedness_matches_the_language(pattern):
    dfa = compile_grammar(pattern)
    size = dfa.num_states + 1  # with the implicit dead state
    if size > 4 or len(dfa.alphabet) > 3:
        return  # brute force below stays small
    # Pumping: the language is infinite iff it holds a string whose length is in [size, 2 * size).
    infinite = any(
        re.fullmatch(pattern, "".join(chars))
        for n in range(size, 2 * size)
        for chars in itertools.product(dfa.alphabet, repeat=n)
    )
    assert dfa.is_bounded() == (not infinite), pattern


def test_coordinate_grammars_facts():
    fixed4 = compile_grammar(GRAMMARS["coord3-fixed4"])
    assert fixed4.is_bounded() and fixed4.alphabet == ",-.0123456789"
    for good in ("1.2345,-0.0310,0.9400", "-10.4289,0.0000,999.9999"):
        assert fixed4.matches(good)
    for bad in ("-0.0000,1.0000,1.0000", "1.234,1.0000,1.0000", "01.0000,1.0000,1.0000", "1.0000,1.0000"):
        assert not fixed4.matches(bad)
    stripped = compile_grammar(GRAMMARS["coord3-stripped"])
    for good in ("0,0,0", "1.25,-3.1,0", "-0.5,12,3.0001"):
        assert stripped.matches(good)
    for bad in ("-0,0,0", "1.250,0,0", "1.,0,0", "0.0,0,0"):
        assert not stripped.matches(bad)


@pytest.mark.parametrize(
    "pattern, fragment",
    [
        ("a.b", "'.' is not supported"),
        ("^ab", "'^' is not supported"),
        ("[^ab]", "negated classes"),
        ("\\d", "escape '\\d'"),
        ("a**", "stacked or lazy"),
        ("a+?", "stacked or lazy"),
        ("*a", "nothing to repeat"),
        ("(ab", "missing ')'"),
        ("ab)", "unbalanced ')'"),
        ("[ab", "missing ']'"),
        ("a{3,1}", "max < min"),
        ("a{x}", "'{' must be followed"),
        ("a{2000}", "more than 1000"),
        ("(?=a)", "(?: ) group extension"),
        ("[]a]", "ambiguous"),
        ("[b-a]", "reversed"),
        ("ab\\", "ends with"),
    ],
)
def test_unsupported_syntax_is_refused_with_the_fix(pattern, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        compile_grammar(pattern)


def test_escapes_and_class_edges_mean_what_re_means():
    for pattern, texts in {
        "\\.\\-\\[\\]\\(\\)\\\\": [".-[]()\\", "a-[]()\\"],
        "[-a]": ["-", "a", "b"],
        "[a-]": ["-", "a"],
        "[.\\]]": [".", "]", "a"],
        "(?:)": ["", "a"],
        "a{0}b": ["b", "ab"],
        "(a|)b": ["b", "ab"],
        "a{2,}": ["a", "aa", "aaaaa"],
    }.items():
        dfa = compile_grammar(pattern)
        for text in texts:
            assert dfa.matches(text) == bool(re.fullmatch(pattern, text)), (pattern, text)
