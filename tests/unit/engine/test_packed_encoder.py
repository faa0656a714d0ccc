"""The packed prefill's parts on CPU: the attention reference against one masked attention over the whole
packed sequence, packing, FLOP counting, FP8 weights, and the encoder's refusals."""

from __future__ import annotations

import pytest
import torch

from inferlab.engine import Encoder, EncoderConfig, encoder_support, pack_rows, prefill_flops
from inferlab.engine.packed.attention import PackedAttention, varlen_attention_torch
from inferlab.engine.packed.batch import on_device
from inferlab.engine.packed.flops import causal_pairs, projection_params
from inferlab.engine.packed.fp8_weights import Fp8Weight, fp8_linear, fp8_linear_reference
from inferlab.errors import ConfigError, EngineClosedError, InputError
from inferlab.models.config import read_model_spec

CPU = torch.device("cpu")


def masked_attention(q, k, v, lengths, scale, window, softcap):
    """One eager attention over all T packed tokens with a block-diagonal causal (windowed) mask."""
    tokens, heads, _ = q.shape
    k = k.repeat_interleave(heads // k.shape[1], dim=1)
    v = v.repeat_interleave(heads // v.shape[1], dim=1)
    row = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    pos = torch.arange(tokens)
    visible = (row[:, None] == row[None, :]) & (pos[None, :] <= pos[:, None])
    if window:
        visible &= pos[None, :] > pos[:, None] - window
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


@pytest.mark.parametrize("window, softcap", [(0, None), (5, None), (0, 3.0), (6, 2.0)])
def test_the_reference_never_attends_across_rows(window, softcap):
    lengths = [1, 9, 17, 4]
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(sum(lengths), (4 + 2 * 2) * 16, generator=g)
    q, k, v = (t.view(sum(lengths), -1, 16) for t in qkv.split([64, 32, 32], dim=1))  # strided views, as the forward
    batch = on_device(pack_rows([[0] * n for n in lengths]), CPU)
    got = varlen_attention_torch(q, k, v, batch, 0.25, window, softcap)
    torch.testing.assert_close(got, masked_attention(q, k, v, lengths, 0.25, window, softcap), atol=1e-5, rtol=1e-5)
    assert PackedAttention(CPU).candidates == ()  # CPU: only the reference


def test_packing_lays_rows_end_to_end_and_finds_the_last_non_pad_token():
    batch = pack_rows([[5, 6, 7], [8], [9, 0, 0], [0, 0]], pad_id=0)
    assert batch.tokens.tolist() == [5, 6, 7, 8, 9, 0, 0, 0, 0]
    assert batch.positions.tolist() == [0, 1, 2, 0, 0, 1, 2, 0, 1]
    assert batch.cu_seqlens.tolist() == [0, 3, 4, 7, 9] and batch.cu_seqlens.dtype == torch.int32
    assert batch.pooled.tolist() == [2, 3, 4, 7]  # a row of pads only reads its first token, as transformers
    assert pack_rows([[5, 0]]).pooled.tolist() == [1]  # no pad id: the last token
    device = on_device(batch, CPU)
    assert device.row_of_token.tolist() == [0, 0, 0, 1, 2, 2, 2, 3, 3]
    with pytest.raises(ValueError, match="at least one token"):
        pack_rows([[1], []])


def test_flops_count_projections_and_each_rows_causal_pairs(tiny_classifier):
    assert causal_pairs(4) == 10 and causal_pairs(4, window=2) == 1 + 2 + 2 + 2 and causal_pairs(3, window=8) == 6
    spec = read_model_spec(tiny_classifier("tiny-qwen2"))  # hidden 64, 4 heads x 16, 2 kv heads, inter 128, 2 layers
    per_token = 2 * 2 * (64 * (2 * 64 + 2 * 32) + 3 * 64 * 128)
    assert prefill_flops(spec, [3, 5]) == 8 * per_token + 2 * 4 * 4 * 16 * (6 + 15)
    gemma2 = read_model_spec(tiny_classifier("tiny-gemma2"))  # window 8 on layers 0 and 2
    attention = prefill_flops(gemma2, [20]) - 2 * 20 * 3 * projection_params(gemma2)
    assert attention == 4 * gemma2.num_heads * 32 * (2 * causal_pairs(20, 8) + causal_pairs(20))


def test_fp8_weights_quantize_per_output_channel_and_multiply_as_the_reference():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(32, 48, generator=g) * torch.logspace(-2, 1, 32)[:, None]  # rows of very different scales
    x = torch.randn(5, 48, generator=g)
    fp8 = Fp8Weight.quantize(w)
    assert fp8.values.dtype == torch.float8_e4m3fn and fp8.scale.shape == (32,)
    torch.testing.assert_close(fp8.scale, w.abs().amax(1) / 448)
    dequantized = fp8.values.float() * fp8.scale[:, None]
    assert ((dequantized - w).abs() <= w.abs() * 2**-4 + 1e-9).all()  # 3 mantissa bits per element
    out = fp8_linear(x, fp8)
    assert torch.equal(out, fp8_linear_reference(x, fp8))
    torch.testing.assert_close(out, x @ w.t(), rtol=0.1, atol=0.1 * (x @ w.t()).abs().max().item())


def test_fp8_weights_keep_a_classifiers_labels(tiny_classifier):
    path = tiny_classifier("tiny-qwen3")
    rows = [list(range(10 + i, 40 + 3 * i)) for i in range(8)]
    exact = Encoder(EncoderConfig(path, device="cpu", dtype="float32"))
    fp8 = Encoder(EncoderConfig(path, device="cpu", dtype="float32", weights="fp8"))
    assert fp8.stats.weights == "fp8"
    a, b = exact.classify(exact.pack(rows)), fp8.classify(fp8.pack(rows))
    assert not torch.equal(a, b)  # the weights really changed
    assert (a.argmax(1) == b.argmax(1)).float().mean() >= 0.75
    torch.testing.assert_close(b.softmax(1), a.softmax(1), atol=0.1, rtol=0)


def test_the_encoder_refuses_what_it_cannot_run(tiny_classifier, tiny_checkpoint):
    causal = tiny_checkpoint("tiny")
    with pytest.raises(InputError, match="without a sequence-classification head"):
        Encoder(EncoderConfig(causal, device="cpu"))
    assert "not a sequence classifier" in encoder_support(causal, "classify")
    assert encoder_support(causal, "hidden-states") is None
    assert encoder_support(tiny_classifier("tiny-gemma2"), "classify") is None
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        Encoder(EncoderConfig(causal, task="hidden-states", device="cpu", attention="triton"))
    with pytest.raises(ConfigError, match="weights='int8' is not one of"):
        EncoderConfig(causal, weights="int8")
    encoder = Encoder(EncoderConfig(causal, task="hidden-states", device="cpu"))
    with pytest.raises(ConfigError, match="task 'hidden-states'"):
        encoder.classify(encoder.pack([[1, 2]]))
    with pytest.raises(ConfigError, match="must lie in 0..2"):
        encoder.hidden_states(encoder.pack([[1, 2]]), (3,), "last")
    encoder.close()
    with pytest.raises(EngineClosedError):
        encoder.hidden_states(encoder.pack([[1, 2]]), (1,), "last")


def test_stats_count_batches_tokens_and_flops(tiny_classifier):
    encoder = Encoder(EncoderConfig(tiny_classifier("tiny"), device="cpu"))
    assert encoder.predict_s([10]) is None  # nothing timed yet
    encoder.classify(encoder.pack([[1, 2, 3], [4, 5]]))
    s = encoder.stats
    assert (s.batches, s.rows, s.tokens) == (1, 2, 5) and s.flops == encoder.flops([3, 2]) and s.device_s > 0
    assert encoder.predict_s([10, 10]) > encoder.predict_s([10]) > 0
