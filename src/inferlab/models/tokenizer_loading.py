"""A HuggingFace tokenizer folder -> its tokenizer object, without importing AutoTokenizer where we can.

`transformers.AutoTokenizer` imports the auto-model machinery (configuration_auto, auto_factory, the
generation stack), which pulls in torch.distributed.tensor, torch._dynamo, sympy and, where installed,
sklearn: an import that costs many times the tokenizer's own load and holds the GIL against the threads
beside it (the engine's weight load, a process's template building). The folder's tokenizer_config.json
names its class (`"tokenizer_class": "Qwen2Tokenizer"`); that class, taken from the transformers package
(whose lazy module imports only the tokenizer's own module), loads the same tokenizer AutoTokenizer would.
Folders without that field (or naming a class transformers lacks, or custom code through `auto_map`) go
through AutoTokenizer.

load_tokenizer (what the engine and the pipelines use) reads a folder's snapshot where one is kept and keeps
one after a transformers load (tokenizer_snapshot.py): a later process loads no transformers at all.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from pathlib import Path
from typing import Any

from inferlab.errors import InputError
from inferlab.models.tokenizer_snapshot import read_snapshot, write_snapshot

log = logging.getLogger(__name__)

TOKENIZER_JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                        "vocab.json")


def load_tokenizer(model_dir: str | Path, cache_root: Path | None = None, snapshots: bool = True) -> Any:
    """The checkpoint's tokenizer (its kept snapshot, else HuggingFace's, of which a snapshot is then kept, under
    `cache_root` or the default cache folder; `snapshots=False`: HuggingFace's, nothing kept), or None when the
    folder has none (prompt_ids still work)."""
    root = Path(model_dir)
    if not any((root / name).exists() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        log.warning("%s has no tokenizer files: text prompts and text outputs are unavailable", root)
        return None
    if not snapshots:
        return load_hf_tokenizer(root)
    snapshot = read_snapshot(root, functools.partial(load_hf_tokenizer, root), cache_root)
    if snapshot is not None:
        return snapshot
    tokenizer = load_hf_tokenizer(root)
    write_snapshot(root, tokenizer, cache_root)
    return tokenizer


@functools.lru_cache(maxsize=4)
def shared_tokenizer(model_dir: str) -> Any:
    """load_tokenizer(model_dir), once per process and folder: for the conformer pipeline's helpers (its
    preparing and judging code, in one process when they run inline), which only read it."""
    return load_tokenizer(model_dir)


def load_tokenizer_timed(model_dir: str | Path, cache_root: Path | None, snapshots: bool) -> tuple[Any, float]:
    """(load_tokenizer(...), seconds it took): the Engine's start-up job (tokenizer_s)."""
    started = time.perf_counter()
    return load_tokenizer(model_dir, cache_root, snapshots), time.perf_counter() - started


def load_hf_tokenizer(folder: str | Path) -> Any:
    """The folder's tokenizer (what AutoTokenizer.from_pretrained(folder) returns); InputError naming the
    damaged file when the tokenizer files cannot be loaded."""
    try:
        tokenizer_class = tokenizer_class_of(Path(folder))
        if tokenizer_class is None:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(folder))
        return tokenizer_class.from_pretrained(str(folder))
    except ImportError:
        raise  # a missing package (sentencepiece, tiktoken...): the CLI names what to install
    except Exception as e:  # transformers and tokenizers raise many types for damaged files
        raise InputError(_unloadable(Path(folder), e)) from None


def _unloadable(folder: Path, error: Exception) -> str:
    """Why `folder`'s tokenizer could not be loaded: the first of its JSON files that does not parse, else
    the loader's own words."""
    for name in TOKENIZER_JSON_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError) as e:
            return f"{path} is not valid JSON ({e}); the tokenizer is damaged: re-download or re-save it"
    return (f"the tokenizer in {folder} cannot be loaded ({type(error).__name__}: {error}); its files are damaged "
            "or incomplete: re-download or re-save it")


def tokenizer_class_of(folder: Path) -> type | None:
    """The class named by tokenizer_config.json, from the transformers package; None when AutoTokenizer
    must decide (no config or no class named, custom code, a name transformers does not have)."""
    config_path = folder / "tokenizer_config.json"
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError):
        return None
    name = config.get("tokenizer_class")
    if not isinstance(name, str) or not name or "auto_map" in config:
        return None
    import transformers

    for candidate in (name, name.removesuffix("Fast")):  # v5 folds the Fast classes into the base names
        found = getattr(transformers, candidate, None)
        if isinstance(found, type):
            return found
    log.debug("tokenizer class %s not in transformers %s: AutoTokenizer decides", name, transformers.__version__)
    return None
