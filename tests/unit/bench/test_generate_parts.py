"""The generate scenario's parts: token counting, bytes per decode step, prompts, the Python processor
and the HF backend on a tiny random checkpoint (CPU)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

import pytest

from inferlab.bench.backends import GenerateSpec, get_backend
from inferlab.bench.backends.hf_generate_options import generate_options, stop_at
from inferlab.bench.backends.python_logits_processor import SeedStylePythonProcessor
from inferlab.bench.scenarios.decode_traffic import ModelTraffic, count_generated
from inferlab.bench.scenarios.generate import make_prompts
from inferlab.errors import UnsupportedError
from inferlab.types import Request, SamplingParams

HF_DEFAULTS = {"attn_implementation": "sdpa", "sdpa_backend": "auto", "kv_cache": "dynamic", "compile": False,
               "compile_backend": "inductor", "processor": "none"}


def test_count_generated_stops_at_the_first_eos_and_ignores_padding():
    out = torch.tensor([[5, 6, 9, 0, 0], [1, 2, 3, 4, 5], [9, 9, 9, 9, 9]])
    assert count_generated(out, frozenset({9})) == [3, 5, 1]
    assert count_generated([[1, 9], [2]], frozenset({9, 7})) == [2, 1]


@pytest.mark.parametrize("preset", ["tiny", "tiny-llama3-rope"])
def test_model_traffic_matches_the_loaded_model(tiny_checkpoint, preset):
    path = tiny_checkpoint(preset)
    model = AutoModelForCausalLM.from_pretrained(path)
    params = {id(p): p for p in model.parameters()}  # tied weights appear once
    expected = sum(p.numel() for p in params.values())
    if not model.config.tie_word_embeddings:
        expected -= model.get_input_embeddings().weight.numel()  # untied: a lookup, not a read of the table
    traffic = ModelTraffic.from_checkpoint(path, "bfloat16")
    assert traffic.weight_bytes == expected * 2
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    assert traffic.kv_bytes_per_position == c.num_hidden_layers * 2 * c.num_key_value_heads * head_dim * 2
    # prompt 3; rows of 4 and 2 tokens: 3 decode steps; live positions (3+1)+(3+2)+(3+3) + (3+1)
    assert traffic.decode_bytes(3, [4, 2]) == 3 * traffic.weight_bytes + 19 * traffic.kv_bytes_per_position
    assert traffic.decode_bytes(3, [1, 1]) == 0


def test_prompts_are_seeded_exact_length_and_avoid_special_tokens(tiny_checkpoint):
    path = tiny_checkpoint()
    tok = AutoTokenizer.from_pretrained(path)
    a = make_prompts(path, 6, 10, seed=1)
    assert a.shape == (6, 10) and a.dtype == torch.long
    assert torch.equal(a, make_prompts(path, 6, 10, seed=1)) and not torch.equal(a, make_prompts(path, 6, 10, seed=2))
    assert not set(a.flatten().tolist()) & set(tok.all_special_ids)
    assert int(a.max()) < len(tok)


def test_the_python_processor_masks_per_row_and_never_ends_rows_early(tiny_checkpoint):
    path = tiny_checkpoint()
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    eos = model.generation_config.eos_token_id
    processor = SeedStylePythonProcessor(model.config.vocab_size, frozenset([eos]), seed=3, template_len=5)
    prompts = make_prompts(path, 3, 4, seed=0)
    out = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=12, min_new_tokens=12,
                         do_sample=True, logits_processor=LogitsProcessorList([processor]), pad_token_id=eos)
    generated = out[:, 4:]
    assert generated.shape == (3, 12) and count_generated(generated, frozenset([eos])) == [12, 12, 12]
    for r, state in enumerate(processor.rows):
        assert state.position == 12
        for t, token in enumerate(generated[r].tolist()):
            assert token in state.template[t % 5].tolist(), (r, t)
    assert processor.rows[0].template[0].tolist() != processor.rows[1].template[0].tolist() or \
        processor.rows[0].template[1].tolist() != processor.rows[1].template[1].tolist()  # per-row templates


def _backend(path, **knobs):
    backend = get_backend("hf").create({**HF_DEFAULTS, **knobs}, GenerateSpec(new_tokens=6, seed=0))
    backend.load(path, torch.device("cpu"), torch.float32)
    return backend


def _requests(prompts, sampling=SamplingParams(top_p=0.9, max_new_tokens=6, min_new_tokens=6)):
    return [Request(id=str(i), prompt_ids=tuple(row), sampling=sampling) for i, row in enumerate(prompts.tolist())]


def test_hf_backend_generates_exact_lengths_and_stops_early_for_profiling(tiny_checkpoint):
    path = tiny_checkpoint()
    prompts = make_prompts(path, 2, 5, seed=0)
    for knobs in ({}, {"kv_cache": "static"}, {"processor": "python"}, {"attn_implementation": "eager"},
                  {"sdpa_backend": "math"}):
        backend = _backend(path, **knobs)
        out = list(backend.generate(_requests(prompts)))
        assert [len(r.token_ids) for r in out] == [6, 6] and all(r.ok for r in out), knobs
        assert [len(r.token_ids) for r in backend.generate(_requests(prompts), stop_after_steps=2)] == [2, 2]
        extra = backend.extra_metrics()
        assert extra["compile_observed"] is False and extra["attention_kernel_requested"]


def test_generate_options_say_each_knob_to_transformers():
    class WithDisable:  # a generation config of a transformers that has disable_compile
        disable_compile = False

    greedy, sampled = SamplingParams(temperature=0.0), SamplingParams(temperature=0.7, top_p=0.9, top_k=5)
    assert generate_options(greedy) == {"do_sample": False}
    assert generate_options(sampled) == {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 5}
    static = generate_options(greedy, "static", compile=False, generation_config=WithDisable())
    assert static == {"do_sample": False, "cache_implementation": "static", "disable_compile": True}
    assert "disable_compile" not in generate_options(greedy, "static", compile=False, generation_config=object())
    assert "disable_compile" not in generate_options(greedy, "static", compile=None, generation_config=WithDisable())
    assert generate_options(greedy, "static", True, compile_config="cfg")["compile_config"] == "cfg"
    (stop,) = stop_at(4)
    assert stop(torch.zeros(2, 3, dtype=torch.long), None).tolist() == [False, False]
    assert stop(torch.zeros(2, 4, dtype=torch.long), None).tolist() == [True, True]


def test_a_batch_backend_turns_what_one_call_cannot_run_into_error_results(tiny_checkpoint):
    """Requests asking for a constraint, another sampling or another prompt length than the call's first are
    error Results; the others run."""
    path = tiny_checkpoint()
    backend = _backend(path)
    ok = _requests(make_prompts(path, 2, 5, seed=0))
    odd = [Request("constrained", prompt_ids=(1, 2, 3, 4, 5), sampling=ok[0].sampling, constraint=object()),
           Request("greedy", prompt_ids=(1, 2, 3, 4, 5), sampling=SamplingParams(temperature=0.0)),
           Request("short", prompt_ids=(1, 2), sampling=ok[0].sampling)]
    results = {r.id: r for r in backend.generate(ok + odd)}
    assert all(results[r.id].ok and len(results[r.id].token_ids) == 6 for r in ok)
    assert "constrained requests do not run on backend hf" in results["constrained"].error
    assert "one sampling setting" in results["greedy"].error and "one length" in results["short"].error


def test_hf_backend_says_what_it_cannot_do(tiny_checkpoint):
    path = tiny_checkpoint()
    with pytest.raises(UnsupportedError, match="flash-attn"):
        _backend(path, attn_implementation="flash_attention_2")
