"""The packed prefill on CUDA: the varlen attention kernels (Triton, FlashAttention varlen) and the FP8
weights' matmul against their references in bf16, and the encoder against transformers.

Deselected by default (marker gpu). Run on the device: `python -m pytest -q -m gpu tests/gpu/test_packed_gpu.py`
(~1 min on an H100, most of it Triton compiles). The lab's seed-classify / seed-hidden-states presets measure
the speed.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
CUDA = torch.device("cuda")


def _packed_qkv(lengths, heads, kv_heads, head_dim, dtype=torch.bfloat16):
    from inferlab.engine.packed.batch import on_device, pack_rows

    g = torch.Generator(device=CUDA).manual_seed(0)
    qkv = torch.randn(sum(lengths), (heads + 2 * kv_heads) * head_dim, generator=g, device=CUDA, dtype=dtype)
    parts = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=1)
    q, k, v = (p.view(sum(lengths), -1, head_dim) for p in parts)
    return q, k, v, on_device(pack_rows([[0] * n for n in lengths], pin=True), CUDA)


@pytest.mark.parametrize("heads, kv_heads, head_dim", [(14, 2, 64), (16, 8, 128), (8, 1, 256)])
@pytest.mark.parametrize("window, softcap", [(0, None), (100, None), (0, 50.0), (4096, 30.0)])
@pytest.mark.parametrize("impl", ["triton", "triton-alt", "flash"])
def test_varlen_attention_kernels_match_the_reference_in_bf16(heads, kv_heads, head_dim, window, softcap, impl):
    from inferlab.engine.packed.attention import IMPLS, varlen_attention_torch

    if impl == "flash" and softcap is not None:
        pytest.skip("FlashAttention has no soft-cap (the encoder never asks it for one)")
    lengths = [1, 3000, 131, 5557, 640, 2]
    q, k, v, batch = _packed_qkv(lengths, heads, kv_heads, head_dim)
    scale = head_dim**-0.5
    got = IMPLS[impl](q, k, v, batch, scale, window, softcap).float()
    want = varlen_attention_torch(q, k, v, batch, scale, window, softcap).float()
    assert (got - want).abs().max().item() < 2e-2  # bf16 outputs of |x| < ~3: a few ulps


@pytest.mark.parametrize("hidden, inter, activation", [(896, 4864, "silu"), (1024, 3072, "silu"), (2048, 16384, "gelu_tanh")])
def test_wide_gated_gemm_matches_cublas_and_act_mul_in_bf16(hidden, inter, activation):
    """Each tile of the packed prefill's fused gate_up (Qwen2-0.5B's, Qwen3-0.6B's and Gemma-2B's MLP shapes)
    against cuBLAS gate_up + act_mul at 4,099 rows (a short last row tile); the start-up's choice and its
    timings (pytest -s prints them)."""
    from inferlab.engine import torch_ops
    from inferlab.engine.gemm_plan import GemmPlan
    from inferlab.engine.kernels.triton_gemm_wide import CANDIDATES, wide_gated_linear
    from inferlab.engine.packed import wide_mlp

    g = torch.Generator(device=CUDA).manual_seed(0)
    gate_up = torch.randn(2 * inter, hidden, generator=g, device=CUDA, dtype=torch.bfloat16) * hidden**-0.5
    down = torch.randn(hidden, inter, generator=g, device=CUDA, dtype=torch.bfloat16) * inter**-0.5
    h = torch.randn(4099, hidden, generator=g, device=CUDA, dtype=torch.bfloat16)
    act_mul = torch_ops.silu_mul if activation == "silu" else torch_ops.gelu_tanh_mul
    want = act_mul(torch.nn.functional.linear(h, gate_up)).float()
    for config in CANDIDATES:
        got = wide_gated_linear(h, gate_up, config, activation).float()
        error = (got - want).abs().max().item()
        assert error <= 2 * 2**-8 * want.abs().max().item(), (str(config), error)  # two bf16 ulps of the largest

    class Layer:
        pass

    layer = Layer()
    layer.gate_up, layer.down = gate_up, down
    plan, chosen, timings = wide_mlp.choose(GemmPlan(act_mul, activation=activation), layer, hidden, torch.bfloat16,
                                            CUDA, tokens=16384)
    print(f"MLP {hidden}x{inter} at 16384 tokens: {chosen} {timings}")
    assert set(timings) == {"cublas", *map(str, CANDIDATES)} and chosen in timings


def test_row_quantization_kernel_stores_the_reference_values_on_cuda():
    from inferlab.engine import kv_quant
    from inferlab.engine.kernels.triton_fp8_rows import quantize_rows

    x = torch.randn(300, 4864, device=CUDA, dtype=torch.bfloat16) * 3
    q, scale = quantize_rows(x)
    ref_q, ref_scale = kv_quant.quantize(x)
    # equal values; the bytes may differ in the sign of a zero (a tiny negative that underflows)
    assert torch.equal(scale, ref_scale) and torch.equal(q.float(), ref_q.float())


@pytest.mark.parametrize("rows, inner, outer", [(7, 896, 1152), (4096, 896, 9728), (333, 4864, 896)])
def test_fp8_scaled_mm_equals_the_fp8_reference(rows, inner, outer):
    from inferlab.engine.packed.fp8_weights import Fp8Weight, fp8_linear, fp8_linear_reference

    g = torch.Generator(device=CUDA).manual_seed(1)
    w = Fp8Weight.quantize(torch.randn(outer, inner, generator=g, device=CUDA) * 0.05)
    x = torch.randn(rows, inner, generator=g, device=CUDA).bfloat16()
    got = fp8_linear(x, w).float()
    want = fp8_linear_reference(x, w).float()  # the same quantized operands, multiplied in fp32
    assert ((got - want).abs() / want.abs().max()).max().item() < 1e-2
    exact = x.float() @ (w.values.float() * w.scale[:, None]).t()
    assert ((got - exact).abs().max() / exact.abs().max()).item() < 0.1  # activation quantization's error


@pytest.mark.parametrize("preset", ["tiny-qwen2", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3"])
def test_encoder_on_cuda_agrees_with_itself_row_by_row_and_with_transformers(tiny_classifier, preset):
    import transformers

    from inferlab.engine import Encoder, EncoderConfig

    path = tiny_classifier(preset)
    g = torch.Generator().manual_seed(2)
    rows = [torch.randint(4, 512, (n,), generator=g).tolist() for n in (1, 17, 300, 511, 64)]
    encoder = Encoder(EncoderConfig(path, dtype="bfloat16", max_batch_tokens=2048))
    assert encoder.stats.attention, "the warm-up chose the attention implementations"
    packed = encoder.classify(encoder.pack(rows))
    hf = {dtype: transformers.AutoModelForSequenceClassification.from_pretrained(
        path, dtype=dtype, attn_implementation="eager").to(CUDA).eval() for dtype in (torch.bfloat16, torch.float32)}
    for row, got in zip(rows, packed):
        alone = encoder.classify(encoder.pack([row]))[0]
        with torch.no_grad():
            want, exact = (hf[d](input_ids=torch.tensor([row], device=CUDA)).logits[0].float().cpu() for d in hf)
        spread = want.abs().max().item()
        assert (got - alone).abs().max().item() <= 0.02 * spread
        # bf16 through every layer: as close to fp32 as transformers' own bf16 is (or within 2% of the spread)
        hf_error = (want - exact).abs().max().item()
        assert (got - exact).abs().max().item() <= max(2 * hf_error, 0.02 * spread), (got, want, exact)
    fp8 = Encoder(EncoderConfig(path, dtype="bfloat16", weights="fp8", max_batch_tokens=2048))
    agree = (fp8.classify(fp8.pack(rows)).argmax(1) == packed.argmax(1)).float().mean().item()
    assert agree >= 0.6
    encoder.close()
    fp8.close()


def test_hidden_states_on_cuda_match_transformers(tiny_classifier):
    import transformers

    from inferlab.engine import Encoder, EncoderConfig

    path = tiny_classifier("tiny")
    rows = [list(range(5, 5 + n)) for n in (3, 200, 77)]
    encoder = Encoder(EncoderConfig(path, task="hidden-states", dtype="bfloat16"))
    got = encoder.hidden_states(encoder.pack(rows), (1, 2), "mean")
    hf = transformers.AutoModel.from_pretrained(path, dtype=torch.bfloat16).to(CUDA).eval()
    for r, row in enumerate(rows):
        with torch.no_grad():
            states = hf(input_ids=torch.tensor([row], device=CUDA), output_hidden_states=True).hidden_states
        for layer in (1, 2):
            want = states[layer][0].float().mean(0).cpu()
            assert ((got[layer][r] - want).abs().max() / want.abs().max()).item() < 0.03
