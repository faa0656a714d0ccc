"""The transformers-backed workloads on the device: hidden-state collection through files, and the OOM
back-off of hidden states and of HF generation.

- Hidden states: `collect_hidden_states` from a prompts file into a safetensors file (shards, assembly):
  every input row indexed exactly once, the file's rows in input order. Quick (and its CPU case): tiny, 32
  prompts; full: llama-380m, 512 prompts of 100-1,000 tokens.
- OOM back-off: a batch far too large for the memory there is must end with every row written exactly
  once after at least one real CUDA out-of-memory. Quick: tiny with 2,048 rows in one batch under a
  128 MiB cap on PyTorch's allocator (torch.cuda.set_per_process_memory_fraction); full: the gemma-2b
  shape with batch 4,096 at up to 1,024 tokens on the whole card.
Their throughput: the lab's seed-classify and seed-hidden-states presets (docs/lab.md); on CPU the back-off
is tests/unit/workloads/test_oom_backoff.py (a simulated OOM).
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import torch
from gpu_testkit import CPU_AND_CUDA, cuda_only, free_device_memory

QUICK_CAP_BYTES = 128 * 1024**2


def write_prompts(path, texts: list[str]):
    path.write_text("".join(json.dumps({"id": f"p{i:05d}", "prompt": t}) + "\n" for i, t in enumerate(texts)))
    return path


def input_ids(path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


def hidden_rows(target, source) -> tuple[bool, bool]:
    """(every input id indexed exactly once, the file's rows = the ok rows in input order)."""
    from safetensors import safe_open

    expected = input_ids(source)
    index = [json.loads(line) for line in target.with_name(target.name + ".d").joinpath("index.jsonl").open()]
    indexed = [r["id"] for r in index]
    with safe_open(str(target), framework="pt") as f:
        stored = json.loads(f.metadata()["ids"])
    ok = {r["id"] for r in index if r["status"] == "ok"}
    return len(indexed) == len(set(indexed)) and set(indexed) == set(expected), stored == [i for i in expected if i in ok]


@contextmanager
def allocator_cap(size, cap_bytes: int):
    """Quick size: PyTorch's caching allocator may hold at most `cap_bytes` more than it holds now (a real
    CUDA OOM past that); full size: the whole card."""
    if size.full:
        yield
        return
    free_device_memory()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, (torch.cuda.memory_reserved() + cap_bytes) / total))
    try:
        yield
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        free_device_memory()


@CPU_AND_CUDA
def test_hidden_states_through_files_write_each_row_once_in_order(device, size, checkpoint, tmp_path):
    from inferlab.workloads.hf_loading import ModelLoadConfig
    from inferlab.workloads.hidden_states import HiddenStatesOptions, collect_hidden_states, load_base_model
    from inferlab.workloads.measure import synthetic_texts

    preset, prompts, tokens, layers, batch = size.on(device).pick(("tiny", 32, (8, 100), (1, 2), 16),
                                                                  ("llama-380m", 512, (100, 1000), (4, 8, 16), 64))
    loaded = load_base_model(ModelLoadConfig(str(checkpoint(preset, device)), device=device))
    source = write_prompts(tmp_path / "prompts.jsonl", synthetic_texts(loaded.tokenizer, prompts, *tokens, seed=1))
    target = tmp_path / "acts.safetensors"
    collect_hidden_states(loaded, source, target, HiddenStatesOptions(layers=layers, pool="mean", batch_size=batch))
    assert hidden_rows(target, source) == (True, True)


@cuda_only
def test_hidden_states_back_off_from_oom_and_write_each_row_once(size, checkpoint, tmp_path):
    from inferlab.workloads.hf_loading import ModelLoadConfig
    from inferlab.workloads.hidden_states import HiddenStatesOptions, collect_hidden_states, load_base_model
    from inferlab.workloads.measure import synthetic_texts

    preset, prompts, tokens, max_length, layers = size.pick(("tiny", 2048, (64, 128), 128, (1,)),
                                                            ("gemma-2b", 4096, (512, 1024), 1024, (6,)))
    loaded = load_base_model(ModelLoadConfig(str(checkpoint(preset)), device="cuda"))
    source = write_prompts(tmp_path / "prompts.jsonl", synthetic_texts(loaded.tokenizer, prompts, *tokens, seed=2))
    target = tmp_path / "acts.safetensors"
    options = HiddenStatesOptions(layers=layers, pool="mean", batch_size=prompts, max_batch_tokens=None,
                                  max_length=max_length, shard_rows=prompts)
    with allocator_cap(size, QUICK_CAP_BYTES):
        report = collect_hidden_states(loaded, source, target, options)
    assert report.backoff.oom_events > 0, "the batch fitted: no back-off was exercised"
    assert hidden_rows(target, source) == (True, True)


@cuda_only
def test_hf_generation_backs_off_from_oom_and_writes_each_row_once(size, checkpoint, tmp_path):
    from transformers import AutoModelForCausalLM

    from inferlab.jsonl_io import ResumableJsonlWriter, read_jsonl_records
    from inferlab.types import SamplingParams
    from inferlab.workloads.hf_loading import ModelLoadConfig, load_hf_model
    from inferlab.workloads.hf_text import HFTextOptions, run_hf_generation
    from inferlab.workloads.measure import synthetic_texts

    preset, prompts, tokens, new_tokens = size.pick(("tiny", 2048, (64, 128), 8), ("gemma-2b", 2048, (512, 1024), 8))
    loaded = load_hf_model(ModelLoadConfig(str(checkpoint(preset)), device="cuda"), AutoModelForCausalLM)
    source = write_prompts(tmp_path / "prompts.jsonl", synthetic_texts(loaded.tokenizer, prompts, *tokens, seed=3))
    out = tmp_path / "out.jsonl"
    options = HFTextOptions(batch_size=4096, max_batch_tokens=None, chunk_rows=prompts)
    with allocator_cap(size, QUICK_CAP_BYTES), ResumableJsonlWriter(out) as writer:
        summary = run_hf_generation(loaded, read_jsonl_records(source), SamplingParams(temperature=0.0,
                                    max_new_tokens=new_tokens), writer, options)  # fmt: skip
    written = input_ids(out)
    assert summary.backoff.oom_events > 0, "the batch fitted: no back-off was exercised"
    assert len(written) == len(set(written)) and set(written) == set(input_ids(source))
