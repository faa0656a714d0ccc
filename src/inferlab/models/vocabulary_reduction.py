"""A byte-level BPE tokenizer reduced to the tokens a corpus uses, cutting every text of that corpus exactly
as the full tokenizer does (ids mapped one to one).

Kept: the tokens the corpus uses, every token on their merge paths (both parts of the merge that makes a
kept token, recursively), the 256 byte-level base tokens and every added token; merges are kept when their
result and both parts are kept, in their original order. Normalizer, pre-tokenizer, post-processor and
decoder are the full tokenizer's. Kept tokens are renumbered in their original order (reduced id k ->
`source_ids[k]`).

Why the cut is identical on the corpus: the added tokens and the pre-tokenizer split a text into the same
words in both tokenizers. BPE then repeatedly applies, to a word, the applicable merge of lowest rank.
Every token the full tokenizer forms while cutting a corpus word, intermediate ones included, is a part
of a later merge of that word or one of its final tokens, so it lies on the merge path of a used token and
is kept; every merge the full tokenizer applies is therefore kept. At each step the reduced tokenizer's
applicable merges are a subset of the full one's that contains the full one's choice, ranks keep their
order, so it chooses the same merge (at the same position: ties are broken alike), and ends with the
same tokens. A word whose whole text is a token (`ignore_merges`) is a used token and kept. Outside the
corpus the reduced tokenizer still encodes every text (the byte tokens are all there), only maybe into
more tokens than the full one.

Torch-free: works on the tokenizer.json document (`tokenizer.backend_tokenizer.to_str()` of a fast
tokenizer) and writes a folder transformers loads (tokenizer.json, vocab.json + merges.txt for loaders
that rebuild BPE from them, tokenizer_config.json, special_tokens_map.json, VOCABULARY_MAP).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.errors import InputError, UnsupportedError

VOCABULARY_MAP = "vocabulary_map.json"
_LARGE_FILES = ("tokenizer.json", "vocab.json", VOCABULARY_MAP)  # written on one line


@dataclass(frozen=True)
class ReducedVocabulary:
    tokenizer_json: dict[str, Any]  # the reduced tokenizer.json document
    source_ids: tuple[int, ...]  # reduced id -> id in the full tokenizer

    @property
    def size(self) -> int:
        return len(self.source_ids)

    def reduced_ids(self) -> dict[int, int]:
        """Full tokenizer id -> reduced id, for the kept tokens."""
        return {source: reduced for reduced, source in enumerate(self.source_ids)}


def byte_level_alphabet() -> list[str]:
    """The 256 characters byte-level BPE writes bytes as (GPT-2's table: printable bytes as themselves,
    the others shifted above 255)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    return [chr(b) for b in printable] + [chr(256 + k) for k in range(len(shifted))]


def reduce_bpe_tokenizer(tokenizer_json: Mapping[str, Any], used_ids: Iterable[int]) -> ReducedVocabulary:
    """The tokenizer of `tokenizer_json` reduced to `used_ids` and what exact cuts need (module docstring)."""
    model = tokenizer_json.get("model", {})
    if model.get("type") != "BPE" or not _is_byte_level(tokenizer_json.get("pre_tokenizer")):
        raise UnsupportedError("vocabulary reduction needs a byte-level BPE tokenizer (model BPE, a ByteLevel "
                               "pre-tokenizer): its 256 byte tokens make every text encodable after reduction")
    vocab: dict[str, int] = model["vocab"]
    merges = [_pair(m) for m in model["merges"]]
    added = {entry["id"]: entry["content"] for entry in tokenizer_json.get("added_tokens", [])}
    token_of = {i: t for t, i in vocab.items()} | added
    unknown = sorted(set(used_ids) - token_of.keys())
    if unknown:
        raise InputError(f"token ids {unknown[:10]} are not in the tokenizer; reduce with the tokenizer that made them")

    alphabet = byte_level_alphabet()
    missing = [ch for ch in alphabet if ch not in vocab]
    if missing:
        raise UnsupportedError(f"the tokenizer lacks byte tokens {missing[:5]}; it is not a complete byte-level BPE")
    producers: dict[str, list[tuple[str, str]]] = {}
    for a, b in merges:
        producers.setdefault(a + b, []).append((a, b))
    kept_tokens = {token_of[i] for i in used_ids} | set(alphabet)
    pending = [t for t in kept_tokens if t in vocab]
    while pending:  # the merge path: both parts of each merge that makes a kept token
        token = pending.pop()
        for parts in producers.get(token, ()):
            for part in parts:
                if part not in kept_tokens:
                    kept_tokens.add(part)
                    pending.append(part)

    kept_ids = sorted({vocab[t] for t in kept_tokens if t in vocab} | set(added) | set(used_ids))
    new_id = {source: reduced for reduced, source in enumerate(kept_ids)}
    reduced = {key: copy.deepcopy(value) for key, value in tokenizer_json.items() if key != "model"}
    reduced["model"] = {key: copy.deepcopy(value) for key, value in model.items() if key not in ("vocab", "merges")}
    reduced["model"]["vocab"] = {t: new_id[i] for t, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i in new_id}
    reduced["model"]["merges"] = [[a, b] for a, b in merges if a + b in kept_tokens and a in kept_tokens
                                  and b in kept_tokens]
    for entry in reduced.get("added_tokens", []):
        entry["id"] = new_id[entry["id"]]
    _renumber_post_processor(reduced.get("post_processor"), new_id)
    return ReducedVocabulary(reduced, tuple(kept_ids))


def _pair(merge: str | list[str]) -> tuple[str, str]:
    if isinstance(merge, str):  # the older "a b" form (byte-level tokens never hold a space)
        a, _, b = merge.partition(" ")
        return a, b
    return merge[0], merge[1]


def _is_byte_level(pre_tokenizer: Mapping[str, Any] | None) -> bool:
    if not pre_tokenizer:
        return False
    if pre_tokenizer.get("type") == "ByteLevel":
        return True
    return any(_is_byte_level(p) for p in pre_tokenizer.get("pretokenizers", ()))


def _renumber_post_processor(processor: dict[str, Any] | None, new_id: dict[int, int]) -> None:
    """Special tokens a post-processor inserts (a BOS) carry ids: give them their reduced ids."""
    if not processor:
        return
    for inner in processor.get("processors", ()):
        _renumber_post_processor(inner, new_id)
    for name, special in (processor.get("special_tokens") or {}).items():
        if not all(i in new_id for i in special["ids"]):
            raise UnsupportedError(f"the post-processor inserts {name!r}, which is not an added token of the "
                                   "tokenizer; add it to the used ids")
        special["ids"] = [new_id[i] for i in special["ids"]]


def write_reduced_tokenizer(folder: str | Path, reduced: ReducedVocabulary, tokenizer_config: Mapping[str, Any],
                            special_tokens_map: Mapping[str, Any] | None, source: str) -> Path:
    """Write `reduced` as a tokenizer folder, its tokenizer_config.json the full one's (`tokenizer_config`)
    with the added tokens' ids renumbered; VOCABULARY_MAP names `source` and holds reduced id -> full id."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    new_id = reduced.reduced_ids()
    config = copy.deepcopy(dict(tokenizer_config))
    decoder = config.get("added_tokens_decoder") or {}
    config["added_tokens_decoder"] = {str(new_id[int(i)]): entry for i, entry in decoder.items() if int(i) in new_id}
    model = reduced.tokenizer_json["model"]
    files = {
        "tokenizer.json": reduced.tokenizer_json,
        "tokenizer_config.json": config,
        "vocab.json": model["vocab"],
        VOCABULARY_MAP: {"source": source, "reduced_size": reduced.size, "source_ids": list(reduced.source_ids)},
    }
    if special_tokens_map is not None:
        files["special_tokens_map.json"] = special_tokens_map
    for name, document in files.items():
        indent = None if name in _LARGE_FILES else 1
        (out / name).write_text(json.dumps(document, ensure_ascii=False, indent=indent) + "\n", encoding="utf-8")
    merges = "".join(f"{a} {b}\n" for a, b in model["merges"])
    (out / "merges.txt").write_text("#version: 0.2\n" + merges, encoding="utf-8")
    return out


def read_source_ids(folder: str | Path) -> list[int]:
    """Reduced id -> full tokenizer id, from a folder write_reduced_tokenizer wrote."""
    path = Path(folder) / VOCABULARY_MAP
    try:
        return [int(i) for i in json.loads(path.read_text(encoding="utf-8"))["source_ids"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path} cannot be read ({e}); rebuild the reduced tokenizer") from None
