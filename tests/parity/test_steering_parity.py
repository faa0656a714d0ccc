"""Steering and collected activations against transformers + forward hooks on tiny random checkpoints
(CPU, fp32), parametrised by preset: the Llama family (tiny, tiny-qwen3) and the Gemma family (tiny-gemma,
tiny-gemma2 and tiny-gemma3: (1 + w) norms, post-norms, windows shorter than the sequences, soft-caps).

Steering: each request's greedy tokens equal `transformers.generate` on that prompt alone with a forward
hook on `model.model.layers[L]` adding `scale * vector` to the layer's output, for several layers and
scales, steered and unsteered requests in one batch, more requests than slots (rows refilled mid-run).
Activations: the engine's collected hidden states equal a transformers forward over prompt + generated
tokens (same steering hooks) read at the positions that produced each generated token, pooled last /
mean / all, within fp32 tolerance.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from inferlab.engine import Engine, EngineConfig, SteeringVectors
from inferlab.types import Collect, Request, SamplingParams, Steer
from inferlab.workloads.hf_loading import from_pretrained_for_inference

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
PRESETS = ["tiny", "tiny-qwen3", "tiny-gemma", "tiny-gemma2", "tiny-gemma3"]
NEW_TOKENS = 10
ACT_ATOL = 1e-4


@pytest.fixture(scope="module")
def models(parity_checkpoint):
    cache = {}

    def get(preset: str):
        if preset not in cache:
            path = parity_checkpoint(preset)  # Gemma presets: random (1 + w) norm weights
            engine = Engine(EngineConfig(model=path, max_slots=2, max_seq_len=64, decode_steps_per_sync=3))
            # transformers' default attention; eager for Gemma 2 on every version (SDPA drops its soft-cap)
            hf = from_pretrained_for_inference(AutoModelForCausalLM, path, torch.float32, None, torch.device("cpu"))
            cache[preset] = (engine, hf)
        return cache[preset]

    return get


def _decoder_layers(hf) -> torch.nn.ModuleList:
    return hf.model.layers


def _add_hooks(hf, steering: list[tuple[int, torch.Tensor, float]]) -> list:
    """A careful user's steering: a forward hook on each layer adding scale * vector to its output."""
    handles = []
    for layer, vector, scale in steering:
        def hook(module, args, output, vector=vector, scale=scale):
            if isinstance(output, tuple):
                return (output[0] + scale * vector.to(output[0].dtype),) + output[1:]
            return output + scale * vector.to(output.dtype)

        handles.append(_decoder_layers(hf)[layer].register_forward_hook(hook))
    return handles


def _hf_steered_greedy(hf, prompt: list[int], steering, new_tokens: int, eos: list[int]) -> list[int]:
    handles = _add_hooks(hf, steering)
    try:
        out = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                          do_sample=False, max_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=0)
    finally:
        for h in handles:
            h.remove()
    return out[0, len(prompt):].tolist()


def _hf_hidden(hf, sequence: list[int], steering, layers) -> dict[int, torch.Tensor]:
    """{layer: [len(sequence), hidden]}: each decoder layer's output over the whole sequence (after steering)."""
    captured = {}
    handles = _add_hooks(hf, steering)
    for layer in layers:  # registered after the steering hooks: they see the steered output
        def grab(module, args, output, layer=layer):
            captured[layer] = (output[0] if isinstance(output, tuple) else output)[0].detach().clone()

        handles.append(_decoder_layers(hf)[layer].register_forward_hook(grab))
    try:
        with torch.inference_mode():
            hf(torch.tensor([sequence]))
    finally:
        for h in handles:
            h.remove()
    return captured


def _prompts(vocab: int, lengths=(3, 9, 1, 14, 6, 5)) -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(0, min(vocab, 1300), (n,), generator=g).tolist() for n in lengths]


def _vectors(hidden: int, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randn(hidden, generator=g) for _ in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_steered_greedy_tokens_match_transformers_with_hooks(models, preset):
    engine, hf = models(preset)
    spec = engine.spec
    last = spec.num_layers - 1
    v = _vectors(spec.hidden_size, 3)
    # several layers and scales, negative layer numbers, unsteered requests between steered ones
    plans = [
        [(0, v[0], 0.7)],
        [],
        [(last, v[1], -0.5)],
        [(0, v[2], 0.3), (-1, v[0], 1.2)],
        [],
        [(0, v[0], 0.7)],  # the same vector as the first request: one table slot, shared
    ]
    prompts = _prompts(spec.vocab_size)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS)
    requests = [Request(id=str(i), prompt_ids=tuple(p), sampling=greedy,
                        steering=tuple(Steer(layer, vec, scale) for layer, vec, scale in plan))
                for i, (p, plan) in enumerate(zip(prompts, plans))]
    results = engine.generate(requests)
    eos = list(spec.eos_token_ids)
    changed = 0
    for prompt, plan, result in zip(prompts, plans, results):
        assert result.ok, result.error
        hooks = [(layer % spec.num_layers, vec, scale) for layer, vec, scale in plan]
        assert result.token_ids == _hf_steered_greedy(hf, prompt, hooks, NEW_TOKENS, eos), (preset, plan)
        if plan:
            changed += result.token_ids != _hf_steered_greedy(hf, prompt, [], NEW_TOKENS, eos)
    assert changed >= 2  # the vectors are strong enough to change the output: the check can fail


@pytest.mark.parametrize("preset", PRESETS)
def test_collected_activations_equal_transformers_hidden_states(models, preset):
    engine, hf = models(preset)
    spec = engine.spec
    last = spec.num_layers - 1
    v = _vectors(spec.hidden_size, 2)
    cases = [  # (steering, collect)
        ([], Collect((0, last), "mean")),
        ([(0, v[0], 0.6)], Collect((0,), "all")),
        ([], None),
        ([(last, v[1], 0.9)], Collect((-1, 0), "last")),
        ([(0, v[1], -0.4)], Collect((last,), "all", max_tokens=4)),
    ]
    prompts = _prompts(spec.vocab_size, lengths=(4, 11, 2, 7, 5))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS)
    requests = [Request(id=str(i), prompt_ids=tuple(p), sampling=greedy,
                        steering=tuple(Steer(*s) for s in steering), collect=collect)
                for i, (p, (steering, collect)) in enumerate(zip(prompts, cases))]
    results = engine.generate(requests)
    for prompt, (steering, collect), result in zip(prompts, cases, results):
        assert result.ok, result.error
        if collect is None:
            assert result.activations is None
            continue
        n = len(result.token_ids)
        layers = [layer % spec.num_layers for layer in collect.layers]
        assert list(result.activations) == layers  # the request's order, non-negative numbers
        hidden = _hf_hidden(hf, prompt + result.token_ids[:-1], steering, layers)
        for layer in layers:
            produced = hidden[layer][len(prompt) - 1 : len(prompt) - 1 + n]  # [n, hidden]: the steps that produced each token
            expected = {"last": produced[-1], "mean": produced.mean(0), "all": produced[: collect.max_tokens or n]}
            got = result.activations[layer]
            assert got.dtype == torch.float32
            torch.testing.assert_close(got, expected[collect.pool], atol=ACT_ATOL, rtol=0)


@pytest.mark.parametrize("preset", PRESETS[:1])
def test_named_vector_sets_steer_like_inline_vectors(models, preset, tmp_path):
    """A safetensors file of [hidden] and [layers, hidden] entries, registered once, named by requests."""
    from safetensors.torch import save_file

    engine, hf = models(preset)
    spec = engine.spec
    v = _vectors(spec.hidden_size, 1)[0]
    per_layer = torch.stack(_vectors(spec.hidden_size, spec.num_layers))  # [layers, hidden]
    save_file({"plain": v, "per_layer": per_layer}, str(tmp_path / "vectors.safetensors"))
    engine.add_steering_vectors(SteeringVectors.load(tmp_path / "vectors.safetensors"))
    prompt = _prompts(spec.vocab_size)[1]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS)
    named = [Request(id="n", prompt_ids=tuple(prompt), sampling=greedy,
                     steering=(Steer(0, "plain", 0.8), Steer(1, "per_layer", -0.6)))]
    inline = [Request(id="i", prompt_ids=tuple(prompt), sampling=greedy,
                      steering=((0, v, 0.8), (1, per_layer[1].tolist(), -0.6)))]
    by_name, by_value = engine.generate(named)[0], engine.generate(inline)[0]
    assert by_name.ok and by_value.ok
    expected = _hf_steered_greedy(hf, prompt, [(0, v, 0.8), (1, per_layer[1], -0.6)], NEW_TOKENS,
                                  list(spec.eos_token_ids))
    assert by_name.token_ids == by_value.token_ids == expected
