"""`inferlab generate` never loses data: an output that is an input is refused before a byte is written, a
rerun with another setting is refused by name (a larger --max-seq-len with --retry-errors, as a row too long
for the rows advises, is not another setting), the identical command resumes its activations after a kill, every input line gets one row under an id no other row has, and a bad byte is one error row."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from inferlab.cli import main
from inferlab.workloads.activation_store import ActivationStore

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def generate(model, inp, out, *extra):
    return main(["generate", "--model", str(model), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--dtype", "float32", "--temperature", "0", "--max-new-tokens", "3", "--max-slots", "2",
                 "--max-seq-len", "64", *extra])


def test_collected_activations_never_overwrite_the_input(tiny_checkpoint, tmp_path, capsys):
    inp = tmp_path / "one.jsonl"
    inp.write_text('{"id": "a", "prompt_ids": [5, 6]}\n')
    code = generate(tiny_checkpoint("tiny"), inp, tmp_path / "out.jsonl", "--collect-layers", "0",
                    "--collect-output", str(inp))
    assert code == 2 and "--collect-output" in capsys.readouterr().err
    assert inp.read_text() == '{"id": "a", "prompt_ids": [5, 6]}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.jsonl"]


def test_rows_are_unique_and_a_changed_setting_is_refused(tiny_checkpoint, tmp_path, capsys):
    """Line 3 has no id (`line-3`), line 4 repeats `a` and line 5 declares `line-3`; line 6 holds a byte that is
    not UTF-8. Every line gets exactly one row, under its own id."""
    model = tiny_checkpoint("tiny")
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_bytes(b'{"id": "a", "prompt_ids": [5]}\n{"id": "b", "prompt_ids": [6]}\n{"prompt_ids": [7]}\n'
                    b'{"id": "a", "prompt_ids": [8]}\n{"id": "line-3", "prompt_ids": [9]}\n'
                    b'{"id": "c", "prompt": "caf\xe9"}\n')
    assert generate(model, inp, out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    ids = [r["id"] for r in rows]
    assert len(ids) == 6 and len(set(ids)) == 6
    errors = {r["id"]: r["error"] for r in rows if r["error"]}
    assert set(errors) == {"line-4", "line-5", "line-6"} and "not UTF-8" in errors["line-6"]
    assert generate(model, inp, out, "--max-new-tokens", "5") == 2
    assert "sampling.max_new_tokens=3 then, 5 now" in capsys.readouterr().err
    assert generate(model, inp, out, "--kv-dtype", "fp8") == 2  # an FP8 cache writes other tokens: not mixed in
    assert "--kv-dtype=" in capsys.readouterr().err
    assert out.read_text().count("\n") == 6  # nothing appended
    assert generate(model, inp, out) == 0 and out.read_text().count("\n") == 6  # the same job resumes


def test_a_larger_max_seq_len_with_retry_errors_resumes_the_output(tiny_checkpoint, tmp_path, capsys):
    model = tiny_checkpoint("tiny")
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text('{"id": "short", "prompt_ids": [5]}\n{"id": "long", "prompt_ids": [5, 6, 7, 8, 9, 10, 11, 12]}\n')
    assert generate(model, inp, out, "--max-seq-len", "8") == 0
    errors = {r["id"]: r["error"] for r in map(json.loads, out.read_text().splitlines())}
    assert errors["short"] is None and "larger max_seq_len" in errors["long"]
    capsys.readouterr()
    assert generate(model, inp, out, "--max-seq-len", "64", "--retry-errors") == 0
    assert "1 error rows of earlier runs run again" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["status"]) for r in rows] == [("short", "ok"), ("long", "ok")]


def test_the_identical_command_resumes_its_activation_store(tmp_path):
    """The settings hold tuples (the sampling's stop_token_ids); run.json holds them as lists."""
    settings = {"model": "/m", "sampling": {"stop_token_ids": (), "temperature": 0.0}, "layers": [0]}
    store = ActivationStore(tmp_path / "acts.safetensors", settings)
    store.write_shard(["a"], [2], {0: torch.zeros(1, 4)})
    store.close()  # killed here: the rerun must go on from row "a"
    resumed = ActivationStore(tmp_path / "acts.safetensors", settings)
    assert "a" in resumed.done_ids and len(resumed.done_ids) == 1
    resumed.close()


def test_non_finite_sampling_settings_are_refused_as_flags_and_as_rows(tiny_checkpoint, tmp_path, capsys):
    """`--temperature nan` (a float flag takes it) and a JSONL line's `"temperature": NaN` (Python's JSON
    reads it) once passed the checks and gave token 0 repeated: now the flag is refused before any work and
    the line is one error row."""
    model = tiny_checkpoint("tiny")
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text('{"id": "a", "prompt_ids": [5]}\n{"id": "b", "prompt_ids": [6], "temperature": NaN}\n'
                   '{"id": "c", "prompt_ids": [7], "top_p": Infinity}\n')
    for flag in (["--temperature", "nan"], ["--temperature", "1e-45"], ["--top-p", "inf"]):
        assert main(["generate", "--model", str(model), "--input", str(inp), "--output", str(out), "--device", "cpu",
                     *flag]) == 2
        assert f"{flag[0]}=" in capsys.readouterr().err and not out.exists()
    assert generate(model, inp, out) == 0
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["a"]["status"] == "ok"
    assert "temperature=nan must be a finite number" in rows["b"]["error"]
    assert "top_p=inf must be a finite number" in rows["c"]["error"]


def test_a_full_disk_is_one_line_naming_the_file_and_the_rerun_completes(tiny_checkpoint, tmp_path):
    """The file-size limit of the process stands in for a full disk (EFBIG, as ENOSPC): the run ends with one
    line naming the output and the fix, no traceback, the finished rows kept; the same command completes it."""
    import resource
    import subprocess
    import sys

    model = tiny_checkpoint("tiny")
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"id": f"p{i}", "prompt_ids": [5 + i]}) + "\n" for i in range(40)))
    argv = ["generate", "--model", str(model), "--input", str(inp), "--output", str(out), "--device", "cpu",
            "--max-new-tokens", "3", "--max-slots", "2", "--max-seq-len", "64"]

    def full_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4000, resource.RLIM_INFINITY))

    src = str(Path(__file__).resolve().parents[3] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "inferlab.cli", *argv], capture_output=True, text=True,
                         preexec_fn=full_disk, env=env)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert f"error: cannot write {out} (File too large)" in run.stderr and "rerun the same command" in run.stderr
    kept = [json.loads(line)["id"] for line in out.read_text().split("\n")[:-1]]
    assert 0 < len(kept) < 40
    assert main(argv) == 0
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == sorted(f"p{i}" for i in range(40))


def test_a_read_only_folder_is_one_line_naming_the_lock(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    import errno

    real_open = os.open

    def read_only(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *args, **kwargs)

    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "a", "prompt_ids": [5]}\n')
    monkeypatch.setattr(os, "open", read_only)
    assert generate(tiny_checkpoint("tiny"), inp, tmp_path / "out.jsonl") == 2
    err = capsys.readouterr().err
    assert f"cannot write {tmp_path / 'out.jsonl.lock'} (Read-only file system)" in err and "writable" in err
