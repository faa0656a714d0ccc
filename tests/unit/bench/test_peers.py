"""The peers in the lab on CPU: vLLM's cells are `unavailable` rows with the reason where vLLM is missing (no
process), transformers' continuous batching runs the generate protocol on a tiny model, HF + xgrammar makes
only valid conformers (where xgrammar is installed), the engine-vs-peers preset asks every system for the
same work, and the report puts the engine beside vLLM from rows."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from inferlab.bench.launcher import LaunchOptions, launch
from inferlab.bench.plan import build_plan
from inferlab.bench.plan_presets import get_plan_preset
from inferlab.errors import UnsupportedError

HAS_VLLM = importlib.util.find_spec("vllm") is not None
TINY_CONFORMERS = {"num_molecules": 2, "num_conformers": 2, "batch_size": 2, "dtype": "float32", "device": "cpu",
                   "sampling": "top-p", "warmup_steps": 2}


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_vllm_cells_are_unavailable_rows_with_the_reason_and_no_process(tmp_path):
    plan = build_plan({"name": "peers", "sweep": [
        {"scenario": "generate", "model": "tiny", "backend": "vllm", "set": {"new_tokens": 4, "batch_size": 2,
                                                                             "num_prompts": 2}},
        {"scenario": "constrained", "model": "tiny-qwen3", "backend": "vllm",
         "set": {"structured_outputs": ["xgrammar", "guidance"], "num_molecules": 1, "batch_size": 2}}]})
    rows = launch(plan, LaunchOptions(run_dir=tmp_path)).rows
    assert [r["status"] for r in rows] == ["unavailable"] * 3
    for row in rows:
        assert "backend vllm" in row["message"] and "vllm package" in row["message"]
        assert "no process was run" in row["message"] and not (tmp_path / "logs" / f"{row['cell_key']}.log").exists()


def test_a_vllm_that_does_not_import_is_unsupported_with_its_reason(monkeypatch):
    from inferlab.bench.backends import vllm_support

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    with pytest.raises(UnsupportedError, match="vllm cannot be imported here"):
        vllm_support.import_vllm()


def test_vllm_starts_without_flashinfer_by_switching_its_sampler_off(monkeypatch):
    from inferlab.bench.backends import vllm_support

    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    monkeypatch.delenv("VLLM_ALLOW_INSECURE_SERIALIZATION", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flashinfer" else object())
    facts = vllm_support.prepare_environment()
    import os

    assert facts == {"flashinfer_present": False}
    assert os.environ["VLLM_USE_FLASHINFER_SAMPLER"] == "0"


def test_vllm_cells_pass_the_kv_dtype_and_attention_backend_and_say_what_ran():
    import torch

    from inferlab.bench.backends import vllm_support

    config = {"seed": 0, "gpu_memory_utilization": 0.9, "enforce_eager": False, "kv_dtype": "fp8",
              "attention_backend": "auto"}
    arguments = vllm_support.engine_arguments(config, torch.device("cuda"), torch.bfloat16)
    assert arguments["kv_cache_dtype"] == "fp8" and "attention_config" not in arguments  # auto: vLLM's choice
    arguments = vllm_support.engine_arguments({**config, "kv_dtype": "auto", "attention_backend": "FLASHINFER"},
                                              torch.device("cuda"), torch.bfloat16)
    assert arguments["kv_cache_dtype"] == "auto" and arguments["attention_config"] == {"backend": "FLASHINFER"}
    assert vllm_support.runner_facts([{"attention": ["FLASH_ATTN"], "sampler": "forward_cuda"}]) == {
        "vllm_attention_backend": "FLASH_ATTN", "vllm_sampler": "FlashInfer", "flashinfer_sampler": True}
    assert vllm_support.runner_facts([{"attention": ["TRITON_ATTN"], "sampler": "forward_native"}]) == {
        "vllm_attention_backend": "TRITON_ATTN", "vllm_sampler": "vLLM's own", "flashinfer_sampler": False}


@pytest.mark.slow
def test_hf_continuous_runs_the_generate_protocol_on_cpu(tiny_checkpoint, run_cell):
    path = tiny_checkpoint()
    data = {"sweep": [{"scenario": "generate", "model": str(path), "backend": "hf-continuous",
                       "set": {"batch_size": 2, "num_prompts": 4, "prompt_tokens": 5, "new_tokens": 6,
                               "dtype": "float32", "device": "cpu", "warmup_steps": 0, "block_size": 16}}]}
    _, out = run_cell(data, path)
    assert out.status == "ok", out.message
    m = out.metrics
    assert m["output_tokens"] == m["steady_calls"] * 2 * 6 and m["tokens_per_row"] == 6  # EOS suppressed
    assert not any("ended before new_tokens" in w for w in out.warnings)
    cb = m["hf_continuous"]
    assert cb["attention"] == "paged|sdpa" and cb["block_size"] == 16 and cb["max_requests_per_batch"] == 2
    assert cb["num_blocks"] == 2 * 2 and cb["decode_fast_path"] is False  # (5 + 6) / 16 -> 1 block + 1, even


@pytest.mark.slow
def test_hf_xgrammar_makes_only_valid_conformers(tiny_checkpoint, run_cell):
    pytest.importorskip("xgrammar")
    path = tiny_checkpoint("tiny-qwen3")
    data = {"sweep": [{"scenario": "constrained", "model": str(path), "backend": "hf-xgrammar",
                       "set": {**TINY_CONFORMERS, "num_molecules": 1, "max_requests": 2, "kv_cache": "static",
                               "compile": False}}]}  # static: a 2-step warm-up instead of a full-length one
    _, out = run_cell(data, path)
    assert out.status == "ok", out.message
    m = out.metrics
    # random weights, sampled: the grammar alone keeps every conformer valid, ended by EOS
    assert m["valid_fraction"] == 1.0 and m["ended_with_eos_fraction"] == 1.0 and m["checked_rows"] == 2
    assert m["distinct_grammars"] == 1 and m["requests_measured"] == 2 and m["first_call_steps"] == 2


def test_the_preset_asks_every_system_for_the_same_work():
    cells = build_plan(get_plan_preset("engine-vs-peers")).cells
    generate = [c for c in cells if c.scenario == "generate"]
    assert {c.backend for c in generate} == {"inferlab", "vllm", "hf-continuous"} and len(generate) == 14
    same = ("batch_size", "num_prompts", "prompt_tokens", "new_tokens", "do_sample", "temperature", "top_p", "top_k",
            "seed", "dtype")
    by_case: dict[tuple, set[str]] = {}
    for c in generate:
        case = (c.model, *(c.config[k] for k in same), c.config.get("kv_dtype", "auto"))
        by_case.setdefault(case, set()).add(c.backend)
    assert len(by_case) == 6 and all({"inferlab", "vllm"} <= b for b in by_case.values())  # 5 cases + fp8 on one
    fp8 = [case for case in by_case if case[-1] == "fp8"]
    assert fp8 == [("qwen3-0.6b", 256, 256, 29, 600, True, 1.0, 1.0, 0, 0, "bfloat16", "fp8")]
    assert sum("hf-continuous" in b for b in by_case.values()) == 2  # each beside the engine's row of the same work
    assert all(c.config["min_repeats"] >= 3 for c in generate if c.backend != "hf-continuous")  # a spread to judge by
    conformers = [c for c in cells if c.scenario == "constrained"]
    workload = ("num_molecules", "num_conformers", "min_heavy_atoms", "max_heavy_atoms", "sampling", "profile", "seed")
    assert len({tuple(c.config[k] for k in workload) for c in conformers}) == 1
    by_requests: dict[int, list] = {}
    for c in conformers:
        by_requests.setdefault(c.config["max_requests"], []).append(
            (c.backend, c.config.get("structured_outputs"), c.config.get("kv_dtype")))
    assert sorted(by_requests[800]) == [("inferlab", None, "auto"), ("inferlab", None, "fp8"),
                                        ("vllm", "guidance", "auto"), ("vllm", "xgrammar", "auto"),
                                        ("vllm", "xgrammar", "fp8")]
    assert sorted(by_requests[32]) == [("hf-xgrammar", None, None), ("inferlab", None, "auto")]


def _lab_sweep():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "scripts" / "gpu" / "lab_sweep.py"
    spec = importlib.util.spec_from_file_location("lab_sweep", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_device_parts_cover_the_preset_once_each():
    lab_sweep = _lab_sweep()
    parts = ("peers-hf", "peers-engine-conformers", "peers-xgrammar", "peers-vllm")
    cells = {part: build_plan(get_plan_preset("engine-vs-peers"), only=lab_sweep._only_filters(
        lab_sweep.PART_FILTERS[part])).cells for part in parts}
    keys = [c.key for part in parts for c in cells[part]]
    assert len(keys) == len(set(keys)) == len(build_plan(get_plan_preset("engine-vs-peers")).cells)
    assert {c.backend for c in cells["peers-hf"]} == {"inferlab", "hf-continuous"}  # no peer package needed
    assert {(c.backend, c.scenario) for c in cells["peers-engine-conformers"]} == {("inferlab", "constrained")}
    assert {c.backend for c in cells["peers-xgrammar"]} == {"hf-xgrammar"}
    assert {part: lab_sweep.NEEDS.get(part) for part in parts} == {
        "peers-hf": None, "peers-engine-conformers": None, "peers-vllm": "vllm", "peers-xgrammar": "xgrammar"}
    assert all(lab_sweep.PARTS[part] == ("engine-vs-peers", "engine-vs-peers") for part in parts)


@pytest.mark.parametrize("preset, parts", [("seed-classify", ("classify", "classify-vllm")),
                                           ("seed-hidden-states", ("hidden", "hidden-vllm"))])
def test_the_encode_parts_cover_their_preset_once_each(preset, parts):
    """transformers' and the engine's cells in one part, vLLM's (not started without vLLM) in the other."""
    lab_sweep = _lab_sweep()
    cells = {part: build_plan(get_plan_preset(preset), only=lab_sweep._only_filters(
        lab_sweep.PART_FILTERS[part])).cells for part in parts}
    keys = [c.key for part in parts for c in cells[part]]
    assert len(keys) == len(set(keys)) == len(build_plan(get_plan_preset(preset)).cells)
    plain, peer = parts
    assert {c.backend for c in cells[plain]} == {"hf", "inferlab"} and plain not in lab_sweep.NEEDS
    assert {c.backend for c in cells[peer]} == {"vllm"} and lab_sweep.NEEDS[peer] == "vllm"
    assert lab_sweep.PARTS[plain] == lab_sweep.PARTS[peer] == (preset, preset)


def _row(backend, model, tps, **config):
    base = {"batch_size": 256, "num_prompts": 256, "prompt_tokens": 48, "new_tokens": 1000, "do_sample": True,
            "temperature": 1.0, "top_p": 0.9, "top_k": 0}
    metrics = {"output_tokens_per_s": tps}
    if backend == "vllm":
        metrics.update(vllm_version="0.26.0", vllm_attention_backend="FLASH_ATTN", flashinfer_present=False,
                       flashinfer_sampler=False)
    return {"scenario": "generate", "backend": backend, "model": model, "status": "ok",
            "config": {**base, "dtype": "bfloat16", **config},
            "metrics": metrics, "env": {"gpu": "NVIDIA H100"}, "headline_metric": "output_tokens_per_s",
            "workload_knobs": list(base)}


def test_the_report_shows_case_inferlab_vllm_and_the_ratio_from_rows(tmp_path):
    from inferlab.bench.report import write_report

    rows = [_row("inferlab", "llama-380m", 90000.0), _row("vllm", "llama-380m", 30000.0),
            _row("hf-continuous", "llama-380m", 9000.0),
            _row("inferlab", "llama-380m", 18000.0, batch_size=16, num_prompts=16),
            {**_row("vllm", "llama-380m", 0.0, batch_size=16, num_prompts=16), "status": "unavailable",
             "message": "backend vllm (generate) needs the vllm package"},
            _row("inferlab", "llama-380m", 120000.0, kv_dtype="fp8"),
            {**_row("vllm", "llama-380m", 40000.0, kv_dtype="fp8"), "metrics": {
                "output_tokens_per_s": 40000.0, "vllm_version": "0.26.0", "vllm_attention_backend": "FLASH_ATTN",
                "vllm_sampler": "FlashInfer", "flashinfer_present": True, "flashinfer_sampler": True}}]
    rows[2]["metrics"]["hf_continuous"] = {"attention": "paged|sdpa", "decode_fast_path": False}
    text = write_report(["run"], rows, tmp_path).read_text()
    section = text.split("## The engine beside its peers", 1)[1]
    assert "| llama-380m, batch 256, 1000 new, top-p 0.9 | bfloat16 | 90,000 | 30,000 | 3.00x |" in section
    assert "vLLM 0.26.0, FLASH_ATTN, without FlashInfer" in section and "| 9,000 | 10.00x |" in section
    assert "paged\\|sdpa, no decode fast path (needs flash-attn)" in section  # "|" escaped in the table
    assert "unavailable: backend vllm (generate) needs the vllm package" in section
    # fp8 beside fp8 (never beside the bf16 rows), and the vLLM row says what it ran
    assert "| llama-380m, batch 256, 1000 new, top-p 0.9 | fp8 | 120,000 | 40,000 | 3.00x | vLLM 0.26.0, FLASH_ATTN, " \
           "FlashInfer sampler |" in section


def test_the_conformer_tables_pair_each_peer_with_the_engine_on_the_same_requests_and_kv(tmp_path):
    from inferlab.bench.report import write_report

    def conformer(backend, requests, tps, **config):
        base = {"num_molecules": 400, "num_conformers": 8, "sampling": "top-p", "profile": "v3-fixed4",
                "molecules_file": "", "min_heavy_atoms": 20, "max_heavy_atoms": 50, "max_requests": requests,
                "dtype": "bfloat16"}
        return {"scenario": "constrained", "backend": backend, "model": "qwen3-0.6b", "status": "ok",
                "config": {**base, **config}, "env": {"gpu": "NVIDIA H100", "transformers": "5.17.0"},
                "metrics": {"output_tokens_per_s": tps, "molecules_per_s": tps / 6000, "valid_fraction": 1.0},
                "headline_metric": "output_tokens_per_s", "workload_knobs": ["batch_size"]}

    rows = [conformer("inferlab", 800, 40000.0, kv_dtype="auto"), conformer("inferlab", 800, 60000.0, kv_dtype="fp8"),
            conformer("vllm", 800, 10000.0, kv_dtype="auto", structured_outputs="xgrammar"),
            conformer("vllm", 800, 12000.0, kv_dtype="fp8", structured_outputs="xgrammar"),
            conformer("inferlab", 32, 6000.0, kv_dtype="auto"),
            conformer("hf-xgrammar", 32, 600.0, attn_implementation="sdpa", kv_cache="dynamic")]
    section = write_report(["run"], rows, tmp_path).read_text().split("## The engine beside its peers", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("| vLLM") or line.startswith("| HF")]
    assert lines[0].startswith("| vLLM + xgrammar | bfloat16 | 10,000 |") and "| 4.00x | 4.00x |" in lines[0]
    assert lines[1].startswith("| vLLM + xgrammar | fp8 | 12,000 |") and "| 5.00x | 5.00x |" in lines[1]
    assert lines[2].startswith("| HF + xgrammar processor | bfloat16 | 600 |") and "| 10.00x | 10.00x |" in lines[2]
    assert "transformers 5.17.0, sdpa, dynamic KV cache" in lines[2]
    assert section.count("Conformers: qwen3-0.6b") == 2  # 800 requests and 32 requests: two tables


def test_hf_continuous_never_ends_a_row_early(tiny_checkpoint, tmp_path):
    """EOS made the greedy first token: suppressed, every row still has exactly new_tokens and no EOS;
    the negative control (suppression off) ends at once."""
    import json
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from inferlab.bench.backends.base import GenerateSpec
    from inferlab.bench.backends.hf_continuous import HFContinuousBackend, KNOBS
    from inferlab.types import Request, SamplingParams

    source = tiny_checkpoint()
    prompts = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    with torch.no_grad():
        first = AutoModelForCausalLM.from_pretrained(str(source)).eval()(prompts).logits[0, -1].argmax().item()
    path = tmp_path / "eos-first"
    shutil.copytree(source, path)
    config = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps({**config, "eos_token_id": first}))
    knobs = {k.name: k.default for k in KNOBS} | {"batch_size": 2, "prompt_tokens": 4, "block_size": 16}
    backend = HFContinuousBackend(knobs, GenerateSpec(new_tokens=5, seed=0))
    backend.load(path, torch.device("cpu"), torch.float32)
    assert backend.eos_token_ids == {first}
    greedy = SamplingParams(temperature=0.0, max_new_tokens=5, min_new_tokens=5)
    requests = [Request(str(i), prompt_ids=tuple(row), sampling=greedy) for i, row in enumerate(prompts.tolist())]
    rows = [r.token_ids for r in backend.generate(requests)]
    assert [len(r) for r in rows] == [5, 5] and all(first not in r for r in rows)
    backend.model.destroy_cached_continuous_batching_manager()
    backend.generation_configs[greedy].suppress_tokens = None  # negative control
    assert next(iter(backend.generate(requests))).token_ids == [first]


def test_the_reference_recipe_part_builds_trains_compares_and_scores_only_what_differs(tmp_path, monkeypatch):
    """run_reference_recipe's steps, the commands stubbed: the build and the training run once (a rerun resumes
    past them), identical weights end the part, differing ones get the constrained bf16 quality cells."""
    import json
    import time

    lab_sweep = _lab_sweep()
    runs, out, commands, benches = tmp_path / "runs", tmp_path / "out", [], []

    def fake_run(command, log_path, deadline, log, part):
        commands.append(command[4])  # build-data / reproduce
        if command[4] == "build-data":
            (runs / "reference-data").mkdir(parents=True)
            (runs / "reference-data" / "data_manifest.json").write_text("{}")
        else:
            (runs / "reference-recipe").mkdir(parents=True)
            (runs / "reference-recipe" / "reproduction.json").write_text(json.dumps(comparison))
        return True

    monkeypatch.setattr(lab_sweep, "_logged_run", fake_run)
    monkeypatch.setattr(lab_sweep, "inferlab", lambda argv: benches.append(argv) or 0)
    comparison = {"identical": True, "tensors_differing": 0, "tensors": 3, "max_abs_difference": 0.0}
    log: list[str] = []
    lab_sweep.run_reference_recipe(runs, out, time.monotonic() + 1000, False, log)
    assert commands == ["build-data", "reproduce"] and not benches and "identical weights" in log[-1]
    assert json.loads((out / "reference-recipe" / "reproduction.json").read_text())["identical"]
    comparison.update(identical=False, tensors_differing=2, max_abs_difference=0.01)
    (runs / "reference-recipe" / "reproduction.json").write_text(json.dumps(comparison))
    lab_sweep.run_reference_recipe(runs, out, time.monotonic() + 1000, False, log)
    assert commands == ["build-data", "reproduce"]  # both resumed past
    (argv,) = benches
    assert argv[:4] == ["bench", "--preset", "conformer-quality", "--model"] and argv[4] == str(runs / "reference-recipe")
    assert ["--only", "constraint=on"] == argv[argv.index("constraint=on") - 1: argv.index("constraint=on") + 1]
