"""Start-up imports: `import inferlab` and `inferlab --help` stay light, and the text commands run on a
machine without RDKit (each check in a child process, so sys.modules starts clean)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# In the child: make `rdkit` unimportable as if it were not installed (a meta path finder that refuses it).
BLOCK_RDKIT = """
import sys
class NoRdkit:
    def find_spec(self, name, path=None, target=None):
        if name == "rdkit" or name.startswith("rdkit."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoRdkit())
"""


def _child(code: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


def test_import_inferlab_loads_no_heavy_package():
    done = _child(
        "import sys, json, inferlab, inferlab.engine, inferlab.cli\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert not loaded & {"rdkit", "matplotlib", "triton", "torch", "transformers", "ray", "submitit"}


@pytest.mark.slow
def test_help_and_model_init_and_generate_work_without_rdkit(tmp_path: Path):
    model, prompts, out = tmp_path / "tiny", tmp_path / "p.jsonl", tmp_path / "out.jsonl"
    prompts.write_text('{"id": "a", "prompt_ids": [5, 6, 7]}\n')
    code = BLOCK_RDKIT + f"""
import contextlib, io
from inferlab.cli import main
for argv in (["--help"], ["generate", "--help"], ["model", "init", "--help"]):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as e:
            assert e.code == 0, (argv, e.code)
assert main(["model", "init", "--preset", "tiny", "--out", {str(model)!r}]) == 0
assert main(["generate", "--model", {str(model)!r}, "--input", {str(prompts)!r}, "--output", {str(out)!r},
             "--max-new-tokens", "2", "--device", "cpu", "--max-slots", "1", "--max-seq-len", "16"]) == 0
print("rdkit loaded:", any(m.split(".")[0] == "rdkit" for m in sys.modules))
"""
    done = _child(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rdkit loaded: False" in done.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], len(r["token_ids"]), r["error"]) for r in rows] == [("a", 2, None)]


def test_a_command_that_needs_a_missing_package_says_what_to_install(tmp_path: Path):
    smi = tmp_path / "m.smi"
    smi.write_text("CCO\n")
    code = BLOCK_RDKIT + f"""
from inferlab.cli import main
raise SystemExit(main(["conformers", "reference", "--input", {str(smi)!r}, "--output", {str(tmp_path / "r.sdf")!r}]))
"""
    done = _child(code)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "`inferlab conformers` needs the rdkit package, which is not installed here: pip install rdkit" in done.stderr


def test_the_conformer_pipeline_module_imports_no_torch():
    """The pipeline starts its template and judge processes before this process imports torch (the engine's
    import, ~4 s on the H100 host), so their own start-up overlaps it."""
    done = _child("import sys, inferlab.workloads.conformers.pipeline.generate\nprint('torch' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_demo_reusing_its_checkpoint_imports_no_model_classes(tmp_path: Path):
    """transformers' model classes (checkpoint_init's imports, seconds of a demo's start) only to build one."""
    done = _child(f"""
import json, pathlib, sys
from inferlab.workloads.conformers.demo.model import DEMO_MODELS, demo_checkpoint
work = pathlib.Path({str(tmp_path)!r})
for preset in DEMO_MODELS.values():  # an earlier demo's checkpoint, whichever tokenizer this machine has
    (work / f"{{preset}}-float32").mkdir()
    (work / f"{{preset}}-float32" / "inferlab_preset.json").write_text("{{}}")
assert demo_checkpoint(work)[1] is False
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "transformers" or m.endswith("checkpoint_init"))))
""")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == []


def test_generate_reads_and_plans_its_input_before_torch_is_imported(tmp_path: Path, tiny_checkpoint):
    """The plan's pass holds fingerprints of every id of the input while it reads it (tests/unit/
    test_streaming_memory.py): read before torch, they add nothing to a run's peak memory (1M lines: 301 MB
    with torch imported first, on the tiny preset at 16 slots). The backend brings torch."""
    model, prompts, out = tiny_checkpoint("tiny"), tmp_path / "p.jsonl", tmp_path / "out.jsonl"
    prompts.write_text('{"id": "a", "prompt": "hi"}\n{"id": "b", "prompt_ids": [5]}\n{"id": "c"}\n')
    done = _child(f"""
import sys
from inferlab.cli import main
from inferlab.types import Result
from inferlab.workloads import text
from inferlab.workloads.backend import Backend

seen = []

class Echo(Backend):
    name = "echo"

    def generate(self, requests, stop_after_steps=None):
        for request in requests:
            yield Result(request.id, [1], "x", "length", 1)

def opened(*args, **kwargs):
    seen.append(sorted({{m.split(".")[0] for m in sys.modules}} & {{"torch", "transformers"}}))
    return Echo()

text.open_backend = opened
assert main(["generate", "--model", {str(model)!r}, "--input", {str(prompts)!r}, "--output", {str(out)!r},
             "--device", "cpu"]) == 0
print("imported when the backend opened:", seen)
""")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "imported when the backend opened: [[]]" in done.stdout
    assert [json.loads(line)["status"] for line in out.read_text().splitlines()] == ["ok", "ok", "error"]
