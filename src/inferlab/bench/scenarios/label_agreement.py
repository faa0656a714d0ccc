"""Label agreement that says what it measures: a backend's labels beside transformers' on the same texts, on
every row and on the rows whose label the cell's precision decides.

A row is decidable when transformers' top-two logit margin exceeds the margin tolerance of the cell's dtype:
twice the largest change that the dtype's own arithmetic makes to that margin on these rows, measured as
transformers in the cell's dtype against transformers in a wider dtype on the same texts (float32 for bf16 and
fp16 cells, float64 for float32 ones). Twice, since transformers and the backend may each be that far from the
wide result, in opposite directions; the largest, not a quantile, so that no row's own rounding is left out.
The tolerance never looks at the backend's outputs: taken from the backend's own differences, a backend that
errs more would widen its own tolerance and agree more. On a random-weight classifier near-ties are common and
decide the raw figure; on rows past the tolerance a disagreement is the backend's error, not rounding.
"""

from __future__ import annotations

from typing import Any

WIDER_DTYPE = {"bfloat16": "float32", "float16": "float32", "float32": "float64"}


def wider_dtype(dtype: str) -> str:
    """The dtype transformers runs in to measure the rounding of `dtype`."""
    return WIDER_DTYPE[dtype]


def label_agreement(ours: Any, theirs: Any, wider: Any) -> dict[str, Any]:
    """ours, theirs, wider: [rows, labels] logits of the same rows (the backend; transformers in the cell's dtype;
    transformers in the wider dtype). Returns labels_agree_with_hf (every row), label_margin_tolerance,
    labels_decidable (rows whose margin exceeds it) and labels_agree_with_hf_decidable (None without such rows)."""
    ours, theirs, wider = (t.double() for t in (ours, theirs, wider))
    assert ours.shape == theirs.shape == wider.shape and ours.dim() == 2 and ours.shape[1] >= 2, \
        (ours.shape, theirs.shape, wider.shape)
    agree = ours.argmax(-1) == theirs.argmax(-1)  # [rows]
    top_two = theirs.topk(2, dim=-1).indices  # [rows, 2]: transformers' label and its runner-up
    margin = _margin(theirs, top_two)  # [rows], >= 0
    shift = (margin - _margin(wider, top_two)).abs()  # what the cell's rounding moved it by
    tolerance = 2 * shift.max().item()
    decidable = margin > tolerance
    count = int(decidable.sum())
    return {"labels_agree_with_hf": agree.double().mean().item(), "label_margin_tolerance": tolerance,
            "labels_decidable": count,
            "labels_agree_with_hf_decidable": agree[decidable].double().mean().item() if count else None}


def _margin(logits: Any, top_two: Any) -> Any:
    pair = logits.gather(-1, top_two)  # [rows, 2]
    return pair[:, 0] - pair[:, 1]


def accuracy(logits: Any, labels: list[int]) -> float:
    """The share of rows whose argmax is their true label."""
    import torch

    return (logits.argmax(-1) == torch.tensor(labels)).double().mean().item()
