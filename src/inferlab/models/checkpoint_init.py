"""Write a HuggingFace checkpoint of a preset's shape: config.json, model.safetensors and tokenizer files, with
random weights or, for a trained preset, the shipped weights (models/trained/). Deterministic: the same preset,
seed and dtype give the same bytes."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from inferlab.errors import ConfigError, InputError
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
from inferlab.models.presets import get_preset

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ConfigError(f"dtype={name!r} is not supported; use one of {', '.join(DTYPES)}") from None


def load_tokenizer_for_preset(preset_name: str, tokenizer_dir: str | Path | None):
    """The preset's tokenizer: a given directory wins; otherwise the built-in BPE (any tokenizer no larger
    than the preset's vocabulary works with random weights)."""
    if tokenizer_dir is not None:
        path = Path(tokenizer_dir)
        if not (path / "tokenizer_config.json").exists():
            raise InputError(f"--tokenizer {path}: no tokenizer_config.json there; pass a HuggingFace tokenizer folder")
        return AutoTokenizer.from_pretrained(str(path))
    return build_builtin_tokenizer()


def preset_model(preset_name: str, tokenizer, seed: int = 0) -> torch.nn.Module:
    """The preset's transformers model in float32, initialised from `seed`, its config's special token ids the
    tokenizer's (init_checkpoint's weights before any cast; the start of models/trained/recipe.py's training)."""
    preset = get_preset(preset_name)
    config = preset.make_config()
    if len(tokenizer) > config.vocab_size:
        raise ConfigError(
            f"tokenizer has {len(tokenizer)} tokens but preset {preset_name!r} has vocab_size {config.vocab_size}; "
            "use a preset with a larger vocabulary or a smaller tokenizer"
        )
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    auto = AutoModelForSequenceClassification if preset.task == "sequence-classification" else AutoModelForCausalLM
    torch.manual_seed(seed)
    model = auto.from_config(config)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = config.pad_token_id
    return model


def init_checkpoint(
    preset_name: str,
    out_dir: str | Path,
    seed: int = 0,
    dtype: str = "bfloat16",
    tokenizer_dir: str | Path | None = None,
) -> Path:
    """Create `out_dir` with a checkpoint of `preset_name` and return its path: random weights from `seed`, or
    the shipped weights of a trained preset (the seed is then unused)."""
    preset = get_preset(preset_name)
    if preset.trained and tokenizer_dir is not None:
        raise ConfigError(f"preset {preset_name!r} was trained with the built-in tokenizer: its weights read no other "
                          "tokenizer's ids; leave out --tokenizer")
    torch_dtype = parse_dtype(dtype)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise InputError(f"--out {out} exists and is not empty; choose a new directory or remove it")
    tokenizer = load_tokenizer_for_preset(preset_name, tokenizer_dir)
    log.info("initialising %s (%s) with seed %d", preset_name, dtype, seed)
    model = preset_model(preset_name, tokenizer, seed)
    record = {"preset": preset_name, "seed": seed, "dtype": dtype, "tokenizer": str(tokenizer_dir or "builtin")}
    if preset.trained:
        record["trained_weights"] = _load_trained(model, preset.trained)
    model = model.to(torch_dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "inferlab_preset.json").write_text(json.dumps(record) + "\n")
    n_params = sum(p.numel() for p in model.parameters())
    log.info("wrote %s: %.1fM parameters", out, n_params / 1e6)
    return out


def _load_trained(model: torch.nn.Module, name: str) -> dict[str, str]:
    """The shipped weights `name` into `model` (every key, no other); what the checkpoint records of them."""
    from safetensors.torch import load_file

    from inferlab.models.trained import file_sha256, weights_path

    path = weights_path(name)
    model.load_state_dict(load_file(path), strict=True)
    return {"name": name, "sha256": file_sha256(path)}
