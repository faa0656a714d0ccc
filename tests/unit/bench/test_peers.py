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

    assert facts == {"flashinfer_present": False, "flashinfer_sampler": False}
    assert os.environ["VLLM_USE_FLASHINFER_SAMPLER"] == "0"


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
    assert {c.backend for c in generate} == {"inferlab", "vllm", "hf-continuous"} and len(generate) == 18
    same = ("batch_size", "num_prompts", "prompt_tokens", "new_tokens", "do_sample", "temperature", "top_p", "top_k",
            "seed", "dtype")
    by_case: dict[tuple, set[str]] = {}
    for c in generate:
        by_case.setdefault((c.model, *(c.config[k] for k in same)), set()).add(c.backend)
    assert len(by_case) == 6 and all(b == {"inferlab", "vllm", "hf-continuous"} for b in by_case.values())
    conformers = [c for c in cells if c.scenario == "constrained"]
    assert sorted((c.backend, c.config.get("structured_outputs")) for c in conformers) == [
        ("hf-xgrammar", None), ("inferlab", None), ("vllm", "guidance"), ("vllm", "xgrammar")]
    workload = ("num_molecules", "num_conformers", "min_heavy_atoms", "max_heavy_atoms", "sampling", "profile", "seed")
    assert len({tuple(c.config[k] for k in workload) for c in conformers}) == 1
    assert {c.config["max_requests"] for c in conformers if c.backend != "hf-xgrammar"} == {0}


def _row(backend, model, tps, **config):
    base = {"batch_size": 256, "num_prompts": 256, "prompt_tokens": 48, "new_tokens": 1000, "do_sample": True,
            "temperature": 1.0, "top_p": 0.9, "top_k": 0}
    metrics = {"output_tokens_per_s": tps}
    if backend == "vllm":
        metrics.update(vllm_version="0.26.0", vllm_attention_backend="FLASH_ATTN", flashinfer_present=False,
                       flashinfer_sampler=False)
    return {"scenario": "generate", "backend": backend, "model": model, "status": "ok", "config": {**base, **config},
            "metrics": metrics, "env": {"gpu": "NVIDIA H100"}, "headline_metric": "output_tokens_per_s",
            "workload_knobs": list(base)}


def test_the_report_shows_case_inferlab_vllm_and_the_ratio_from_rows(tmp_path):
    from inferlab.bench.report import write_report

    rows = [_row("inferlab", "llama-380m", 90000.0), _row("vllm", "llama-380m", 30000.0),
            _row("hf-continuous", "llama-380m", 9000.0),
            _row("inferlab", "llama-380m", 18000.0, batch_size=16, num_prompts=16),
            {**_row("vllm", "llama-380m", 0.0, batch_size=16, num_prompts=16), "status": "unavailable",
             "message": "backend vllm (generate) needs the vllm package"}]
    text = write_report(["run"], rows, tmp_path).read_text()
    section = text.split("## The engine beside its peers", 1)[1]
    assert "| llama-380m, batch 256, 1000 new, top-p 0.9 | 90,000 | 30,000 | 3.00x |" in section
    assert "vLLM 0.26.0, FLASH_ATTN, without FlashInfer" in section and "| 9,000 | 10.00x |" in section
    assert "unavailable: backend vllm (generate) needs the vllm package" in section


def test_hf_continuous_never_ends_a_row_early(tiny_checkpoint, tmp_path):
    """EOS made the greedy first token: suppressed, every row still has exactly new_tokens and no EOS;
    the negative control (suppression off) ends at once."""
    import json
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from inferlab.bench.backends.base import GenerateSpec
    from inferlab.bench.backends.hf_continuous import HFContinuousBackend, KNOBS

    source = tiny_checkpoint()
    prompts = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    with torch.no_grad():
        first = AutoModelForCausalLM.from_pretrained(str(source)).eval()(prompts).logits[0, -1].argmax().item()
    path = tmp_path / "eos-first"
    shutil.copytree(source, path)
    config = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps({**config, "eos_token_id": first}))
    knobs = {k.name: k.default for k in KNOBS} | {"batch_size": 2, "prompt_tokens": 4, "block_size": 16}
    spec = GenerateSpec(new_tokens=5, do_sample=False, temperature=1.0, top_p=1.0, top_k=0, seed=0)
    backend = HFContinuousBackend(knobs, spec)
    backend.load(path, torch.device("cpu"), torch.float32)
    assert backend.eos_token_ids == {first}
    rows = backend.generate(prompts)
    assert [len(r) for r in rows] == [5, 5] and all(first not in r for r in rows)
    backend.model.destroy_cached_continuous_batching_manager()
    backend.generation_config.suppress_tokens = None  # negative control
    assert backend.generate(prompts)[0][0] == first
