"""The training loop: AdamW, linear warm-up then cosine decay, bf16 autocast on CUDA, gradient clipping,
a validation loss every `eval_every` steps, a log row every `log_every` steps.

The loss is the mean cross-entropy over the tokens after the prompt (batches.py): the conformer text and
EOS are what the model writes at inference, while the prompt is always given, so predicting SMILES would
spend capacity on text the model never writes. The structure tokens stay in the loss (the constraint
forces them, but unconstrained sampling, which the evaluation compares against, needs them right).

Steps decide the result; `budget_s` only stops a run that would overrun (and the result says so): on a
slower machine a run either finishes the same steps or is marked as cut short, never quietly different.
Deterministic from the seed (model init, data order) given deterministic kernels (reference_training.py
turns them on). The loss is read back to the host only at log rows, so the host runs ahead of the GPU.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from inferlab.workloads.conformers.training.batches import (
    IGNORE,
    batch_arrays,
    evaluation_batches,
    training_batches,
)
from inferlab.workloads.conformers.training.token_store import TokenStore

STEPS = 3000  # the recipe's length (see docs/conformers.md "The reference model" for the device time)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = STEPS
    tokens_per_batch: int = 65_536  # padded tokens per step
    peak_lr: float = 2e-3
    final_lr_share: float = 0.1  # the cosine ends at this share of the peak
    warmup_steps: int = 200
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_every: int = 250
    log_every: int = 10
    seed: int = 27
    budget_s: float = 330.0  # wall-clock limit of the loop

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


RECIPE = TrainConfig()


@dataclass
class LoopResult:
    steps: int
    stopped_by_budget: bool
    loss_tokens: int  # tokens the loss was taken on
    padded_tokens: int  # tokens the model processed, pads included
    loop_s: float
    train_loss: float | None  # mean of the last log interval (None before the first step)
    validation_loss: float | None


def learning_rate(step: int, config: TrainConfig) -> float:
    """The rate of step `step` (0-based): linear warm-up to the peak, cosine down to final_lr_share of it."""
    if step < config.warmup_steps:
        return config.peak_lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    share = config.final_lr_share + (1 - config.final_lr_share) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return config.peak_lr * share


def make_optimizer(model: torch.nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW; weight decay on the matrices of the layers only (not on norms, nor on the tied embedding)."""
    decay, keep = [], []
    for name, parameter in model.named_parameters():
        (decay if parameter.ndim == 2 and "embed_tokens" not in name else keep).append(parameter)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": keep, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.peak_lr, betas=config.betas, eps=1e-8,
                             fused=device.type == "cuda")


def token_loss_sum(model: torch.nn.Module, ids: torch.Tensor,
                   labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed cross-entropy, number of loss tokens) of one batch: position t predicts the label at t + 1.

    Written as log-softmax times a one-hot target rather than F.cross_entropy: its NLL kernel has no
    deterministic CUDA implementation (torch raises under use_deterministic_algorithms), and with a vocabulary
    of a few hundred tokens the one-hot costs no more than the logits themselves."""
    logits = model(input_ids=ids).logits[:, :-1]  # [B, L - 1, V]
    targets = labels[:, 1:]  # [B, L - 1]
    valid = targets != IGNORE
    log_p = logits.float().log_softmax(dim=-1)
    picked = (log_p * F.one_hot(targets.clamp(min=0), log_p.shape[-1]).to(log_p.dtype)).sum(dim=-1)  # [B, L - 1]
    return -(picked * valid).sum(), valid.sum()


def _autocast(device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    return tensor.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else tensor


@torch.no_grad()
def validation_loss(model: torch.nn.Module, store: TokenStore, config: TrainConfig, device: torch.device,
                    pad_id: int) -> float:
    model.eval()
    total = torch.zeros((), device=device, dtype=torch.float64)
    count = torch.zeros((), device=device, dtype=torch.int64)
    for rows in evaluation_batches(store, config.tokens_per_batch):
        ids, labels = batch_arrays(store, rows, pad_id)
        with _autocast(device):
            loss, n = token_loss_sum(model, _to_device(ids, device), _to_device(labels, device))
        total += loss.double()
        count += n
    model.train()
    return float(total / count)


def train(model: torch.nn.Module, train_store: TokenStore, validation_store: TokenStore, config: TrainConfig,
          device: torch.device, pad_id: int, on_row: Callable[[dict[str, Any]], None]) -> LoopResult:
    """Train `model` (on `device`, fp32 master weights) for config.steps steps or until the budget ends."""
    optimizer = make_optimizer(model, config, device)
    batches = training_batches(train_store, config.tokens_per_batch, config.seed)
    model.train()
    started = time.perf_counter()
    interval_loss = torch.zeros((), device=device, dtype=torch.float64)
    interval_tokens = torch.zeros((), device=device, dtype=torch.int64)
    loss_tokens = padded_tokens = 0
    train_loss: float | None = None
    val_loss, stopped = None, False
    step = 0
    while step < config.steps:
        if time.perf_counter() - started > config.budget_s:
            stopped = True
            break
        rows = next(batches)
        ids, labels = batch_arrays(train_store, rows, pad_id)
        lr = learning_rate(step, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with _autocast(device):
            loss_sum, n = token_loss_sum(model, _to_device(ids, device), _to_device(labels, device))
        (loss_sum / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        interval_loss += loss_sum.detach().double()
        interval_tokens += n
        padded_tokens += ids.size
        step += 1
        evaluate = step % config.eval_every == 0 or step == config.steps
        if step % config.log_every == 0 or evaluate:
            count = int(interval_tokens)  # the one host read per interval
            loss_tokens += count
            train_loss = float(interval_loss) / count
            interval_loss.zero_()
            interval_tokens.zero_()
            row = {"step": step, "loss": round(train_loss, 5), "lr": lr, "tokens": loss_tokens,
                   "padded_tokens": padded_tokens}
            if evaluate:
                val_loss = validation_loss(model, validation_store, config, device, pad_id)
                row["val_loss"] = round(val_loss, 5)
            row["elapsed_s"] = round(time.perf_counter() - started, 2)
            on_row(row)
    if stopped:  # the cut-short run's last interval and a validation loss of the weights it ends with
        count = int(interval_tokens)
        loss_tokens += count
        train_loss = float(interval_loss) / count if count else train_loss
        val_loss = validation_loss(model, validation_store, config, device, pad_id)
        on_row({"step": step, "loss": None if train_loss is None else round(train_loss, 5),
                "lr": learning_rate(max(0, step - 1), config),
                "tokens": loss_tokens, "padded_tokens": padded_tokens, "val_loss": round(val_loss, 5),
                "elapsed_s": round(time.perf_counter() - started, 2), "stopped_by_budget": True})
    return LoopResult(step, stopped, loss_tokens, padded_tokens, time.perf_counter() - started, train_loss, val_loss)
