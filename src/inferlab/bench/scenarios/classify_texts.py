"""The texts of a classify cell (knob `texts`): synthetic prose of drawn token lengths (workloads/measure.py,
for speed on any classifier), or the held-out split of a labelled set (models/trained/aromatic_rings.py), for a
classifier trained on it (the `qwen2-cls-aromatic` preset): its true labels let the check score the backend's and
transformers' accuracy beside their agreement.
"""

from __future__ import annotations

from typing import Any, Callable

from inferlab.errors import ConfigError
from inferlab.models.trained import aromatic_rings  # light: RDKit is imported when the set is built

SYNTHETIC = "synthetic"
# name -> (its label names, the set: built in the child)
LABELLED_SETS: dict[str, tuple[tuple[str, ...], Callable[[], aromatic_rings.LabelledSet]]] = {
    aromatic_rings.NAME: (aromatic_rings.LABELS, aromatic_rings.aromatic_ring_set),
}
TEXT_SOURCES = (SYNTHETIC, *LABELLED_SETS)


def check_labels_fit(source: str, model_config: dict[str, Any], model: str) -> None:
    """A labelled set needs a classifier with as many labels as the set (plan time)."""
    if source == SYNTHETIC:
        return
    labels = LABELLED_SETS[source][0]
    count = len(model_config.get("id2label") or {}) or model_config.get("num_labels")
    if count != len(labels):
        raise ConfigError(f"texts={source} has {len(labels)} labels ({', '.join(labels)}) but model {model} has "
                          f"{count}; run it on a classifier trained on that set (preset qwen2-cls-aromatic), or "
                          f"texts={SYNTHETIC}")


def cell_texts(source: str, tokenizer: Any, count: int, min_tokens: int, max_tokens: int, seed: int,
               distribution: str) -> tuple[list[str], list[int] | None]:
    """`count` texts and their true labels (None for synthetic texts). A labelled set gives its held-out rows in
    file order, those of min_tokens-max_tokens tokens (the tokenizer's special tokens included)."""
    if source == SYNTHETIC:
        from inferlab.workloads.measure import synthetic_texts

        return synthetic_texts(tokenizer, count, min_tokens, max_tokens, seed=seed, distribution=distribution), None
    held_out = LABELLED_SETS[source][1]().test
    lengths = [len(ids) for ids in tokenizer([r.text for r in held_out])["input_ids"]]
    rows = [r for r, n in zip(held_out, lengths) if min_tokens <= n <= max_tokens][:count]
    if len(rows) < count:
        raise ConfigError(f"texts={source} has {len(rows)} held-out rows of {min_tokens}-{max_tokens} tokens, fewer "
                          f"than num_samples={count}; lower num_samples or widen the token range")
    return [r.text for r in rows], [r.label for r in rows]
