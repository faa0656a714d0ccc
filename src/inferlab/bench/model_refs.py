"""What a cell's `model` names: a preset (built once per run into the run's cache) or a checkpoint
directory. Checked at plan time so a typo is refused before anything runs; built by the launcher.

Owns the preset cache layout; does not load models (backends do).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from inferlab.child_processes import child_environment
from inferlab.errors import ConfigError
from inferlab.models.config_file import read_config

log = logging.getLogger(__name__)

PRESET_SEED = 0
PRESET_DTYPE = "bfloat16"  # stored dtype; each cell casts to its own `dtype` knob at load
# A cell's tokenizer knob when its preset wants the qwen3-chem tokenizer and this machine has none: the plan
# still builds (the other cells run) and the cell becomes an `unavailable` row saying where to put it.
MISSING_QWEN3_CHEM = "qwen3-chem (not found)"


def preset_names() -> list[str]:
    from inferlab.models.presets import PRESETS

    return list(PRESETS)


def is_preset(model: str) -> bool:
    return model in preset_names()


def check_model(model: str | None, where: str) -> None:
    """Refuse a model that is neither a preset nor a directory holding config.json."""
    if not model:
        raise ConfigError(f"{where}: no model given; set model to a preset ({', '.join(preset_names())}) or a checkpoint folder")
    if is_preset(model):
        return
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"{where}: model {model!r} is neither a preset ({', '.join(preset_names())}) nor a checkpoint "
            f"directory (no config.json in {path.resolve()}); pass a preset name or a folder written by "
            "`inferlab model init`"
        )


def model_config(model: str) -> dict[str, Any]:
    """The HF config of a preset or directory as a plain dict (for plan-time checks such as max positions)."""
    if is_preset(model):
        from inferlab.models.presets import get_preset

        return get_preset(model).make_config().to_dict()
    return read_config(Path(model).expanduser())


def model_task(model: str) -> str:
    """causal-lm or sequence-classification."""
    if is_preset(model):
        from inferlab.models.presets import get_preset

        return get_preset(model).task
    archs = model_config(model).get("architectures") or []
    return "sequence-classification" if any(a.endswith("ForSequenceClassification") for a in archs) else "causal-lm"


def check_text_model(model: str, tokenizer_knob: str, scenario: str, causal_lm: bool = True) -> None:
    """A generating scenario's model: a `tokenizer` knob only for a preset built here (a checkpoint folder has
    its own), and (causal_lm) a causal LM, not a classifier."""
    if tokenizer_knob and not is_preset(model):
        raise ConfigError(f"tokenizer={tokenizer_knob} only applies when model is a preset to build; {model} is a "
                          "checkpoint folder with its own tokenizer; remove the knob")
    if causal_lm and model_task(model) != "causal-lm":
        raise ConfigError(f"model {model} is not a causal LM; the {scenario} scenario needs one")


def default_tokenizer_for(model: str) -> str:
    """The tokenizer folder a preset wants ('' = the built-in one; MISSING_QWEN3_CHEM when it is not here)."""
    if not is_preset(model):
        return ""
    from inferlab.models.presets import get_preset

    if get_preset(model).tokenizer != "qwen3-chem":
        return ""
    from inferlab.errors import InputError
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    try:
        return str(qwen3_chem_tokenizer_dir())
    except InputError:
        return MISSING_QWEN3_CHEM


def missing_tokenizer(cell) -> str | None:
    """Why `cell` cannot run: its preset's qwen3-chem tokenizer is not on this machine (else None)."""
    if cell.config.get("tokenizer") != MISSING_QWEN3_CHEM:
        return None
    from inferlab.errors import InputError
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    try:
        qwen3_chem_tokenizer_dir()
    except InputError as e:
        return f"preset {cell.model!r} needs the qwen3-chem tokenizer: {e}; or set the knob tokenizer=DIR"
    return "the qwen3-chem tokenizer appeared after the plan was built; run the command again"


def preset_cache_dir(cache_root: Path, preset: str, tokenizer: str) -> Path:
    """The preset's folder in the cache: named by its seed and tokenizer, and a trained preset's by its weights,
    so retrained weights never meet a checkpoint built from older ones."""
    from inferlab.models.presets import get_preset

    tag = "builtin" if not tokenizer else "tok-" + hashlib.sha1(str(Path(tokenizer).resolve()).encode()).hexdigest()[:8]
    trained = get_preset(preset).trained
    if trained:
        from inferlab.models.trained import file_sha256, weights_path

        tag += "-weights-" + file_sha256(weights_path(trained))[:12]
    return cache_root / "models" / f"{preset}-seed{PRESET_SEED}-{tag}"


def build_presets(cache_root: Path, wanted: list[tuple[str, str]], timeout_s: float = 1800.0) -> dict[tuple[str, str], Path | str]:
    """Build the random checkpoints of the (preset, tokenizer) pairs that are not built yet, all in one
    subprocess (one interpreter start and one torch import for all of them), each into a temp folder
    renamed when complete, so a killed build never leaves a half checkpoint that looks finished.
    Returns each pair's folder, or the reason it could not be built."""
    result: dict[tuple[str, str], Path | str] = {}
    todo: list[tuple[str, str, Path, Path]] = []
    for preset, tokenizer in dict.fromkeys(wanted):
        final = preset_cache_dir(cache_root, preset, tokenizer)
        if (final / "inferlab_preset.json").is_file():
            result[(preset, tokenizer)] = final
            continue
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        todo.append((preset, tokenizer, partial, final))
    if not todo:
        return result
    jobs = [{"preset": p, "tokenizer": t or None, "out": str(partial)} for p, t, partial, _ in todo]
    child = ("import json, sys; from inferlab.child_processes import die_with_parent_from_environment\n"
             "die_with_parent_from_environment()\n"
             "from inferlab.models.checkpoint_init import init_checkpoint\n"
             "for job in json.loads(sys.argv[1]):\n"
             f"    init_checkpoint(job['preset'], job['out'], seed={PRESET_SEED}, dtype={PRESET_DTYPE!r}, "
             "tokenizer_dir=job['tokenizer'])")
    log.info("building presets %s into %s", ", ".join(p for p, *_ in todo), cache_root / "models")
    failure = ""
    try:
        proc = subprocess.run([sys.executable, "-c", child, json.dumps(jobs)], capture_output=True, text=True,
                              timeout=timeout_s, env=child_environment())  # it ends with this process
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
            failure = f"(exit {proc.returncode}): {tail}"
    except subprocess.TimeoutExpired:
        failure = f"(no result after {timeout_s:.0f} s)"
    for preset, tokenizer, partial, final in todo:
        if (partial / "inferlab_preset.json").is_file():
            partial.rename(final)
            result[(preset, tokenizer)] = final
        else:
            result[(preset, tokenizer)] = f"building preset {preset!r} failed {failure or '(no checkpoint written)'}"
    return result
