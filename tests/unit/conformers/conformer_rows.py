"""Comparing the rows of two conformer runs that should write the same rows (resumed, other batches,
sharded): every field exactly, but the constraint pressure, a measurement on the logits, which runs in
other batch shapes reproduce only to float rounding (and its peak's token with it where two tokens' values
tie within that): its mean and max within 1e-4."""

from __future__ import annotations

import pytest

from inferlab.workloads.conformers.pipeline.pressure import FIELDS


def assert_same_rows(rows: dict[str, dict], others: dict[str, dict]) -> None:
    """rows, others: {row id: row}."""
    def exact(row: dict) -> dict:
        return {k: v for k, v in row.items() if k not in FIELDS}

    assert {i: exact(r) for i, r in rows.items()} == {i: exact(r) for i, r in others.items()}
    for i, row in rows.items():
        for name in ("pressure_mean", "pressure_max"):
            if row.get(name) is not None or others[i].get(name) is not None:
                assert row[name] == pytest.approx(others[i][name], abs=1e-4), (i, name)
