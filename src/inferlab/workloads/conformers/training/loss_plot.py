"""The loss curve of a training log as a PNG (matplotlib, headless): the training loss per log row and the
validation loss at each evaluation, against the tokens the loss was taken on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_loss_plot(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4), dpi=110)
    trained = [r for r in rows if r["loss"] is not None]
    axes.plot([r["tokens"] / 1e6 for r in trained], [r["loss"] for r in trained], label="training", linewidth=1)
    evaluated = [r for r in rows if "val_loss" in r]
    axes.plot([r["tokens"] / 1e6 for r in evaluated], [r["val_loss"] for r in evaluated], "o-", label="validation",
              markersize=4)
    stereo = [r for r in evaluated if r.get("val_stereo_loss") is not None]
    if stereo:
        axes.plot([r["tokens"] / 1e6 for r in stereo], [r["val_stereo_loss"] for r in stereo], "s--",
                  label="validation, stereo-deciding tokens", markersize=4)
    axes.set_xlabel("conformer tokens seen (millions)")
    axes.set_ylabel("cross-entropy per token (nats)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    axes.set_title("reference conformer model: loss on the tokens after the prompt")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return Path(path)
