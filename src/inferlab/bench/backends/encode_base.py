"""What a backend of the `classify` and `hidden-states` scenarios receives and does (child side). The scenario
owns the texts, timing, FLOP counting, the figures and the check against transformers (scenarios/encode_run.py);
a backend loads the model, cuts the sample into its own batches and runs one batch.

Every backend batches its own way, and each batch is timed from its start to its results on the host, which
is every request's latency in it: transformers (`hf`) pads batches of batch_size rows, the engine
(`inferlab`) packs rows without padding up to a token budget, vLLM (`vllm`) schedules one `LLM.classify` /
`LLM.embed` call of requests_per_call requests (the whole sample by default) itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

TASKS = ("classify", "hidden-states")


@dataclass(frozen=True)
class EncodeSpec:
    """What every backend of one comparison computes."""

    task: str  # "classify" (logits) or "hidden-states" (pooled states of `layers`)
    layers: tuple[int, ...] = ()  # hidden-states: transformers' numbers, resolved (0 = embeddings, L = final)
    pool: str = "last"  # hidden-states: "last" or "mean" per row


class EncodeBackend(Protocol):
    pads: bool  # whether a batch is padded to its longest row (transformers) or not (packed: the engine, vLLM)

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None: ...

    def batches(self, token_ids: list[list[int]]) -> list[list[int]]:
        """The sample cut into this backend's batches: lists of row positions, every row once."""

    def run(self, rows: list[list[int]]) -> Any:
        """One batch, results on the host: classify [rows, labels] fp32 logits; hidden-states {layer: [rows,
        hidden] fp32}."""

    def extra_metrics(self) -> dict[str, Any]: ...

    # optional: close() (backends/base.close_backend)


def encode_rows(batches: list[list[int]], token_ids: list[list[int]]) -> list[list[list[int]]]:
    """Row positions per batch -> the token id lists of each batch."""
    return [[token_ids[i] for i in batch] for batch in batches]
