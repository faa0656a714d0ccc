"""The recipe that trains the shipped classifier: the `qwen2-cls-aromatic` preset (transformers'
Qwen2ForSequenceClassification, our built-in tokenizer) from its seed-0 random weights on the training split of
aromatic_rings.py, on one CPU thread in a few minutes; the weights are stored in bf16, and the accuracy it
reports is the stored bf16 model's on the held-out split.

    python -m inferlab.models.trained.recipe                # writes the shipped qwen2-cls-aromatic.safetensors
    python -m inferlab.models.trained.recipe --out w.safetensors --steps 40

Deterministic: one thread, a seeded init and a seeded order of rows, deterministic algorithms; the same
machine gives the same bytes. Another CPU's kernels may round differently, so elsewhere it gives an equally
accurate classifier, not the same file (the shipped file's digest is in its metadata and in every checkpoint
built from it: inferlab_preset.json).

The optimiser: AdamW, the learning rate warmed up linearly over the first tenth of the steps then decayed
linearly to zero, gradients clipped to norm 1, batches of rows padded on the right (the classifier reads each
row's last non-pad token).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch

from inferlab.models.trained.aromatic_rings import LabelledText, aromatic_ring_set

PRESET = "qwen2-cls-aromatic"


@dataclass(frozen=True)
class Recipe:
    steps: int = 400  # ~3 passes over the 3,994 training rows
    batch_size: int = 32
    learning_rate: float = 2e-3
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0  # the random init (the preset's seed-0 checkpoint) and the order of rows


@contextmanager
def _one_deterministic_thread() -> Iterator[None]:
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)  # also what keeps the sums in one order
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def _batch(tokenizer, rows: Sequence[LabelledText]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask [rows, longest], right-padded; labels [rows]."""
    ids = [tokenizer(r.text)["input_ids"] for r in rows]
    width = max(map(len, ids))
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for k, t in enumerate(ids):
        input_ids[k, : len(t)] = torch.tensor(t)
        mask[k, : len(t)] = 1
    return input_ids, mask, torch.tensor([r.label for r in rows])


def _row_order(count: int, steps: int, batch_size: int, seed: int) -> list[list[int]]:
    """`steps` batches of row indices: passes over the rows, each in a fresh seeded order."""
    rng, order = random.Random(seed), []
    while len(order) < steps * batch_size:
        one_pass = list(range(count))
        rng.shuffle(one_pass)
        order += one_pass
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(steps)]


def train(recipe: Recipe = Recipe()) -> tuple[torch.nn.Module, object]:
    """(the trained model, in float32 holding bf16-representable weights; its tokenizer)."""
    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
    from inferlab.models.checkpoint_init import preset_model

    tokenizer = build_builtin_tokenizer()
    rows = aromatic_ring_set().train
    with _one_deterministic_thread():
        model = preset_model(PRESET, tokenizer, recipe.seed)
        model.train()
        optimiser = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
        warmup = max(1, int(recipe.steps * recipe.warmup_fraction))

        def rate(step: int) -> float:  # a multiple of learning_rate: up over the warm-up, then down to zero
            return (step + 1) / warmup if step < warmup else (recipe.steps - step) / (recipe.steps - warmup)

        schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, rate)
        for batch in _row_order(len(rows), recipe.steps, recipe.batch_size, recipe.seed):
            input_ids, mask, labels = _batch(tokenizer, [rows[i] for i in batch])
            logits = model(input_ids=input_ids, attention_mask=mask).logits  # [rows, labels]
            loss = torch.nn.functional.cross_entropy(logits, labels)
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
        model.eval()
        with torch.no_grad():  # what is shipped is bf16: the reported accuracy is the rounded model's
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    return model, tokenizer


def accuracy(model: torch.nn.Module, tokenizer, rows: Sequence[LabelledText], batch_size: int = 64) -> float:
    """The share of `rows` whose argmax label is the row's label."""
    right = 0
    with _one_deterministic_thread(), torch.inference_mode():
        for i in range(0, len(rows), batch_size):
            input_ids, mask, labels = _batch(tokenizer, rows[i:i + batch_size])
            right += int((model(input_ids=input_ids, attention_mask=mask).logits.argmax(-1) == labels).sum())
    return right / len(rows)


def state_bytes(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights as shipped: bf16, contiguous."""
    return {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}


def save_weights(weights: dict[str, torch.Tensor], path: Path, recipe: Recipe, held_out: float, rows: int) -> None:
    """The weights file, byte for byte the same for the same weights: its metadata is one key (safetensors writes
    a metadata map in no fixed order), a JSON of sorted keys."""
    from safetensors.torch import save_file

    facts = {"preset": PRESET, "recipe": dataclasses.asdict(recipe), "held_out_accuracy": round(held_out, 4),
             "held_out_rows": rows}
    save_file(weights, str(path), metadata={"inferlab": json.dumps(facts, sort_keys=True)})


def main(argv: list[str] | None = None) -> None:
    from inferlab.models.trained import file_sha256

    default_out = Path(__file__).with_name(f"{PRESET}.safetensors")
    parser = argparse.ArgumentParser(description="Train the shipped aromatic-ring classifier (CPU, one thread).")
    parser.add_argument("--out", type=Path, default=default_out, help=f"weights file (default: {default_out})")
    parser.add_argument("--steps", type=int, default=Recipe.steps)
    args = parser.parse_args(argv)
    recipe = Recipe(steps=args.steps)
    start = time.perf_counter()
    model, tokenizer = train(recipe)
    train_s = time.perf_counter() - start
    held_out = accuracy(model, tokenizer, aromatic_ring_set().test)
    save_weights(state_bytes(model), args.out, recipe, held_out, len(aromatic_ring_set().test))
    print(f"{args.out}: held-out accuracy {held_out:.4f} of {len(aromatic_ring_set().test)} rows, trained in "
          f"{train_s:.0f} s, sha256 {file_sha256(args.out)}")


if __name__ == "__main__":
    main()
