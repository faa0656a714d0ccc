"""A fast tokenizer's built form kept on disk, so that later loads need neither transformers nor its import.

transformers builds a fast tokenizer from a folder's files (for qwen3-chem: vocab.json + merges.txt and the
class's own pre-tokenizer), after importing its tokenization stack: seconds of GIL-holding import beside the
engine's weight load (docs/decisions.md has the figures), and again in each of the
conformer pipeline's preparing processes. What it builds is a `tokenizers.Tokenizer` (the Rust backend that
does every encode and decode) plus a few attributes. The first load through transformers writes that backend
(`to_str()`) and the attributes under `<cache>/tokenizers/`, keyed by the folder's files' bytes and the
transformers / tokenizers versions; later loads read them back into a SnapshotTokenizer, which answers the
calls inferlab makes (encode, `tokenizer(text).input_ids`, decode, the special ids, the vocabulary) through
that same backend, the way transformers' fast tokenizer does (`tokenization_utils_tokenizers`: `encode_batch`,
`decode`, nothing around them once clean-up is off). Any other attribute (a chat template, padding,
save_pretrained) loads the transformers tokenizer on first use and answers from it.

Only tokenizers whose transformers object adds nothing around the backend are kept: a fast tokenizer with
`clean_up_tokenization_spaces` and `split_special_tokens` off (qwen3-chem's, the reference model's, the
built-in). Others always load through transformers.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from inferlab.cache_dir import default_cache_dir

log = logging.getLogger(__name__)

FORMAT = 1  # the layout of the files below; bump when it changes
SNAPSHOT_ENV = "INFERLAB_TOKENIZER_SNAPSHOTS"  # "0": always load through transformers
SOURCE_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json")
SPECIAL_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")
KEPT_ATTRIBUTES = ("padding_side", "truncation_side", "model_max_length")


def snapshots_enabled() -> bool:
    return os.environ.get(SNAPSHOT_ENV, "1") != "0"


def snapshot_key(folder: Path) -> dict[str, Any]:
    """What the built tokenizer depends on: the folder's files (bytes) and the libraries that build it."""
    files = {}
    for name in SOURCE_FILES:
        path = folder / name
        if path.is_file():
            files[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"format": FORMAT, "files": files, "transformers": _version("transformers"),
            "tokenizers": _version("tokenizers")}


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _paths(key: dict[str, Any], root: Path | None) -> tuple[Path, Path]:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    folder = (root or default_cache_dir()) / "tokenizers"
    return folder / f"{digest}.json", folder / f"{digest}.backend.json"


def read_snapshot(folder: Path, load_full: Callable[[], Any], root: Path | None = None) -> "SnapshotTokenizer | None":
    """The folder's snapshot, or None (none kept, snapshots off, or an unreadable or stale entry: logged)."""
    if not snapshots_enabled():
        return None
    key = snapshot_key(folder)
    meta_path, backend_path = _paths(key, root)
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("key") != key:
            raise ValueError("its key differs")
        from tokenizers import Tokenizer

        backend = Tokenizer.from_file(str(backend_path))
    except Exception as e:  # noqa: BLE001 - a damaged snapshot is rebuilt, never fatal
        log.warning("tokenizer snapshot %s unreadable (%s): loading through transformers", meta_path, e)
        return None
    return SnapshotTokenizer(backend, meta["attributes"], load_full)


def write_snapshot(folder: Path, tokenizer: Any, root: Path | None = None) -> Path | None:
    """Keep `tokenizer`'s (transformers', loaded from `folder`) backend and attributes; returns the entry's
    path, or None where it is not kept (snapshots off, a tokenizer with work around its backend, a folder
    that cannot be written: logged)."""
    if not snapshots_enabled() or not _backend_only(tokenizer):
        return None
    key = snapshot_key(folder)
    meta_path, backend_path = _paths(key, root)
    attributes = {name: getattr(tokenizer, name, None) for name in SPECIAL_NAMES + KEPT_ATTRIBUTES}
    attributes["length"] = len(tokenizer)
    try:
        _write_atomic(backend_path, tokenizer.backend_tokenizer.to_str())
        _write_atomic(meta_path, json.dumps({"key": key, "attributes": attributes}, indent=1))  # last: the mark
    except (OSError, TypeError, ValueError) as e:
        log.warning("tokenizer snapshot not written to %s (%s); set %s to a writable folder", meta_path.parent, e,
                    "INFERLAB_CACHE_DIR")
        return None
    return meta_path


def _backend_only(tokenizer: Any) -> bool:
    """True when transformers' encode and decode of `tokenizer` are its backend's alone."""
    return (getattr(tokenizer, "is_fast", False) and hasattr(tokenizer, "backend_tokenizer")
            and not getattr(tokenizer, "clean_up_tokenization_spaces", True)
            and not getattr(tokenizer, "split_special_tokens", True))


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                     delete=False, encoding="utf-8") as f:
        tmp = Path(f.name)
        f.write(text)
    os.replace(tmp, path)


class Encoded(dict):
    """`tokenizer(text)`'s answer: `.input_ids` and `["input_ids"]`, `.attention_mask` as transformers gives."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class SnapshotTokenizer:
    """A transformers fast tokenizer's calls answered by its kept backend; everything else by the transformers
    tokenizer itself, loaded on first need (`load_full`)."""

    is_fast = True

    def __init__(self, backend: Any, attributes: dict[str, Any], load_full: Callable[[], Any]) -> None:
        self.backend_tokenizer = backend
        self._length = attributes["length"]
        for name in SPECIAL_NAMES + KEPT_ATTRIBUTES:
            setattr(self, name, attributes.get(name))
        for name in SPECIAL_NAMES:
            token = attributes.get(name)
            setattr(self, f"{name}_id", None if token is None else backend.token_to_id(token))
        self._load_full = load_full
        self._full: Any = None
        self._full_lock = threading.Lock()

    # ---- what the engine, the constraint compiler and the conformer pipeline call ---------------------------
    def __len__(self) -> int:
        return self._length

    def __call__(self, text: Any, **kwargs: Any) -> Any:
        if kwargs.keys() - {"add_special_tokens", "return_offsets_mapping"} or not _is_texts(text):
            return self.full()(text, **kwargs)  # padding, truncation, tensors, pairs: transformers' own
        add, offsets = kwargs.get("add_special_tokens", True), kwargs.get("return_offsets_mapping", False)
        single = isinstance(text, str)
        encodings = self.backend_tokenizer.encode_batch([text] if single else list(text), add_special_tokens=add)
        fields = {"input_ids": [e.ids for e in encodings], "attention_mask": [e.attention_mask for e in encodings]}
        if offsets:  # transformers' fast tokenizers give the backend's character offsets as they are
            fields["offset_mapping"] = [e.offsets for e in encodings]
        return Encoded({name: values[0] for name, values in fields.items()} if single else fields)

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        if kwargs:
            return self.full().encode(text, add_special_tokens=add_special_tokens, **kwargs)
        return self.backend_tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        if kwargs.get("clean_up_tokenization_spaces"):
            return self.full().decode(token_ids, skip_special_tokens=skip_special_tokens, **kwargs)
        ids = [token_ids] if isinstance(token_ids, int) else [int(i) for i in token_ids]
        return self.backend_tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def batch_decode(self, sequences: Any, skip_special_tokens: bool = False, **kwargs: Any) -> list[str]:
        if kwargs.get("clean_up_tokenization_spaces"):
            return self.full().batch_decode(sequences, skip_special_tokens=skip_special_tokens, **kwargs)
        return self.backend_tokenizer.decode_batch([[int(i) for i in s] for s in sequences],
                                                   skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: Any, skip_special_tokens: bool = False) -> Any:
        if skip_special_tokens:
            return self.full().convert_ids_to_tokens(ids, skip_special_tokens=True)
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids]

    def get_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    @property
    def added_tokens_decoder(self) -> dict[int, Any]:
        return dict(sorted(self.backend_tokenizer.get_added_tokens_decoder().items()))

    # ---- the rest: transformers' tokenizer -------------------------------------------------------------------
    def full(self) -> Any:
        """The transformers tokenizer of the same folder (loaded once, on first need)."""
        with self._full_lock:
            if self._full is None:
                self._full = self._load_full()
            return self._full

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.full(), name)


def _is_texts(text: Any) -> bool:
    return isinstance(text, str) or (isinstance(text, (list, tuple)) and all(isinstance(t, str) for t in text))
