"""`conformers generate` and `generate` (also collecting activations) killed at random points (SIGKILL,
SIGTERM, SIGINT), one line of the JSONL then possibly damaged (bytes no JSON row has, anywhere but in a
torn tail), then rerun with the same command: every input ends with exactly its rows, once each (generate's
in input order, and the activations' too); every SDF record reads back and belongs to exactly one ok row;
a damaged line's bytes are in OUTPUT.damaged; no process of the killed run is left (its pools and resource
tracker included: the run leads its own session, and nothing of that session may outlive it); a run ended
by SIGTERM or Ctrl-C exits 143 or 130 with the resume line and no traceback (or 0, when the signal came as
it finished).

The kill point: after `after_rows` rows are in the JSONL (0: a moment after the start, possibly before
the command is past its imports), then `delay` seconds more. Few examples, tiny models: CI runs it on 2
cores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from process_tree import kill_all, session_members, still_running

from inferlab.cli import main
from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs
from inferlab.workloads.conformers.chemistry.sdf import read_sdf

SRC = str(Path(__file__).resolve().parents[2] / "src")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
RESUME_LINE = "the rows finished so far are saved; rerun the same command to resume"
MOLECULES = "CCO a\nc1ccccc1 b\nC1CC broken\nCC(=O)O c\n"
K = 2
PROMPTS = 10
# three kill points always (the explicit examples), one drawn; no shrinking: each example runs a command
# twice (a failure is reported as found)
KILLS = settings(max_examples=1, deadline=None, database=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                 suppress_health_check=[HealthCheck.too_slow])

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_cpu_thread")]


def _sigint_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a shell's background jobs ignore it; a terminal's do not


def jsonl_rows(path: Path) -> list[str]:
    """The complete lines of a JSONL file (the last one may be torn by SIGKILL)."""
    if not path.exists():
        return []
    return [line for line in path.read_text().split("\n")[:-1]]


def kill_at(argv: list[str], rows_path: Path, sig: int, after_rows: int, delay: float) -> None:
    """Run the CLI in its own session, send `sig` at the kill point, check the ending and the leftovers."""
    cli = subprocess.Popen([sys.executable, "-m", "inferlab.cli", *argv], env=ENV, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, start_new_session=True,
                           preexec_fn=_sigint_as_in_a_terminal)
    deadline = time.monotonic() + 300
    while after_rows and len(jsonl_rows(rows_path)) < after_rows and cli.poll() is None:
        assert time.monotonic() < deadline, "no rows after 300 s"
        time.sleep(0.05)
    time.sleep(delay)
    running = cli.poll() is None
    members = session_members(cli.pid)
    if running:
        os.kill(cli.pid, sig)  # the command alone, as a user or a scheduler would
    try:
        _, err = cli.communicate(timeout=120)
    finally:
        left = still_running(members | session_members(cli.pid), timeout_s=5)
        kill_all(left)
    assert left == set(), f"processes of the killed run still running: {sorted(left)}"
    if not running or sig == signal.SIGKILL or not after_rows:
        return  # before its imports are done a command cannot say anything yet
    # past its imports: it ends as documented, or, when the signal came as it finished, as a finished run
    assert cli.returncode in (128 + sig, 0) and "Traceback" not in err, err
    if cli.returncode:
        assert f"interrupted ({signal.Signals(sig).name}): {RESUME_LINE}" in err, err


def damage_a_line(rows_path: Path, damage: tuple[float, str] | None) -> bytes | None:
    """Damage one complete line of the JSONL (which one: a fraction of their count); its new bytes."""
    if damage is None or not rows_path.exists():
        return None
    data = rows_path.read_bytes()
    lines = data.split(b"\n")  # the last item: a torn tail, or b""
    if len(lines) < 2:
        return None
    where, how = damage
    i = min(int(where * (len(lines) - 1)), len(lines) - 2)
    line = lines[i]
    lines[i] = {"nul": line[:5] + b"\x00\x00" + line[5:], "byte": line[:-3] + b"\xff" + line[-2:],
                "cut": line[: len(line) // 2], "garbage": b"#not a row"}[how]
    rows_path.write_bytes(b"\n".join(lines))
    return lines[i] + b"\n"


def assert_set_aside(rows_path: Path, damaged: bytes | None) -> None:
    if damaged is not None:
        assert damaged in Path(f"{rows_path}.damaged").read_bytes()


kill_points = dict(sig=st.sampled_from([signal.SIGKILL, signal.SIGTERM, signal.SIGINT]),
                   delay=st.floats(0.0, 1.5))
damages = st.one_of(st.none(), st.tuples(st.floats(0.0, 1.0), st.sampled_from(["nul", "byte", "cut", "garbage"])))


@KILLS
@given(after_rows=st.integers(0, 4 * K - 1), pools=st.booleans(), damage=damages, **kill_points)
@example(after_rows=2, pools=True, sig=signal.SIGKILL, delay=0.0, damage=None)
@example(after_rows=3, pools=True, sig=signal.SIGTERM, delay=0.2, damage=(0.5, "byte"))
@example(after_rows=1, pools=False, sig=signal.SIGINT, delay=0.0, damage=None)
def test_a_conformer_run_killed_anywhere_resumes_to_exactly_its_rows(tiny_checkpoint, sig, after_rows, delay, pools,
                                                                     damage):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inp, out = tmp / "in.smi", tmp / "out.sdf"
        inp.write_text(MOLECULES)
        workers = ["--workers", "1", "--judge-workers", "1"] if pools else ["--workers", "0", "--judge-workers", "0"]
        argv = ["conformers", "generate", "--model", str(tiny_checkpoint("tiny")), "--input", str(inp), "--output",
                str(out), "--num-conformers", str(K), "--seed", "3", "--max-slots", "2", "--device", "cpu", *workers]
        kill_at(argv, out.with_suffix(".jsonl"), sig, after_rows, delay)
        damaged = damage_a_line(out.with_suffix(".jsonl"), damage)
        assert main(argv) == 0  # the same command again, here
        assert_set_aside(out.with_suffix(".jsonl"), damaged)

        rows = [json.loads(line) for line in jsonl_rows(out.with_suffix(".jsonl"))]
        expected = {f"{record.id}#{k}" for record in read_molecule_inputs(inp).records for k in range(K)}
        assert sorted(r["id"] for r in rows) == sorted(expected)  # each row exactly once
        records = list(read_sdf(out))
        assert all(record.error is None for record in records)
        assert sorted(record.prop("row_id") for record in records) == sorted(
            r["id"] for r in rows if r["status"] == "ok")
        assert {r["id"] for r in rows if r["status"] == "error"} == {f"broken#{k}" for k in range(K)}


def _generate_argv(tiny_checkpoint, tmp: Path, *extra: str) -> tuple[list[str], Path]:
    inp, out = tmp / "in.jsonl", tmp / "out.jsonl"
    inp.write_text("".join(json.dumps({"id": f"p{i}", "prompt_ids": [5 + i] * (1 + i % 3)}) + "\n"
                           for i in range(PROMPTS)))
    return ["generate", "--model", str(tiny_checkpoint("tiny")), "--input", str(inp), "--output", str(out),
            "--max-new-tokens", "24", "--max-slots", "2", "--device", "cpu", *extra], out


def _assert_exactly_its_rows_in_input_order(out: Path) -> None:
    rows = [json.loads(line) for line in jsonl_rows(out)]
    assert [r["id"] for r in rows] == [f"p{i}" for i in range(PROMPTS)]  # each once, in input order
    assert all(r["status"] == "ok" and r["output_tokens"] == 24 for r in rows)


@KILLS
@given(after_rows=st.integers(0, PROMPTS - 1), damage=damages, **kill_points)
@example(after_rows=3, sig=signal.SIGKILL, delay=0.0, damage=(0.0, "nul"))
@example(after_rows=2, sig=signal.SIGTERM, delay=0.0, damage=None)
@example(after_rows=1, sig=signal.SIGINT, delay=0.1, damage=None)
def test_a_generate_run_killed_anywhere_resumes_to_exactly_its_rows(tiny_checkpoint, sig, after_rows, delay, damage):
    with tempfile.TemporaryDirectory() as tmp:
        argv, out = _generate_argv(tiny_checkpoint, Path(tmp))
        kill_at(argv, out, sig, after_rows, delay)
        damaged = damage_a_line(out, damage)
        assert main(argv) == 0
        _assert_exactly_its_rows_in_input_order(out)
        assert_set_aside(out, damaged)


@KILLS
@given(sig=kill_points["sig"], delay=st.floats(0.5, 8.0), damage=damages)
@example(sig=signal.SIGTERM, delay=4.0, damage=None)
@example(sig=signal.SIGINT, delay=6.0, damage=(0.9, "cut"))
def test_a_generate_run_collecting_activations_killed_anywhere_resumes_to_exactly_its_rows(
        tiny_checkpoint, sig, delay, damage):
    """--collect-output: a signal inside the activation store's flush once wrote rows twice (494 rows for 333
    ids); the rows and the assembled activations hold each id once, in input order. Its rows are written
    with their shard (256 rows, or at the end here), so the kill point is a time after the start."""
    from safetensors import safe_open

    with tempfile.TemporaryDirectory() as tmp:
        acts = Path(tmp) / "acts.safetensors"
        argv, out = _generate_argv(tiny_checkpoint, Path(tmp), "--collect-layers", "0", "-1", "--collect-output",
                                   str(acts))
        kill_at(argv, out, sig, 0, delay)
        damaged = damage_a_line(out, damage)
        assert main(argv) == 0
        _assert_exactly_its_rows_in_input_order(out)
        assert_set_aside(out, damaged)
        with safe_open(str(acts), framework="pt") as f:
            assert json.loads(f.metadata()["ids"]) == [f"p{i}" for i in range(PROMPTS)]
            assert f.get_tensor("layer_0").shape[0] == PROMPTS
