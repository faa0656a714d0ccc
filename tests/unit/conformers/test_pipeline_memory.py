"""`conformers generate` holds nothing per input line: its records are read as streams (a plan pass, the
feed's, the order's), and the rows of unusable lines are written when the order reaches them. Before, every
record was listed and every unusable line's rows waited in memory for the first molecule's: ~1.5 KB a line
(a 1M-line input took 2 GB; benchmarks/checks/2026-12-02-memory)."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from inferlab.engine import EngineConfig
from inferlab.inputs import fingerprints
from inferlab.workloads.conformers.pipeline.config import PipelineConfig
from inferlab.workloads.conformers.pipeline.generate import generate_conformers

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def peak_of_a_run(tmp_path, model, lines: int) -> int:
    """tracemalloc's peak over a run on one molecule followed by `lines` unusable lines (the engine's own
    allocations are the same in every run: the difference of two runs is what the lines cost)."""
    inp = tmp_path / f"in{lines}.smi"
    inp.write_text("CCO first\n" + "".join(f"C\u00e9C m{i}\n" for i in range(lines)))
    tracemalloc.start(1)
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        summary = generate_conformers(EngineConfig(model=model, max_slots=2, max_seq_len=256, device="cpu"), inp,
                                      tmp_path / f"out{lines}.sdf", PipelineConfig(num_conformers=1))
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    rows = [json.loads(line) for line in (tmp_path / f"out{lines}.jsonl").read_text().splitlines()]
    assert summary.molecules == lines + 1 and [r["id"] for r in rows] == ["first#0"] + [f"m{i}#0" for i in range(lines)]
    return peak


def test_a_conformer_run_holds_nothing_per_input_line(tmp_path, tiny_checkpoint, monkeypatch):
    """The fingerprints' dict of recent keys (a bounded cost) is kept small, so that the cost per line shows."""
    monkeypatch.setattr(fingerprints, "RECENT", 256)
    model = tiny_checkpoint("tiny")
    peak_of_a_run(tmp_path, model, 10)  # the engine's first start (caches, imports) apart
    small, large = peak_of_a_run(tmp_path, model, 1_000), peak_of_a_run(tmp_path, model, 9_000)
    per_line = (large - small) / 8_000
    assert per_line < 100, f"{per_line:.0f} bytes per input line"
