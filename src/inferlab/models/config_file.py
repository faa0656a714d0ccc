"""A checkpoint's config.json, read and checked before anything is sized from it.

`read_config` returns the file's object only when it is one: a JSON object whose model sizes (layers,
hidden size, heads, vocabulary, positions...; also inside `text_config`) are whole numbers between 1
and a bound no real checkpoint comes near. Anything else is one InputError naming the file, the field,
the value and the fix, so a damaged or hostile config (`num_hidden_layers: 1e9`, a list, a string) never
reaches code that would allocate by it (the weight loader's expected shapes, the memory plan,
transformers' model classes). Every reader of config.json in the workloads and the engine goes through it;
it reads at most checkpoint_files.SMALL_FILE_BYTES of a regular file (a link to /dev/zero is refused).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inferlab.errors import InputError
from inferlab.models.checkpoint_files import read_small_file

# Field -> the largest value accepted: ~30x the largest open models' (126 layers, hidden 16,384, 262,144
# vocabulary entries, 10M positions).
SIZE_LIMITS = {
    "num_hidden_layers": 4096,
    "hidden_size": 1 << 19,
    "intermediate_size": 1 << 21,
    "num_attention_heads": 1 << 14,
    "num_key_value_heads": 1 << 14,
    "head_dim": 1 << 14,
    "vocab_size": 1 << 24,
    "max_position_embeddings": 1 << 28,
    "num_labels": 1 << 20,
}
_DAMAGED = "the checkpoint is damaged or not a HuggingFace model; re-download or re-save it"


def read_config(model_dir: str | Path) -> dict[str, Any]:
    """`model_dir`/config.json as a dict, its sizes checked."""
    if not Path(model_dir).is_dir():
        raise InputError(f"model folder {model_dir} does not exist; pass a local HuggingFace checkpoint folder as "
                         "--model (or make one: inferlab model init --preset tiny --out DIR)")
    path = Path(model_dir) / "config.json"
    try:
        cfg = json.loads(read_small_file(path).decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"{Path(model_dir)} has no config.json, so it is not a HuggingFace checkpoint folder; pass "
                         "one as --model (or make one: inferlab model init --preset tiny --out DIR)") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text; {_DAMAGED}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}); {_DAMAGED}") from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"{path} cannot be read as JSON ({e}); {_DAMAGED}") from None
    except OSError as e:
        raise InputError(f"{path} cannot be read ({e.strerror})") from None
    check_config_object(cfg, path)
    return cfg


def check_config_object(cfg: Any, path: Path) -> None:
    if not isinstance(cfg, dict):
        raise InputError(f"{path} holds a JSON {type(cfg).__name__}, not an object of settings; {_DAMAGED}")
    _check_sizes(cfg, path, "")
    text = cfg.get("text_config")
    if text is not None:
        if not isinstance(text, dict):
            raise InputError(f"{path}: text_config is a {type(text).__name__}, not an object of settings; {_DAMAGED}")
        _check_sizes(text, path, "text_config.")


def _check_sizes(cfg: dict[str, Any], path: Path, prefix: str) -> None:
    for key, limit in SIZE_LIMITS.items():
        value = cfg.get(key)
        for item in value if isinstance(value, list) else [value]:  # some families give one size per layer
            if item is None:
                continue
            if isinstance(item, bool) or not isinstance(item, int):
                raise InputError(f"{path}: {prefix}{key} = {item!r} is not a whole number; {_DAMAGED} "
                                 f"(or correct the field)")
            if not 1 <= item <= limit:
                raise InputError(f"{path}: {prefix}{key} = {item:,} is outside 1..{limit:,}, which no real model "
                                 f"has; {_DAMAGED} (or correct the field)")
