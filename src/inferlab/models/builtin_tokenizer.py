"""A small byte-level BPE tokenizer built in code, so presets need no download.

It mimics the Llama-3 chemistry tokenizer where that matters for us: the Llama-3 pre-tokenizer (digits
grouped 1-3, punctuation runs merged), merged structure tokens such as `]<`, `>[`, `,-`, BOS/EOS, and the
four conformer tags as normal (non-special) tokens. Built deterministically: same code, same ids.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
PAD = "<|pad|>"
CHEM_TAGS = ("[SMILES]", "[/SMILES]", "[CONFORMER]", "[/CONFORMER]")

# The Llama-3 pre-tokenizer pattern: letters, 1-3 digit groups, punctuation runs, whitespace.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Punctuation pairs that the chemistry format produces between coordinate blocks and atoms.
PUNCT_MERGES = ("]<", ">[", ">(", ">)", ">=", ">/", ">#", ",-", "-.", "=[", "([", ")[", "#[", "/[", "..", "--")


def _merges() -> list[tuple[str, str]]:
    digits = "0123456789"
    merges = [(a, b) for a in digits for b in digits]  # two-digit tokens first...
    # ...then three-digit tokens, reachable from either two-digit pair BPE may have merged first.
    merges += [(a + b, c) for a in digits for b in digits for c in digits]
    merges += [(a, b + c) for a in digits for b in digits for c in digits]
    merges += [(p[0], p[1]) for p in PUNCT_MERGES]
    return merges


def build_builtin_tokenizer() -> PreTrainedTokenizerFast:
    """Return the built-in tokenizer (about 1,400 tokens), ready for save_pretrained."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab: dict[str, int] = {ch: i for i, ch in enumerate(alphabet)}
    merges = _merges()
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([BOS, EOS, PAD])
    tok.add_tokens(list(CHEM_TAGS))
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD)
