"""`inferlab generate` reads its input as a stream: the requests reach the backend as they are read (rows are
written while the input is still being read) and what the job keeps grows by a small bound per input line
(fingerprints of the ids, while the planning pass reads them), not by the requests: 1M lines once took ~1 GB,
the requests listed up front. tests/unit/test_streaming_memory.py measures the bytes per line with tracemalloc."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferlab.types import Result, SamplingParams
from inferlab.workloads.backend import Backend
from inferlab.workloads.text import run_text_generation

SRC = str(Path(__file__).resolve().parents[3] / "src")


class Echo(Backend):
    """Answers each request as it pulls it, and checks after its first answer that the row is on disk."""

    name = "echo"

    def __init__(self, output: Path | None = None) -> None:
        self.output = output

    def generate(self, requests, stop_after_steps=None) -> Iterator[Result]:
        assert not isinstance(requests, (list, tuple)), "the requests were listed before the backend got them"
        for i, request in enumerate(requests):
            yield Result(request.id, [1], "x", "length", 1)
            if i == 0 and self.output is not None:
                assert self.output.read_text().count("\n") == 1  # written before the next line is read


def test_the_requests_stream_through_the_backend(tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"id": f"p{i}", "prompt_ids": [5]}) + "\n" for i in range(50)))
    summary = run_text_generation(inp, out, lambda: Echo(out), SamplingParams(max_new_tokens=2))
    assert summary.written == 50 and out.read_text().count("\n") == 50


MEASURE = """
import json, resource, sys
from inferlab.types import Result, SamplingParams
from inferlab.workloads.backend import Backend
from inferlab.workloads.text import run_text_generation

class Echo(Backend):
    name = "echo"
    def generate(self, requests, stop_after_steps=None):
        for request in requests:
            yield Result(request.id, [1], "x", "length", 1)

inp, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(inp, "w") as f:
    for i in range(n):
        f.write(json.dumps({"id": f"p{i}", "prompt": f"a prompt of a few words, number {i}"}) + "\\n")
import inferlab.engine  # torch and the engine's imports before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
run_text_generation(inp, out, lambda: Echo(), SamplingParams(max_new_tokens=4))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.slow
def test_memory_grows_by_a_small_bound_per_input_line(tmp_path):
    """ru_maxrss (KB) of a run on N lines minus the process's before it, for two N: the difference per line
    is the job's memory per line (with the requests held, ~680 bytes)."""
    grown = {}
    for n in (2_000, 20_000):
        paths = [str(tmp_path / f"in{n}.jsonl"), str(tmp_path / f"o{n}.jsonl")]
        run = subprocess.run([sys.executable, "-c", MEASURE, *paths, str(n)], capture_output=True, text=True,
                             env={"PYTHONPATH": SRC, "PATH": ""}, check=True)
        grown[n] = int(run.stdout.split()[-1]) * 1024
    per_line = (grown[20_000] - grown[2_000]) / 18_000
    assert per_line < 400, f"{per_line:.0f} bytes per input line"
