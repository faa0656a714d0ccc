"""What a sequence classifier's logits mean, read from its config: label names (id2label), their count and
the problem type, and the output fields of one row, the same for every backend.

Problem types (transformers' `problem_type`; when the config has none, transformers decides at training time:
one label = regression, more = single-label):
- single_label_classification: softmax probabilities; `label` / `label_id` the most probable.
- multi_label_classification: an independent sigmoid per label; `labels` / `label_ids` those above 0.5.
- regression: the raw outputs, `score` (one label) or `scores` (several).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from inferlab.errors import InputError

PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")


@dataclass(frozen=True)
class ClassifierLabels:
    labels: tuple[str, ...]  # label name of each output, in order
    problem_type: str

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ClassifierLabels":
        """From a config.json dict (or a transformers config's to_dict())."""
        id2label = config.get("id2label") or {}
        count = len(id2label) or int(config.get("num_labels", 2))
        labels = tuple(str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(count))
        problem = config.get("problem_type") or ("regression" if count == 1 else "single_label_classification")
        if problem not in PROBLEM_TYPES:
            raise InputError(f"config.json has problem_type={problem!r}; classify knows {', '.join(PROBLEM_TYPES)}")
        return cls(labels, problem)

    def row_fields(self, logits: torch.Tensor) -> list[dict[str, Any]]:
        """logits [rows, labels] (any float dtype, CPU) -> each row's output fields (module docstring)."""
        logits = logits.float()
        if self.problem_type == "regression":
            if len(self.labels) == 1:
                return [{"score": float(v)} for v in logits[:, 0].tolist()]
            return [{"scores": dict(zip(self.labels, row))} for row in logits.tolist()]
        if self.problem_type == "multi_label_classification":
            out = []
            for probs in logits.sigmoid().tolist():
                chosen = [i for i, p in enumerate(probs) if p > 0.5]
                out.append({"labels": [self.labels[i] for i in chosen], "label_ids": chosen,
                            "probabilities": dict(zip(self.labels, probs))})
            return out
        probs = logits.softmax(dim=-1)
        best = probs.argmax(dim=-1).tolist()
        return [{"label": self.labels[i], "label_id": i, "probabilities": dict(zip(self.labels, p))}
                for i, p in zip(best, probs.tolist())]
