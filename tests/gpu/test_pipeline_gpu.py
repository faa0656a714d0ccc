"""The user-facing commands on the device: `inferlab demo`, the conformer pipeline (with its resume),
`inferlab tune` for each workload, and the transformers fallback of `inferlab generate`.

- demo: through the CLI, on CUDA, exits 0.
- conformer pipeline: NCI molecules x K into an SDF + JSONL: one row per (molecule, k), ids unique; a
  rerun writes nothing (everything is resumed). Quick: tiny-qwen3, 24 molecules x 2; full: qwen3-0.6b,
  512 x 4.
- tune: a sweep per workload (conformers, generate on qwen3-shaped prompts, classify on qwen2-cls texts):
  candidates that ran, the best one's settings, a verdict per knob, and a recommendation that names only
  the best one's values (possibly none: no clear winner). Quick: tiny presets, a few rows, two sizes and the
  model-dtype cache; full: the model shapes and the engine's own grid (up to its memory plan, x fp8). The
  tune as a user runs it on drug-sized molecules (~15 min): lab_sweep.py's tune-conformers part.
- fallback: a tiny GPT-2 (not in the engine's registry) through backend auto falls back to transformers,
  and its greedy rows equal transformers' generate prompt by prompt (fp32); the engine and --backend hf
  then run the same prompts on a model the engine supports without error rows.
Their speed: the lab's conformer-pipeline and engine-vs-hf presets (docs/lab.md); on CPU the same code
paths are tests/unit/test_demo.py, tests/unit/conformers/test_pipeline*.py, tests/unit/workloads/test_tune.py
and test_generate_hf_backend.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from gpu_testkit import CUDA_ONLY, free_device_memory

pytestmark = CUDA_ONLY


def write_molecules(path, rows: int):
    from rdkit import RDConfig

    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        path.write_text("".join(f"{line.split()[0]} nci{i}\n" for i, line in zip(range(rows), f)))
    return path


def write_prompts(path, rows: int, field: str = "prompt"):
    """Prompts of 8 to 120 words in a fixed pattern (lengths vary)."""
    with path.open("w") as f:
        for i in range(rows):
            words = " ".join(f"w{(i + j) % 997}" for j in range(8 + (i * 37) % 113))
            f.write(json.dumps({"id": f"p{i:05d}", field: words}) + "\n")
    return path


def test_demo_runs_on_the_device(tmp_path):
    done = subprocess.run([sys.executable, "-m", "inferlab.cli", "demo", "--work-dir", str(tmp_path / "demo"),
                           "--device", "cuda"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_conformer_pipeline_writes_each_row_once_and_a_rerun_resumes(size, checkpoint, tmp_path):
    from inferlab.engine import EngineConfig
    from inferlab.workloads.conformers.pipeline.generate import generate_conformers
    from inferlab.workloads.conformers.pipeline.config import PipelineConfig

    molecules, k = size.pick((24, 2), (512, 4))
    model = checkpoint(size.pick("tiny-qwen3", "qwen3-0.6b"))
    source = write_molecules(tmp_path / "molecules.smi", molecules)
    config = PipelineConfig(num_conformers=k, seed=0)
    engine = EngineConfig(model=model, device="cuda")
    first = generate_conformers(engine, source, tmp_path / "out.sdf", config).as_dict()
    again = generate_conformers(engine, source, tmp_path / "out.sdf", config).as_dict()
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == len({r["id"] for r in rows}) == molecules * k
    assert first["conformers_ok"] > 0
    assert again["conformers_ok"] + again["conformers_error"] == 0


@pytest.mark.parametrize("workload", ["conformers", "generate", "classify"])
def test_tune_names_the_best_of_candidates_that_ran(workload, size, checkpoint, tmp_path):
    from transformers import AutoTokenizer

    from inferlab.workloads.measure import synthetic_texts
    from inferlab.workloads.tune.sweep import TuneSettings, run_sweep

    min_seconds = size.pick(0.2, 2.0)
    if workload == "conformers":
        model = checkpoint(size.pick("tiny-qwen3", "qwen3-0.6b"))
        sample = write_molecules(tmp_path / "molecules.smi", size.pick(16, 512))
        extra = dict(sample_rows=size.pick(4, 32), num_conformers=size.pick(2, 4))
    elif workload == "generate":
        model = checkpoint(size.pick("tiny-qwen3", "qwen3-0.6b"))
        sample = write_prompts(tmp_path / "prompts.jsonl", size.pick(32, 256))
        extra = dict(max_new_tokens=size.pick(16, 128))
    else:
        model = checkpoint(size.pick("tiny-qwen2-cls", "qwen2-cls"))
        texts = synthetic_texts(AutoTokenizer.from_pretrained(str(model)), size.pick(32, 512), 16, 256, seed=0,
                                distribution="log-uniform")
        sample = tmp_path / "texts.jsonl"
        sample.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
        extra = {}
    if workload != "classify":  # quick: two engine sizes, the model-dtype cache (full: the memory plan's grid x fp8)
        extra |= dict(sizes=size.pick((4, 8), None), kv_dtypes=size.pick(("auto",), None))
    tuned = run_sweep(TuneSettings(workload, str(model), str(sample), device="cuda", min_seconds=min_seconds,
                                   work_dir=str(tmp_path / "work"), **extra))  # fmt: skip
    ran = [c for c in tuned.candidates if not c.get("error")]
    assert ran and tuned.best and tuned.verdicts, tuned.candidates
    assert tuned.recommended.items() <= tuned.best.items(), (tuned.recommended, tuned.best)


def test_transformers_fallback_matches_its_generate_and_both_backends_run(size, checkpoint, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
    from inferlab.engine import EngineConfig
    from inferlab.types import SamplingParams
    from inferlab.workloads.text import open_backend, run_text_generation

    gpt2, tokenizer = tmp_path / "tiny-gpt2", build_builtin_tokenizer()
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=256, n_embd=64, n_layer=2, n_head=4,
                               bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                               pad_token_id=tokenizer.pad_token_id)).save_pretrained(gpt2)  # fmt: skip
    tokenizer.save_pretrained(gpt2)
    prompts = tmp_path / "gpt2-prompts.jsonl"  # short: prompt + 16 new tokens within the 256 positions
    prompts.write_text("".join(json.dumps({"id": f"g{i}", "prompt": "count to " * (1 + i % 6)}) + "\n"
                               for i in range(16)))  # fmt: skip
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    engine = EngineConfig(model=str(gpt2), device="cuda", dtype="float32", max_slots=8)
    run_text_generation(prompts, tmp_path / "gpt2-out.jsonl", lambda: open_backend("auto", engine), greedy)
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "gpt2-out.jsonl").read_text().splitlines())}
    reference = AutoModelForCausalLM.from_pretrained(str(gpt2)).to("cuda").eval()
    ref_tokenizer = AutoTokenizer.from_pretrained(str(gpt2))
    for line in prompts.read_text().splitlines():
        data = json.loads(line)
        ids = torch.tensor([ref_tokenizer(data["prompt"]).input_ids], device="cuda")
        with torch.inference_mode():
            out = reference.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                                     eos_token_id=ref_tokenizer.eos_token_id, pad_token_id=ref_tokenizer.pad_token_id)
        new = out[0, ids.shape[1]:].tolist()
        new = new[: new.index(ref_tokenizer.eos_token_id) + 1] if ref_tokenizer.eos_token_id in new else new
        assert rows[data["id"]]["token_ids"] == new, data["id"]
    del reference
    free_device_memory()
    model = checkpoint(size.pick("tiny-qwen3", "qwen3-0.6b"))
    texts = write_prompts(tmp_path / "prompts.jsonl", size.pick(8, 256))
    sampling = SamplingParams(temperature=0.0, max_new_tokens=size.pick(8, 128), ignore_eos=True)
    for backend in ("inferlab", "hf"):
        opened = open_backend(backend, EngineConfig(model=str(model), device="cuda", max_slots=size.pick(8, 256)))
        summary = run_text_generation(texts, tmp_path / f"{backend}.jsonl", lambda b=opened: b, sampling)
        assert summary.errors == 0, backend
        free_device_memory()
