"""What the engine needs of a checkpoint folder, checked before anything is loaded or allocated: a
config.json the engine can read (config.py, sizes checked by config_file.py) and safetensors weights,
either `*.safetensors` files or a `model.safetensors.index.json` whose weight map names files of the
folder, each a whole safetensors file (its header read and checked against its size: checkpoint_files.py).
Each problem is one InputError naming the file and the fix. Imports no torch: the CLI runs it
before the conformer pipeline starts its processes."""

from __future__ import annotations

import json
from pathlib import Path

from inferlab.errors import InputError
from inferlab.models.checkpoint_files import read_small_file, safetensors_header
from inferlab.models.config import ModelSpec, read_model_spec

INDEX_FILE = "model.safetensors.index.json"


def check_engine_checkpoint(model_dir: str | Path) -> ModelSpec:
    spec = read_model_spec(model_dir)
    weight_files(Path(model_dir))
    return spec


def weight_files(model_dir: Path) -> dict[str, Path] | list[Path]:
    """The weight map of the index (tensor key -> file), else the folder's *.safetensors files; every file
    checked to be a whole safetensors file."""
    found = _weight_files(model_dir)
    for path in sorted(set(found.values() if isinstance(found, dict) else found)):
        safetensors_header(path)
    return found


def _weight_files(model_dir: Path) -> dict[str, Path] | list[Path]:
    index = model_dir / INDEX_FILE
    if index.exists() or index.is_symlink():
        return _weight_map(index)
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        pickled = [p.name for p in model_dir.glob("*.bin")] + [p.name for p in model_dir.glob("*.pt")]
        found = f" (it has {', '.join(sorted(pickled))}: pickle files, which are never read)" if pickled else ""
        raise InputError(f"{model_dir} has no *.safetensors weights{found}; re-save the model with "
                         "save_pretrained(safe_serialization=True)")
    return files


def _weight_map(index: Path) -> dict[str, Path]:
    damaged = f"{index} is damaged; re-download or re-save the checkpoint"
    try:
        weight_map = json.loads(read_small_file(index)).get("weight_map")
    except (ValueError, RecursionError, AttributeError) as e:
        raise InputError(f"{damaged} ({e})") from None
    if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in weight_map.items()):
        raise InputError(f"{damaged}: its weight_map is not an object of tensor names to file names")
    located = {}
    for key, name in weight_map.items():
        path = index.parent / name
        if Path(name).name != name or not path.is_file():
            raise InputError(f"{damaged}: tensor {key!r} is said to be in {name!r}, which is not a file of the folder")
        located[key] = path
    return located
