"""The output guard: outputs never equal inputs, one run per output (the lock outlives no process, SIGKILL
included), an output is resumed only by the job its manifest records, and a refused or failed run leaves
no file behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from inferlab.errors import ConfigError
from inferlab.outputs.atomic import write_text_atomic
from inferlab.outputs.guard import GuardedOutput, OutputGuard, lock_path, manifest_path
from inferlab.outputs.lock import OutputLock


def guard(tmp_path, settings=None, overwrite=False, extra=()):
    inp = tmp_path / "in.smi"
    if not inp.exists():
        inp.write_text("CCO a\n")
    out = tmp_path / "out.sdf"
    outputs = [GuardedOutput("--output", out), GuardedOutput("--output's rows", tmp_path / "out.jsonl"), *extra]
    return OutputGuard("conformers generate", settings or {"num_conformers": 1, "sampling": {"mode": "top-p"}},
                       {"--input": inp}, outputs, overwrite)


def test_an_output_that_is_an_input_is_refused_even_through_a_link(tmp_path):
    inp = tmp_path / "in.smi"
    inp.write_text("CCO a\n")
    (tmp_path / "link.json").symlink_to(inp)
    for path in (inp, tmp_path / "link.json", tmp_path / "sub" / ".." / "in.smi"):
        with pytest.raises(ConfigError, match="is the --input file"):
            with guard(tmp_path, extra=[GuardedOutput("--summary-json", path, resumable=False)]):
                pass
    with pytest.raises(ConfigError, match="is also --output"):
        with guard(tmp_path, extra=[GuardedOutput("--summary-json", tmp_path / "out.sdf", resumable=False)]):
            pass
    assert inp.read_text() == "CCO a\n" and sorted(p.name for p in tmp_path.iterdir()) == ["in.smi", "link.json"]


def test_a_second_run_on_the_same_output_is_refused(tmp_path):
    with guard(tmp_path):
        with pytest.raises(ConfigError, match=f"another inferlab run \\(process {os.getpid()}\\) is writing"):
            with guard(tmp_path):
                pass
    with guard(tmp_path):  # released at the end of the first
        pass


def test_a_killed_holder_leaves_the_lock_free(tmp_path):
    path = lock_path(tmp_path / "out.sdf")
    code = ("import sys, time; from inferlab.outputs.lock import OutputLock\n"
            "OutputLock(sys.argv[1], 'x').acquire(); print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"process {child.pid}"):
            OutputLock(path, "out.sdf").acquire()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with OutputLock(path, "out.sdf"):  # the OS dropped the dead process's flock
        pass
    assert not path.exists()


def test_only_the_same_job_resumes_an_output(tmp_path):
    with guard(tmp_path) as g:
        (tmp_path / "out.jsonl").write_text('{"id": "a#0"}\n')
        assert not g.resuming
    with guard(tmp_path) as g:
        assert g.resuming
    changed = {"num_conformers": 2, "sampling": {"mode": "greedy"}}
    with pytest.raises(ConfigError) as refused:
        with guard(tmp_path, settings=changed):
            pass
    message = str(refused.value)
    assert "num_conformers=1 then, 2 now" in message and "sampling.mode='top-p' then, 'greedy' now" in message
    assert "--overwrite" in message
    (tmp_path / "in.smi").write_text("CCN b\n")
    with pytest.raises(ConfigError, match="--input changed since"):
        with guard(tmp_path):
            pass
    with guard(tmp_path, settings=changed, overwrite=True) as g:  # the old rows are gone, the new job starts
        assert not g.resuming and not (tmp_path / "out.jsonl").exists()


def test_outputs_without_a_manifest_are_refused_not_replaced(tmp_path):
    (tmp_path / "out.sdf").write_text("someone's records\n$$$$\n")
    with pytest.raises(ConfigError, match="no out.sdf.manifest.json beside it says which job wrote it.*--overwrite"):
        with guard(tmp_path):
            pass
    assert (tmp_path / "out.sdf").read_text() == "someone's records\n$$$$\n"
    assert not manifest_path(tmp_path / "out.sdf").exists() and not lock_path(tmp_path / "out.sdf").exists()


def test_a_run_that_wrote_nothing_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with guard(tmp_path):
            raise RuntimeError("the model could not be loaded")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.smi"]
    (tmp_path / "in.smi").write_text("CCO a\n")
    nested = OutputGuard("generate", {}, {"--input": tmp_path / "in.smi"},
                         [GuardedOutput("--output", tmp_path / "new" / "o.jsonl")])
    with pytest.raises(RuntimeError):
        with nested:
            raise RuntimeError("refused before the first row")
    assert not (tmp_path / "new").exists()  # the folder made for the lock is gone too


def test_whole_file_writes_replace_in_one_rename(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("old")
    write_text_atomic(target, "new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


@pytest.mark.parametrize("name", ["out.sdf.manifest.json", "out.sdf.lock", "out.jsonl.lock", "out.jsonl.damaged",
                                  ".out.jsonl.4242.tmp", ".out.sdf.manifest.json.77.tmp"])
def test_an_input_named_like_a_file_the_run_writes_beside_an_output_is_refused(tmp_path, name):
    """The files beside the outputs (their manifest, locks, damaged lines, rewrites' temporary files) are
    written too: an input of that name is refused before a byte is written, however it is reached."""
    inp = tmp_path / name
    inp.write_text("CCO a\n")
    with pytest.raises(ConfigError, match="rename the input or write the output elsewhere"):
        with OutputGuard("conformers generate", {}, {"--input": inp},
                         [GuardedOutput("--output", tmp_path / "out.sdf"),
                          GuardedOutput("--output's rows", tmp_path / "out.jsonl")]):
            pass
    assert inp.read_text() == "CCO a\n" and sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_an_input_reached_through_a_hard_link_or_inside_an_output_folder_is_refused(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "a"}\n')
    os.link(inp, tmp_path / "out.jsonl.manifest.json")  # the same file under the manifest's name
    with pytest.raises(ConfigError, match="is the job's manifest of --output"):
        with OutputGuard("generate", {}, {"--input": inp}, [GuardedOutput("--output", tmp_path / "out.jsonl")]):
            pass
    store = tmp_path / "acts.safetensors.d"
    store.mkdir()
    os.link(inp, store / "index.jsonl")  # the store appends to its index: through the link, to the input
    outputs = [GuardedOutput("--output", tmp_path / "o.jsonl"), GuardedOutput("--collect-output's shards", store)]
    with pytest.raises(ConfigError, match="index.jsonl, inside --collect-output's shards"):
        with OutputGuard("generate", {}, {"--input": inp}, outputs):
            pass
    nested = store / "in.jsonl"
    nested.write_text('{"id": "b"}\n')
    with pytest.raises(ConfigError, match="in.jsonl, inside --collect-output's shards"):
        with OutputGuard("generate", {}, {"--input": nested}, outputs):
            pass
    assert inp.read_text() == '{"id": "a"}\n' and nested.read_text() == '{"id": "b"}\n'


def test_the_model_folders_files_are_inputs_and_a_device_is_no_output(tmp_path):
    model = tmp_path / "ckpt"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(ConfigError, match="is the --model file"):
        with OutputGuard("hidden-states", {}, {"--model": model},
                         [GuardedOutput("--output", model / "model.safetensors")]):
            pass
    assert (model / "model.safetensors").read_bytes() == b"weights"
    (tmp_path / "full.jsonl").symlink_to("/dev/full")
    with pytest.raises(ConfigError, match="is a device"):
        with OutputGuard("generate", {}, {}, [GuardedOutput("--output", tmp_path / "full.jsonl")]):
            pass


def test_one_run_per_output_under_any_name(tmp_path):
    """A symbolic link to the output shares its lock (taken on the resolved path), and a hard link shares
    the lock held on the output file itself."""
    out = tmp_path / "out.jsonl"
    (tmp_path / "link.jsonl").symlink_to(out)

    def run(path):
        return OutputGuard("generate", {}, {}, [GuardedOutput("--output", path)])

    with run(out):
        with pytest.raises(ConfigError, match="another inferlab run"):
            with run(tmp_path / "link.jsonl"):
                pass
        out.write_text('{"id": "a"}\n')
    os.link(out, tmp_path / "hard.jsonl")
    with run(out):
        with pytest.raises(ConfigError, match="under another name"):
            with run(tmp_path / "hard.jsonl"):
                pass


def test_a_resume_with_another_checkpoint_is_refused_and_an_older_manifest_resumes(tmp_path, caplog):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text('{"id": "a"}\n')

    def run(checkpoint):
        return OutputGuard("generate", {"seed": 0}, {"--input": inp}, [GuardedOutput("--output", out)],
                           checkpoint=checkpoint)

    with run({"config.json": "sha256 1", "model.safetensors": "10 bytes, sha256 2"}):
        out.write_text('{"id": "a"}\n')
    with pytest.raises(ConfigError, match=r"the checkpoint in the --model folder is not the one it was made with "
                                          r"\(model.safetensors differ"):
        with run({"config.json": "sha256 1", "model.safetensors": "10 bytes, sha256 3"}):
            pass
    manifest = json.loads(manifest_path(out).read_text())
    del manifest["checkpoint"]  # as written before checkpoints were recorded
    manifest_path(out).write_text(json.dumps(manifest))
    with run({"config.json": "sha256 1", "model.safetensors": "10 bytes, sha256 3"}) as g:
        assert g.resuming
    assert "did not record the checkpoint's identity" in caplog.text
    assert json.loads(manifest_path(out).read_text())["checkpoint"]["model.safetensors"] == "10 bytes, sha256 3"
