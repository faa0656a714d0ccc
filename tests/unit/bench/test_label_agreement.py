"""Label agreement on hand-made logits with known answers: the tolerance is twice the largest margin change of
transformers' own dtype (never the backend's), decidable rows are those past it, and the share counts them only."""

from __future__ import annotations

import pytest
import torch

from inferlab.bench.scenarios.label_agreement import accuracy, label_agreement, wider_dtype

# Four rows, two labels. transformers' margins (label 0 over 1, 0 over 1, 1 over 0, 0 over 1): 1.0, 0.05, 2.0, 0.01
THEIRS = torch.tensor([[1.0, 0.0], [0.05, 0.0], [0.0, 2.0], [0.30, 0.29]])
# the wider dtype moves those margins by 0.01, 0, 0.02, 0: tolerance 2 x 0.02 = 0.04, so rows 0-2 are decidable
WIDER = torch.tensor([[1.01, 0.0], [0.05, 0.0], [0.0, 2.02], [0.30, 0.29]])
# the backend agrees on rows 0 and 2, flips the decidable row 1 and the near-tie row 3
OURS = torch.tensor([[0.9, 0.0], [0.0, 0.05], [0.1, 1.9], [0.28, 0.31]])


def test_decidable_rows_are_those_past_twice_the_dtype_margin_change():
    figures = label_agreement(OURS, THEIRS, WIDER)
    assert figures["labels_agree_with_hf"] == 0.5  # 2 of 4 rows
    assert figures["label_margin_tolerance"] == pytest.approx(0.04, abs=1e-6)
    assert figures["labels_decidable"] == 3
    assert figures["labels_agree_with_hf_decidable"] == pytest.approx(2 / 3)


def test_the_backend_cannot_widen_its_own_tolerance():
    worse = OURS * torch.tensor([[-1.0, 1.0]])  # label 1 on every row: errs far more than the dtype does
    figures = label_agreement(worse, THEIRS, WIDER)
    assert figures["label_margin_tolerance"] == pytest.approx(0.04, abs=1e-6) and figures["labels_decidable"] == 3
    assert figures["labels_agree_with_hf_decidable"] == pytest.approx(1 / 3)  # row 2 alone still agrees


def test_a_wider_result_with_another_label_makes_the_tolerance_cover_that_margin():
    wider = WIDER.clone()
    wider[1] = torch.tensor([0.0, 0.05])  # the wide run picks label 1 on row 1: its margin moved by 0.10
    figures = label_agreement(THEIRS, THEIRS, wider)
    assert figures["label_margin_tolerance"] == pytest.approx(0.20, abs=1e-6)
    assert figures["labels_decidable"] == 2 and figures["labels_agree_with_hf_decidable"] == 1.0  # rows 0 and 2


def test_the_margin_is_between_transformers_top_two_of_several_labels():
    theirs = torch.tensor([[3.0, 2.5, -1.0], [0.0, 0.2, 1.0]])  # margins 0.5 (0 over 1) and 0.8 (2 over 1)
    wider = torch.tensor([[3.0, 2.6, -1.0], [0.0, 0.2, 1.0]])  # row 0's margin moved by 0.1; label 2 unused
    ours = torch.tensor([[2.0, 2.4, 5.0], [0.0, 0.3, 0.9]])
    figures = label_agreement(ours, theirs, wider)
    assert figures["label_margin_tolerance"] == pytest.approx(0.2, abs=1e-6)
    assert figures["labels_decidable"] == 2 and figures["labels_agree_with_hf_decidable"] == 0.5


def test_without_a_decidable_row_the_share_is_none_not_a_figure():
    same = torch.tensor([[0.5, 0.0], [0.0, 0.5]])
    figures = label_agreement(same, same, same + torch.tensor([[0.0, 0.6], [0.0, 0.0]]))  # row 0 flips wide
    assert figures["labels_decidable"] == 0 and figures["labels_agree_with_hf_decidable"] is None
    assert figures["labels_agree_with_hf"] == 1.0


def test_the_wider_dtype_and_accuracy():
    assert [wider_dtype(d) for d in ("bfloat16", "float16", "float32")] == ["float32", "float32", "float64"]
    assert accuracy(THEIRS, [0, 0, 1, 1]) == 0.75
