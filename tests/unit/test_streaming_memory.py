"""Memory bounded in the input's size: what a job keeps per input line, measured with tracemalloc.

Once ~620 bytes a line for `generate` (the ids seen and done as Python strings, and every error row after a
row still running held until it finished) and ~1.5 KB for `conformers generate` (every record listed): a
1M-line input took 0.66 GB and 2 GB. Now the first pass over an input keeps fingerprints of its ids
(inputs/fingerprints.py), freed before the work starts; the later passes replay its claims; a row written
costs nothing; the row of a line that cannot run is written when the order reaches it, never held."""

from __future__ import annotations

import json
import tracemalloc

from inferlab.inputs import fingerprints
from inferlab.inputs.record_ids import ClaimedId, RecordIds
from inferlab.jsonl_io import ResumableJsonlWriter
from inferlab.types import Result, SamplingParams
from inferlab.workloads.backend import Backend
from inferlab.workloads.text import run_text_generation


def traced(fn):
    """(what fn's allocations still hold when it returns, their peak, in bytes; what fn returned)."""
    tracemalloc.start(1)
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        kept = fn()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held - before, peak - before, kept


def test_the_ids_of_200k_lines_cost_a_few_bytes_each_and_a_second_pass_nothing():
    n = 200_000
    declared = [f"mol-{i}" if i % 1000 else None for i in range(n)]  # every 1000th line without an id
    declared[7] = "mol-3"  # line 8 repeats line 4's id
    expected = [d if d is not None else f"line-{line}" for line, d in enumerate(declared, 1)]
    expected[7] = "line-8"

    def first_pass():
        ids = RecordIds()
        assert all(ids.claim(d, line).id == expected[line - 1] for line, d in enumerate(declared, 1))
        return ids

    held, peak, ids = traced(first_pass)
    assert held < 40 * n and peak < 60 * n, (held / n, peak / n)  # a dict of the ids: ~150 bytes a line
    known = ids.known()
    del ids

    def second_pass():
        replay = known.replay()
        return [line for line, d in enumerate(declared, 1) if replay.claim(d, line).id != expected[line - 1]]

    held, peak, wrong = traced(second_pass)
    assert held < 1000 and peak < 10_000 and wrong == []  # nothing per line, the same claims
    assert known.replay().claim("mol-3", 8) == ClaimedId("line-8", "mol-3", 4)


def test_a_written_row_costs_the_writer_nothing(tmp_path):
    writer = ResumableJsonlWriter(tmp_path / "out.jsonl")

    def write():
        for i in range(20_000):
            writer.write({"id": f"row-{i}", "text": "x"})

    held, _, _ = traced(write)
    writer.close()
    assert held < 20_000 and len(ResumableJsonlWriter(tmp_path / "out.jsonl").done) == 20_000


class FirstLast(Backend):
    """Answers every request as it pulls it but the first, which it answers last (a slow row): the rows
    after it wait for it. `held` is what the job holds just before that answer."""

    name = "echo"

    def generate(self, requests, stop_after_steps=None):
        first = None
        for request in requests:
            if first is None:
                first = request
                continue
            yield Result(request.id, [1], "x", "length", 1)
        self.held = tracemalloc.get_traced_memory()[0]
        yield Result(first.id, [1], "x", "length", 1)


def test_generate_holds_nothing_per_line_while_a_row_is_running(tmp_path, monkeypatch):
    """10,000 lines, one in 100 a prompt and the others error rows (no prompt): while the first prompt is
    still running every other row is done; before, the ~9,900 rows after it waited in memory. The
    fingerprints' dict of recent keys (a bounded cost) is kept small here, so that the cost per line shows."""
    monkeypatch.setattr(fingerprints, "RECENT", 1024)
    n = 10_000
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"id": f"p{i}", "prompt_ids" if i % 100 == 0 else "text": [5]}) + "\n"
                           for i in range(n)))
    backend = FirstLast()

    def run():
        tracemalloc.reset_peak()
        return run_text_generation(inp, out, lambda: backend, SamplingParams(max_new_tokens=1))

    tracemalloc.start(1)
    try:
        start = tracemalloc.get_traced_memory()[0]
        summary = run()
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    per_line_waiting, per_line_peak = (backend.held - start) / n, peak / n
    assert per_line_waiting < 15 and per_line_peak < 100, (per_line_waiting, per_line_peak)
    assert summary.written == n and summary.errors == n - n // 100
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [f"p{i}" for i in range(n)]
