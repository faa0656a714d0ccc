"""The training loop: AdamW, linear warm-up then cosine decay, bf16 autocast on CUDA, gradient clipping,
a validation loss every `eval_every` steps, a log row every `log_every` steps.

The loss is the cross-entropy over the tokens after the prompt (batches.py): the conformer text and EOS are
what the model writes at inference, while the prompt is always given, so predicting SMILES would spend
capacity on text the model never writes. The structure tokens stay in the loss (the constraint forces them,
but unconstrained sampling, which the evaluation compares against, needs them right). The stereo-deciding
tokens (stereo_tokens.py) weigh `stereo_weight` times the others in the objective; the logged losses are
the plain mean (comparable across weights) and the mean over the stereo-deciding tokens alone.

The hand loss (`hand_weight` > 0, a trial lever): each step also scores a batch of hand pairs (hand_pairs.py:
a tetrahedral text and its reflection under the same prompt), the margin being log p(right) - log p(reflected)
over each text's generation tokens, and adds softplus(-margin) per pair to the summed loss as `hand_weight`
tokens' worth (a logistic ranking loss: the pair's only difference is the hand). Logged: the interval's
hand loss and the share of pairs ranked right, and the validation pairs' share at each evaluation.

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
    pair_batch_arrays,
    pair_evaluation_batches,
    pair_training_batches,
    training_batches,
)
from inferlab.workloads.conformers.training.compiled_loss import compiled, use_causal_attention
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
    stereo_weight: float = 1.0  # the objective's weight of a stereo-deciding token (the others weigh 1)
    hand_weight: float = 0.0  # a hand pair's ranking loss counts as this many tokens' loss (0: no pairs scored)
    hand_tokens_per_batch: int = 16_384  # padded tokens of a step's hand pairs, both sides
    compile: bool = False  # the step's forward and loss under torch.compile (compiled_loss.py; a trial lever)
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
    validation_stereo_loss: float | None  # the mean over the stereo-deciding tokens (None: the data marks none)
    validation_hand_accuracy: float | None = None  # share of validation hand pairs ranked right (None: no pairs)


@dataclass(frozen=True)
class HandPairs:
    """The hand pair stores (token_store.hand_pair_store) of the training and validation splits."""

    train: TokenStore
    validation: TokenStore


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


@dataclass
class LossSums:
    """One batch's summed cross-entropy and token count, over all loss tokens and over the stereo-deciding ones."""

    total: torch.Tensor
    tokens: torch.Tensor
    stereo_total: torch.Tensor
    stereo_tokens: torch.Tensor

    def objective(self, stereo_weight: float, hand_nats: torch.Tensor | float = 0.0) -> torch.Tensor:
        """The weighted mean the optimiser descends (the plain mean at weight 1); `hand_nats`, the weighted
        hand loss, joins the summed loss."""
        extra = stereo_weight - 1.0
        return (self.total + extra * self.stereo_total + hand_nats) / (self.tokens + extra * self.stereo_tokens)


def token_loss_sums(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor,
                    stereo: torch.Tensor | None = None) -> LossSums:
    """The loss sums of one batch: position t predicts the label at t + 1; `stereo` ([B, L] bool, aligned with
    labels) marks the stereo-deciding labels (none when omitted)."""
    return LossSums(*loss_tensors(model, ids, labels, stereo))


def loss_tensors(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor,
                 stereo: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """token_loss_sums' four sums as a tuple (what torch.compile traces: compiled_loss.py).

    Written as log-softmax times a one-hot target rather than F.cross_entropy: its NLL kernel has no
    deterministic CUDA implementation (torch raises under use_deterministic_algorithms), and with a vocabulary
    of a few hundred tokens the one-hot costs no more than the logits themselves."""
    logits = model(input_ids=ids).logits[:, :-1]  # [B, L - 1, V]
    targets = labels[:, 1:]  # [B, L - 1]
    valid = targets != IGNORE
    log_p = logits.float().log_softmax(dim=-1)
    picked = (log_p * F.one_hot(targets.clamp(min=0), log_p.shape[-1]).to(log_p.dtype)).sum(dim=-1)  # [B, L - 1]
    nll = -(picked * valid)
    marked = torch.zeros_like(valid) if stereo is None else valid & stereo[:, 1:]
    return nll.sum(), valid.sum(), (nll * marked).sum(), marked.sum()


def pair_margins(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[P] log p(right-hand text) - log p(its reflection), each summed over the text's labelled tokens, for a
    pair batch of 2P rows (batches.pair_batch_arrays: the P right-hand texts first)."""
    logits = model(input_ids=ids).logits[:, :-1]  # [2P, L - 1, V]
    targets = labels[:, 1:]
    log_p = logits.float().log_softmax(dim=-1)
    picked = (log_p * F.one_hot(targets.clamp(min=0), log_p.shape[-1]).to(log_p.dtype)).sum(dim=-1)
    scores = (picked * (targets != IGNORE)).sum(dim=-1)  # [2P]
    half = scores.shape[0] // 2
    return scores[:half] - scores[half:]


def _autocast(device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    return tensor.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else tensor


def _batch(store: TokenStore, rows: np.ndarray, pad_id: int, device: torch.device) -> list[torch.Tensor]:
    return [_to_device(array, device) for array in batch_arrays(store, rows, pad_id)]


def _pair_batch(pairs: TokenStore, store: TokenStore, indices: np.ndarray, pad_id: int,
                device: torch.device) -> list[torch.Tensor]:
    return [_to_device(array, device) for array in pair_batch_arrays(pairs, store, indices, pad_id)]


class _Accumulated:
    """Loss sums added on the device over batches; read back to the host only by `read`: the token loss's
    four sums, then the hand pairs' summed loss, pairs ranked right and pairs."""

    def __init__(self, device: torch.device):
        self.sums = [torch.zeros((), device=device, dtype=torch.float64) for _ in range(7)]

    def add(self, batch: LossSums) -> None:
        for held, value in zip(self.sums, (batch.total, batch.tokens, batch.stereo_total, batch.stereo_tokens)):
            held += value.detach().double()

    def add_margins(self, margins: torch.Tensor) -> None:
        margins = margins.detach().double()
        for held, value in zip(self.sums[4:], (F.softplus(-margins).sum(), (margins > 0).sum(), margins.numel())):
            held += value

    def read(self) -> tuple[int, float | None, float | None, float | None, float | None]:
        """(loss tokens, mean loss, mean loss of the stereo-deciding tokens, mean hand loss, share of pairs ranked
        right); a mean is None without tokens or pairs."""
        total, tokens, stereo_total, stereo_tokens, hand, right, pairs = torch.stack(self.sums).tolist()  # one read
        return (int(tokens), total / tokens if tokens else None, stereo_total / stereo_tokens if stereo_tokens else None,
                hand / pairs if pairs else None, right / pairs if pairs else None)

    def zero(self) -> None:
        for held in self.sums:
            held.zero_()


@torch.no_grad()
def validation_loss(model: torch.nn.Module, store: TokenStore, config: TrainConfig, device: torch.device,
                    pad_id: int, pairs: TokenStore | None = None) -> tuple[float, float | None, float | None]:
    """(mean loss, mean loss of the stereo-deciding tokens, share of `pairs` (the split's hand pairs) ranked
    right); None where the store marks none or no pairs are given."""
    model.eval()
    sums = _Accumulated(device)
    for rows in evaluation_batches(store, config.tokens_per_batch):
        with _autocast(device):
            sums.add(token_loss_sums(model, *_batch(store, rows, pad_id, device)))
    for indices in [] if pairs is None else pair_evaluation_batches(pairs, store, config.tokens_per_batch):
        with _autocast(device):
            sums.add_margins(pair_margins(model, *_pair_batch(pairs, store, indices, pad_id, device)))
    model.train()
    _, mean, stereo_mean, _, hand_accuracy = sums.read()
    return mean, stereo_mean, hand_accuracy


def train(model: torch.nn.Module, train_store: TokenStore, validation_store: TokenStore, config: TrainConfig,
          device: torch.device, pad_id: int, on_row: Callable[[dict[str, Any]], None],
          hand: HandPairs | None = None) -> LoopResult:
    """Train `model` (on `device`, fp32 master weights) for config.steps steps or until the budget ends; `hand`
    (required when config.hand_weight > 0) gives the hand pairs."""
    if config.hand_weight > 0 and (hand is None or not len(hand.train)):
        raise ValueError("hand_weight > 0 needs hand pairs (the data's hand pair stores, none empty)")
    optimizer = make_optimizer(model, config, device)
    batches = training_batches(train_store, config.tokens_per_batch, config.seed)
    pair_batches = (pair_training_batches(hand.train, train_store, config.hand_tokens_per_batch, config.seed)
                    if config.hand_weight > 0 else None)
    validation_pairs = hand.validation if pair_batches is not None and len(hand.validation) else None
    step_loss = loss_tensors
    if config.compile:
        use_causal_attention(model)
        step_loss = compiled(loss_tensors)
    model.train()
    started = time.perf_counter()
    interval = _Accumulated(device)
    loss_tokens = padded_tokens = 0
    train_loss: float | None = None
    val_loss = val_stereo = val_hand = None
    stopped, step = False, 0

    def log_row(lr: float, evaluate: bool, **extra: Any) -> None:
        nonlocal loss_tokens, train_loss, val_loss, val_stereo, val_hand
        count, mean, stereo_mean, hand_loss, hand_accuracy = interval.read()
        loss_tokens += count
        row: dict[str, Any] = {"step": step, "loss": train_loss, "lr": lr}
        if count:
            train_loss = mean
            row.update(loss=round(mean, 5), stereo_loss=_rounded(stereo_mean))
        if hand_loss is not None:
            row.update(hand_loss=_rounded(hand_loss), hand_accuracy=_rounded(hand_accuracy))
        interval.zero()
        row.update(tokens=loss_tokens, padded_tokens=padded_tokens)
        if evaluate:
            val_loss, val_stereo, val_hand = validation_loss(model, validation_store, config, device, pad_id,
                                                             validation_pairs)
            row.update(val_loss=round(val_loss, 5), val_stereo_loss=_rounded(val_stereo))
            if val_hand is not None:
                row.update(val_hand_accuracy=_rounded(val_hand))
        on_row({**row, "elapsed_s": round(time.perf_counter() - started, 2), **extra})

    while step < config.steps:
        if time.perf_counter() - started > config.budget_s:
            stopped = True
            break
        rows = next(batches)
        lr = learning_rate(step, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = _batch(train_store, rows, pad_id, device)
        with _autocast(device):
            sums = LossSums(*step_loss(model, *batch))
            hand_nats = 0.0
            if pair_batches is not None:
                pairs = _pair_batch(hand.train, train_store, next(pair_batches), pad_id, device)
                margins = pair_margins(model, *pairs)
                interval.add_margins(margins)
                hand_nats = config.hand_weight * F.softplus(-margins).sum()
                padded_tokens += pairs[0].numel()
        sums.objective(config.stereo_weight, hand_nats).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        interval.add(sums)
        padded_tokens += batch[0].numel()
        step += 1
        evaluate = step % config.eval_every == 0 or step == config.steps
        if step % config.log_every == 0 or evaluate:
            log_row(lr, evaluate)
    if stopped:  # the cut-short run's last interval and a validation loss of the weights it ends with
        log_row(learning_rate(max(0, step - 1), config), True, stopped_by_budget=True)
    return LoopResult(step, stopped, loss_tokens, padded_tokens, time.perf_counter() - started, train_loss, val_loss,
                      val_stereo, val_hand)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 5)
