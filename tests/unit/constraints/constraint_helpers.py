"""Helpers shared by the constraint tests: hypothesis strategies for patterns of our regex subset, and a
tiny hand-made tokenizer for cases the real tokenizers do not show."""

from __future__ import annotations

import re

from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

ALPHABET = "ab-.0"  # includes characters that need escaping outside classes ('.') and inside them ('-')


def _literal(ch: str) -> str:
    return re.escape(ch)


@st.composite
def char_classes(draw) -> str:
    chars = draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=3, unique=True))
    body = "".join("\\" + c if c in "-]\\[^" else c for c in chars)
    if draw(st.booleans()):
        body += "0-1"  # a range
    return f"[{body}]"


def _quantified(inner: st.SearchStrategy[str], bounded: bool) -> st.SearchStrategy[str]:
    quantifiers = ["?", "{2}", "{0,2}", "{1,3}"] + ([] if bounded else ["*", "+", "{1,}"])
    return st.tuples(inner, st.sampled_from(quantifiers)).map(lambda t: f"({t[0]}){t[1]}")


def patterns(bounded: bool = False) -> st.SearchStrategy[str]:
    leaves = st.one_of(st.sampled_from(ALPHABET).map(_literal), char_classes())
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, min_size=2, max_size=3).map("".join),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + "|".join(xs) + ")"),
            st.lists(inner, min_size=2, max_size=2).map(lambda xs: "(?:" + "|".join(xs) + ")"),
            _quantified(inner, bounded),
        ),
        max_leaves=6,
    )


def make_tokenizer(vocab_tokens: list[str], merges: list[tuple[str, str]], split_pattern: str | None = None):
    """A byte-level BPE over ASCII `vocab_tokens` (single characters and merged pairs), EOS `</s>`, with an
    optional isolating pre-tokenizer regex."""
    vocab = {t: i for i, t in enumerate(vocab_tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    steps = [pre_tokenizers.Split(Regex(split_pattern), behavior="isolated")] if split_pattern else []
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps + [byte_level])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>")
