"""`train`: the data folder of build-data -> a checkpoint folder the engine and transformers load.

The folder: config.json, model.safetensors (bf16), generation_config.json, the reduced tokenizer and its
id map, the split file and data manifest, training_log.jsonl, loss_curve.png, training.json (the run's
figures) and README.md (the model card). Needs torch and transformers, never RDKit (the device has none).

Deterministic: CUBLAS_WORKSPACE_CONFIG set before CUDA starts, torch.use_deterministic_algorithms(True) (an
op without a deterministic kernel raises instead of running: the loss avoids NLLLoss for that reason),
the model initialised and the data ordered from the seed, no torch.compile in the recipe (`--compile` is a
trial lever, compiled_loss.py, whose compile time comes out of the budget), and attention through one
SDPA backend chosen up front among those with a deterministic backward (FlashAttention, then
memory-efficient, then math; never cuDNN's, whose backward is not deterministic): the first that runs
the model's shape is used for the whole run and named in training.json.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import platform
import shutil
import time
from dataclasses import asdict, dataclass, replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import GenerationConfig, Qwen3ForCausalLM

from inferlab.errors import InputError
from inferlab.models.tokenizer_loading import load_tokenizer
from inferlab.outputs.atomic import write_json_atomic, write_text_atomic
from inferlab.workloads.conformers.training.data_layout import (
    HELD_OUT_FILE,
    MANIFEST,
    SPLIT_FILE,
    TOKENIZER_DIR,
    TRAIN_HAND_PAIRS,
    TRAIN_TOKENS,
    VALIDATION_HAND_PAIRS,
    VALIDATION_TOKENS,
)
from inferlab.workloads.conformers.training.loss_plot import write_loss_plot
from inferlab.workloads.conformers.training.model_card import model_card
from inferlab.workloads.conformers.training.model_shape import REFERENCE_SHAPE, ModelShape, model_config
from inferlab.workloads.conformers.training.token_store import TokenStore, read_token_store
from inferlab.workloads.conformers.training.train_loop import RECIPE, HandPairs, TrainConfig, train

log = logging.getLogger(__name__)

DATA_FILES = (SPLIT_FILE, HELD_OUT_FILE, MANIFEST)  # copied into the checkpoint
TRAINING_LOG, LOSS_PLOT = "training_log.jsonl", "loss_curve.png"
TRAINING_SUMMARY, MODEL_CARD = "training.json", "README.md"
_SDPA_ORDER = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


def train_reference(data_dir: str | Path, out_dir: str | Path, config: TrainConfig = RECIPE,
                    shape: ModelShape = REFERENCE_SHAPE, device: str = "auto") -> dict[str, Any]:
    """Train the reference model on `data_dir` into the new folder `out_dir`; returns training.json's content."""
    started = time.perf_counter()
    data, out = Path(data_dir), Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise InputError(f"--out {out} exists and is not empty; choose a new folder or remove it")
    run = _prepare(data, shape, device)
    hand = _hand_pairs(data) if config.hand_weight > 0 else None
    tokenizer, target = run.tokenizer, run.device
    model, model_cfg = _new_model(shape, tokenizer, config.seed, target)
    parameters = sum(p.numel() for p in model.parameters())
    log.info("training %.2fM parameters on %s (%s attention): %d steps of %d tokens, %d train sequences",
             parameters / 1e6, target, run.attention, config.steps, config.tokens_per_batch, len(run.train_store))

    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with open(out / TRAINING_LOG, "w") as log_file, _sdpa_backend(run.attention):
        def on_row(row: dict[str, Any]) -> None:
            rows.append(row)
            log_file.write(json.dumps(row) + "\n")
            log_file.flush()
            validation = f", validation {row['val_loss']} (stereo {row['val_stereo_loss']})" if "val_loss" in row else ""
            log.info("step %d: loss %s (stereo %s)%s, %.0f s", row["step"], row["loss"], row.get("stereo_loss"),
                     validation, row["elapsed_s"])

        result = train(model, run.train_store, run.validation_store, config, target, tokenizer.eos_token_id, on_row,
                       hand)
    if result.stopped_by_budget:
        log.warning("the wall-clock budget of %.0f s ended the run at step %d of %d: this checkpoint is not the "
                    "recipe's", config.budget_s, result.steps, config.steps)

    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id,
                     max_length=shape.max_positions).save_pretrained(out)
    for path in sorted((data / TOKENIZER_DIR).iterdir()):
        shutil.copy2(path, out / path.name)
    for name in DATA_FILES:
        shutil.copy2(data / name, out / name)
    summary = {
        "recipe": config.to_json(), "shape": asdict(shape), "parameters": parameters,
        "vocabulary": {"tokens": len(tokenizer), "padded": model_cfg.vocab_size},
        "steps": result.steps, "stopped_by_budget": result.stopped_by_budget,
        "loss_tokens": result.loss_tokens, "padded_tokens": result.padded_tokens,
        "train_loss": result.train_loss, "validation_loss": result.validation_loss,
        "validation_stereo_loss": result.validation_stereo_loss,
        **({} if hand is None else {"hand_pairs": {"train": len(hand.train), "validation": len(hand.validation)},
                                    "validation_hand_accuracy": result.validation_hand_accuracy}),
        "loop_s": round(result.loop_s, 1), "command_s": round(time.perf_counter() - started, 1),
        "tokens_per_s": round(result.padded_tokens / result.loop_s) if result.loop_s else None,
        "device": torch.cuda.get_device_name(target) if target.type == "cuda" else platform.processor() or "cpu",
        "precision": "bf16 autocast, fp32 master weights" if target.type == "cuda" else "fp32",
        "attention": run.attention, "deterministic_algorithms": True,
        "versions": {"torch": torch.__version__, "transformers": version("transformers"),
                     "python": platform.python_version()},
        "safetensors_bytes": (out / "model.safetensors").stat().st_size,
    }
    write_json_atomic(out / TRAINING_SUMMARY, summary)
    write_loss_plot(rows, out / LOSS_PLOT)
    write_text_atomic(out / MODEL_CARD, model_card(summary, json.loads((data / MANIFEST).read_text())))
    log.info("checkpoint in %s: %d steps, validation loss %.4f, %.0f s", out, result.steps,
             result.validation_loss or float("nan"), summary["command_s"])
    return summary


@dataclass(frozen=True)
class _Run:
    tokenizer: Any
    train_store: TokenStore
    validation_store: TokenStore
    device: torch.device
    attention: str  # the SDPA backend


def _prepare(data: Path, shape: ModelShape, device: str) -> _Run:
    """The data read and checked, deterministic algorithms on, the device and the attention backend chosen."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts: deterministic cuBLAS
    for name in (TOKENIZER_DIR, TRAIN_TOKENS, VALIDATION_TOKENS, *DATA_FILES):
        if not (data / name).exists():
            raise InputError(f"{data / name} is missing; build the data with `python -m "
                             "inferlab.workloads.conformers.training build-data --out DIR`")
    if "stereo_variants" not in json.loads((data / MANIFEST).read_text())["recipe"]:
        raise InputError(f"{data} was built by the recipe before the stereo variants (its data_manifest.json names "
                         "none); build the data again with `python -m inferlab.workloads.conformers.training "
                         "build-data --out NEW_DIR`")
    tokenizer = load_tokenizer(data / TOKENIZER_DIR)
    train_store, validation_store = read_token_store(data / TRAIN_TOKENS), read_token_store(data / VALIDATION_TOKENS)
    if not len(train_store) or not len(validation_store):
        raise InputError(f"{data} has {len(train_store)} training and {len(validation_store)} validation sequences; "
                         "training needs both: rebuild the data with more molecules")
    longest = int(max(train_store.lengths.max(), validation_store.lengths.max()))
    if longest > shape.max_positions:
        raise InputError(f"the data's longest sequence has {longest} tokens, over the model's {shape.max_positions} "
                         "positions; lower the molecule size cap or raise max_positions")
    target = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    torch.use_deterministic_algorithms(True)
    # no NaN fill of every new tensor (that mode's default, a write per op output): no kernel of the loop reads
    # memory it did not write, so the fill would only cost bandwidth
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = False
    return _Run(tokenizer, train_store, validation_store, target, _attention_backend(shape, target))


def _hand_pairs(data: Path) -> HandPairs:
    """The data's hand pair stores (hand_pairs.py), which the hand loss needs."""
    for name in (TRAIN_HAND_PAIRS, VALIDATION_HAND_PAIRS):
        if not (data / name).exists():
            raise InputError(f"{data / name} is missing: the hand loss needs the data's hand pairs, which build-data "
                             "writes since they exist; build the data again (a rerun remakes only the token stores)")
    hand = HandPairs(read_token_store(data / TRAIN_HAND_PAIRS), read_token_store(data / VALIDATION_HAND_PAIRS))
    if not len(hand.train):
        raise InputError(f"{data} has no hand pairs (no training molecule with a tetrahedral centre); train without "
                         "--hand-weight, or build the data with more molecules")
    return hand


def _new_model(shape: ModelShape, tokenizer, seed: int, device):
    """The initial model (fp32 master weights; bf16 autocast on CUDA) and its config, from the seed."""
    torch.manual_seed(seed)
    config = model_config(shape, len(tokenizer), tokenizer.eos_token_id)
    return Qwen3ForCausalLM(config).to(device), config


def probe_reference(data_dir: str | Path, steps: int = 40, shape: ModelShape = REFERENCE_SHAPE,
                    device: str = "auto", compile: bool = False) -> dict[str, Any]:
    """What a device gives the recipe before it is run: whether two runs of 3 steps from the seed end with
    bitwise equal weights, the training speed over `steps` steps (at least 30; the first 10 and the last,
    which ends with a validation pass, not timed) and the time the recipe's steps would take at that speed;
    `compile`: all of it with the step under torch.compile (compiled_loss.py). Writes nothing."""
    run = _prepare(Path(data_dir), shape, device)
    base = replace(RECIPE, compile=compile)
    short = replace(base, steps=3, eval_every=10**9, log_every=1, budget_s=math.inf)
    weights = []
    for _ in range(2):
        model, _ = _new_model(shape, run.tokenizer, base.seed, run.device)
        with _sdpa_backend(run.attention):
            train(model, run.train_store, run.validation_store, short, run.device, run.tokenizer.eos_token_id,
                  lambda row: None)
        weights.append([p.detach().cpu() for p in model.parameters()])
    deterministic = all(torch.equal(a, b) for a, b in zip(*weights))
    rows: list[dict[str, Any]] = []
    model, _ = _new_model(shape, run.tokenizer, base.seed, run.device)
    timed = replace(base, steps=max(steps, 30), eval_every=10**9, log_every=10, budget_s=math.inf)
    with _sdpa_backend(run.attention):
        train(model, run.train_store, run.validation_store, timed, run.device, run.tokenizer.eos_token_id, rows.append)
    first, last = rows[0], rows[-2]
    tokens_per_s = (last["padded_tokens"] - first["padded_tokens"]) / (last["elapsed_s"] - first["elapsed_s"])
    return {"device": str(run.device), "attention": run.attention, "compile": compile, "deterministic": deterministic,
            "padded_tokens_per_s": round(tokens_per_s), "step_s": round(base.tokens_per_batch / tokens_per_s, 4),
            "recipe_steps": base.steps,
            "recipe_train_s_estimate": round(base.steps * base.tokens_per_batch / tokens_per_s)}


def _attention_backend(shape: ModelShape, device) -> str:
    """The first SDPA backend of _SDPA_ORDER that runs a forward and backward of the model's attention
    (causal, grouped-query, bf16) with deterministic algorithms on; "default" on the CPU."""
    if device.type != "cuda":
        return "default"
    q = torch.randn(2, shape.heads, 128, shape.head_dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    kv = torch.randn(2, shape.kv_heads, 128, shape.head_dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    failures = []
    for name in _SDPA_ORDER:
        try:
            with sdpa_kernel(getattr(SDPBackend, name)):
                F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True).sum().backward()
            return name
        except RuntimeError as e:
            failures.append(f"{name}: {str(e).splitlines()[0]}")
    raise InputError("no SDPA backend runs the model's attention deterministically: " + "; ".join(failures))


def _sdpa_backend(name: str):
    if name == "default":
        return contextlib.nullcontext()
    return sdpa_kernel(getattr(SDPBackend, name))
