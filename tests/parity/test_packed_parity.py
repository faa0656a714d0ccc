"""The engine's packed prefill (engine/packed) against transformers on tiny random classifiers of every family
the engine runs: a packed batch equals each row run alone, and equals transformers' logits and hidden states
(float32 on CPU, so to float rounding). Rows are longer than the Gemma 2/3 windows (8, 12), so windows and
soft-caps are exercised."""

from __future__ import annotations

import pytest
import torch
import transformers

from inferlab.engine import Encoder, EncoderConfig

PRESETS = ["tiny", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-gemma", "tiny-gemma2", "tiny-gemma3"]
ROWS = [[7], [11, 12, 13, 14, 15, 16, 17], list(range(40, 63)), list(range(100, 140)), [9, 8, 3, 3]]  # 3: the pad id


def hf_model(path, auto=transformers.AutoModelForSequenceClassification):
    return auto.from_pretrained(path, attn_implementation="eager").eval()


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_a_packed_batch_equals_each_row_alone_and_transformers(tiny_classifier, preset):
    path = tiny_classifier(preset)
    encoder = Encoder(EncoderConfig(path, device="cpu", dtype="float32"))
    packed = encoder.classify(encoder.pack(ROWS))
    assert packed.shape == (len(ROWS), 3)
    hf = hf_model(path)
    for row, got in zip(ROWS, packed):
        alone = encoder.classify(encoder.pack([row]))[0]
        torch.testing.assert_close(got, alone, atol=1e-6, rtol=1e-5)
        with torch.no_grad():  # the last row ends in pad ids: both read its last non-pad token
            want = hf(input_ids=torch.tensor([row])).logits[0]
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("preset", ["tiny-qwen2", "tiny-gemma2", "tiny-gemma3"])
def test_hidden_states_equal_transformers(tiny_classifier, preset):
    path = tiny_classifier(preset)
    encoder = Encoder(EncoderConfig(path, task="hidden-states", device="cpu", dtype="float32"))
    layers = (0, 1, encoder.spec.num_layers)
    rows = ROWS[:4]
    hf = hf_model(path, transformers.AutoModel)
    with torch.no_grad():
        states = [hf(input_ids=torch.tensor([row]), output_hidden_states=True).hidden_states for row in rows]
    for pool in ("last", "mean", "all"):
        got = encoder.hidden_states(encoder.pack(rows), layers, pool)
        for r in range(len(rows)):
            for layer in layers:
                want = states[r][layer][0]  # [n, hidden]
                want = {"last": want[-1], "mean": want.mean(0), "all": want}[pool]
                torch.testing.assert_close(got[layer][r], want, atol=2e-5, rtol=1e-4)


def test_hidden_states_stop_after_the_deepest_layer_asked_for(tiny_classifier):
    path = tiny_classifier("tiny-gemma3")  # 6 layers
    encoder = Encoder(EncoderConfig(path, task="hidden-states", device="cpu", dtype="float32"))
    batch = encoder.pack(ROWS[:3])
    calls = []
    original = encoder.forward.model._layers
    encoder.forward.model._layers = lambda *a: calls.append(a[3]) or original(*a)
    early = encoder.hidden_states(batch, (2,), "mean")
    full = encoder.hidden_states(batch, (2, 6), "mean")
    assert calls == [2, None]  # layer 2 alone runs two decoder layers; 6 (the final output) runs all
    torch.testing.assert_close(early[2], full[2])
