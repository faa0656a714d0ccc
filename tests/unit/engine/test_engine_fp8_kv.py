"""The FP8 KV cache (EngineConfig.kv_dtype="fp8") on CPU: the e4m3 rounding, the engine against the same
engine with the model-dtype cache on tiny random checkpoints (Llama and Gemma 2/3: windows, soft-caps,
(1 + w) q/k norms), constrained conformers, the memory plan, the refusal on GPUs without FP8. The Triton kernels' fp8 path is checked in triton_interpreter_cases.py."""

from __future__ import annotations

import pytest
import torch

from inferlab.engine import Engine, EngineConfig, kv_quant
from inferlab.engine.kv_cache import MemoryModel, kv_bytes_per_token, plan_memory
from inferlab.engine.startup import resolve_kv_dtype
from inferlab.errors import ConfigError, UnsupportedError
from inferlab.models.config import read_model_spec
from inferlab.models.presets import get_preset

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
GIB = 1024**3


def test_round_e4m3_is_torchs_round_to_nearest_even_cast():
    """Every finite e4m3 value, every midpoint between neighbours (ties to even), saturation, subnormals
    and random values over many binades: the fp32 arithmetic equals torch's own cast."""
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    grid = codes[~codes.isnan()].unique()
    g = torch.Generator().manual_seed(0)
    values = torch.cat(
        [grid, (grid[:-1] + grid[1:]) / 2, torch.tensor([449.0, 464.0, 465.0, -1e9, 1e-12, -0.0])]
        + [torch.randn(20_000, generator=g) * s for s in (1e-4, 1e-2, 1.0, 40.0)]
    )
    expected = values.clamp(-448, 448).to(torch.float8_e4m3fn).float()
    assert torch.equal(kv_quant.round_e4m3(values), expected)


def test_quantize_keeps_three_mantissa_bits_and_propagates_nan():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 4, 128, generator=g).bfloat16()
    q, scale = kv_quant.quantize(x)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (6, 4) and scale.dtype == torch.float32
    back, xf = kv_quant.dequantize(q, scale), x.float()
    # normal e4m3 range: <= half a step (2^-4 relative); below 2^-6 x scale: the subnormal step 2^-9 x scale
    assert ((back - xf).abs() <= torch.maximum(xf.abs() * 2**-4, scale[..., None] * 2**-10)).all()
    assert torch.equal(back.abs().amax(-1), xf.abs().amax(-1))  # each head's largest element is exact
    zeros, zero_scale = kv_quant.quantize(torch.zeros(2, 8))
    assert not zero_scale.any() and not zeros.float().any()
    x[2, 1, 5] = float("nan")
    assert kv_quant.quantize(x)[1].isnan().sum() == 1  # that head's scale: a broken model stays visibly broken


def test_kv_dtype_is_validated_and_refused_without_fp8(monkeypatch, tiny_checkpoint):
    with pytest.raises(ConfigError, match="kv_dtype='int8' is not one of auto, model, fp8"):
        EngineConfig(model="m", kv_dtype="int8")
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(UnsupportedError) as err:
        resolve_kv_dtype("fp8", torch.bfloat16, cuda)
    assert "NVIDIA A100-SXM4-80GB" in str(err.value) and "8.0" in str(err.value) and "--kv-dtype auto" in str(err.value)
    assert resolve_kv_dtype("auto", torch.bfloat16, cuda) == torch.bfloat16
    assert resolve_kv_dtype("model", torch.bfloat16, cuda) == torch.bfloat16  # the conformer CLI's explicit model dtype
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert resolve_kv_dtype("fp8", torch.bfloat16, cuda) == torch.float8_e4m3fn
    assert resolve_kv_dtype("fp8", torch.float32, torch.device("cpu")) == torch.float8_e4m3fn


def test_memory_plan_prices_the_scales_and_fits_about_twice_the_tokens(tmp_path):
    config = get_preset("qwen3-0.6b").make_config()
    config.architectures = ["Qwen3ForCausalLM"]
    config.save_pretrained(tmp_path)
    spec = read_model_spec(tmp_path)
    assert kv_bytes_per_token(spec, torch.bfloat16) == 2 * 28 * 8 * 128 * 2  # 114,688: 112 KiB
    assert kv_bytes_per_token(spec, torch.float8_e4m3fn) == 2 * 28 * 8 * (128 + 4)  # e4m3 + an fp32 scale per head
    models = {
        kv: MemoryModel(spec=spec, dtype=torch.bfloat16, weight_bytes=int(1.5 * GIB), max_prefill_tokens=8192,
                        reserve_bytes=512 * 1024**2, kv_dtype=kv)
        for kv in (None, torch.float8_e4m3fn)
    }  # fmt: skip
    slots = {kv: plan_memory(m, 60 * GIB, None, 2048, 10_000, 4096).slots for kv, m in models.items()}
    assert 1.85 * slots[None] <= slots[torch.float8_e4m3fn] <= 2 * slots[None]  # 132 of 256 bytes per head
    plan = plan_memory(models[torch.float8_e4m3fn], 60 * GIB, slots[torch.float8_e4m3fn], 2048, 10_000, 4096)
    assert plan.total_bytes <= 60 * GIB


def _teacher_forced_logits(engines: dict, steps: int, rows: int = 4, prompt_len: int = 20):
    """Both engines see the same tokens (the model-dtype engine's greedy choices): logits [steps + 1, rows, V]."""
    g = torch.Generator().manual_seed(0)
    vocab = engines["auto"].spec.vocab_size
    prompts = torch.randint(10, min(vocab, 1000), (rows, prompt_len), generator=g)
    lengths, slots = torch.full((rows,), prompt_len), torch.arange(rows)
    logits = {kv: [e.runner.model.prefill(prompts, lengths, slots, e.runner.cache)] for kv, e in engines.items()}
    with torch.inference_mode():
        for step in range(steps):
            token = logits["auto"][-1].argmax(-1)
            for kv, e in engines.items():
                positions = torch.full((rows,), prompt_len + step)
                logits[kv].append(e.runner.model.decode(token, positions, slots, e.runner.cache, prompt_len + step + 1))
    return {kv: torch.stack(values).float() for kv, values in logits.items()}


@pytest.mark.parametrize("preset", ["tiny", "tiny-qwen2", "tiny-gemma2", "tiny-gemma3"])
def test_fp8_engine_logits_stay_close_to_the_model_dtype_cache(preset, tiny_checkpoint):
    """Tolerance: e4m3 keeps 3 mantissa bits, so every cached element is off by up to 2^-4 of itself (its
    head's largest exactly kept); through attention and two layers that measured max |diff| <= 4.5% and
    mean |diff| ~0.4% of the largest |logit| over 60 teacher-forced steps on these checkpoints (head_dim 16,
    the worst case: wider heads average the rounding). The bounds (8% and 1%) leave headroom for that noise
    and still fail a misplaced, missing or swapped scale (errors of the order of the logits themselves).
    Prefill attends over unquantized K/V, so its logits are exactly the model-dtype engine's."""
    path = tiny_checkpoint(preset)
    engines = {kv: Engine(EngineConfig(model=path, max_slots=4, max_seq_len=96, kv_dtype=kv)) for kv in ("auto", "fp8")}
    assert engines["fp8"].runner.cache.k.dtype == torch.float8_e4m3fn and engines["fp8"].stats.kv_dtype == "float8_e4m3fn"
    logits = _teacher_forced_logits(engines, steps=60)
    ref, ours = logits["auto"], logits["fp8"]
    assert torch.equal(ours[0], ref[0])
    diff, top = (ours[1:] - ref[1:]).abs(), ref.abs().max()
    top1 = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()
    print(f"{preset}: max |diff| {diff.max() / top:.2%}, mean {diff.mean() / top:.3%} of max |logit|, top-1 {top1:.3f}")
    assert diff.max() <= 0.08 * top and diff.mean() <= 0.01 * top
    assert top1 >= 0.85  # measured 0.96-0.97; a near-tie may flip, equality is not the claim


@pytest.mark.parametrize("preset", ["tiny", "tiny-gemma2"])  # Gemma 2: windows 8 < the rows, soft-caps
def test_fp8_engine_generates_mostly_the_same_greedy_tokens_and_counts_its_bytes(preset, tiny_checkpoint):
    from inferlab.types import Request, SamplingParams

    path = tiny_checkpoint(preset)
    requests = [
        Request(id=f"r{i}", prompt_ids=tuple(range(7 + i, 30 + 3 * i)), sampling=SamplingParams(temperature=0, max_new_tokens=24, ignore_eos=True))
        for i in range(6)
    ]  # fmt: skip
    tokens, engines = {}, {}
    for kv in ("auto", "fp8"):
        engines[kv] = Engine(EngineConfig(model=path, max_slots=3, max_seq_len=96, kv_dtype=kv))
        tokens[kv] = [r.token_ids for r in engines[kv].generate(requests)]  # 6 requests through 3 slots
    prefix = [next((j for j, (a, b) in enumerate(zip(x, y)) if a != b), len(x)) for x, y in zip(tokens["auto"], tokens["fp8"])]
    print("greedy tokens equal before the first divergence (of 24):", prefix)
    assert all(n >= 1 for n in prefix)  # the first token comes from the (unquantized) prefill
    assert sum(prefix) >= 0.5 * 24 * len(requests)  # measured 117 of 144: random tiny models have near-ties
    auto, fp8 = engines["auto"].stats, engines["fp8"].stats
    head_dim = engines["fp8"].spec.head_dim
    assert fp8.kv_cache_bytes * 4 * head_dim == auto.kv_cache_bytes * (head_dim + 4)  # fp32 -> e4m3 + an fp32 scale
    assert fp8.decode_steps == auto.decode_steps and 0 < fp8.decode_bytes < auto.decode_bytes


def test_constrained_conformers_with_an_fp8_cache_are_all_valid(tiny_checkpoint):
    """The constraint makes outputs valid whatever the logits; this holds the fp8 engine to it through
    refills (8 requests through 3 slots), greedy and sampled rows."""
    from test_engine_constrained import SAMPLINGS, _assert_valid, _conformer_request, small_nci_molecules

    engine = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=3, max_seq_len=512, kv_dtype="fp8",
                                 decode_steps_per_sync=8))  # fmt: skip
    molecules = small_nci_molecules(12, 8)
    cases = [_conformer_request(engine, f"m{i}", s, **SAMPLINGS[i % len(SAMPLINGS)]) for i, s in enumerate(molecules)]
    for smiles, (_, template), result in zip(molecules, cases, engine.generate([r for r, _ in cases])):
        _assert_valid(engine, result, template, smiles)


class _LaunchRecorder:
    """Stands in for a Triton kernel: kernel[grid](*args, **kwargs) records the grid and the keywords."""

    def __init__(self) -> None:
        self.launches: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, kwargs))


def test_attention_configs_by_head_dim_and_the_register_cap_reach_the_launch(monkeypatch):
    """fp8 at head_dim <= 128 runs one-warp programs; head_dim 256 its wide config; a config's maxnreg is passed
    to the launch only when set (Triton's option), and BLOCK_N / warps / stages always."""
    from inferlab.engine.kernels import triton_attention as ta

    assert ta.default_config(128, fp8=True) == ta.FP8_ATTENTION_CONFIG and ta.FP8_ATTENTION_CONFIG.num_warps == 1
    assert ta.default_config(128) == ta.AttentionConfig() and ta.default_config(256) == ta.WIDE_HEAD_CONFIG
    assert ta.default_config(256, fp8=True) == ta.FP8_WIDE_HEAD_CONFIG
    recorder = _LaunchRecorder()
    monkeypatch.setattr(ta, "_rope_attention_kernel", recorder)
    rows, heads, kv_heads, head_dim, max_len = 3, 4, 2, 16, 32
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * head_dim)
    cache = [torch.zeros(4, kv_heads, max_len, head_dim, dtype=torch.float8_e4m3fn) for _ in range(2)]
    scales = [torch.zeros(4, kv_heads, max_len) for _ in range(2)]
    cos = sin = torch.zeros(max_len, head_dim)
    common = (qkv, torch.tensor([3, 9, 0]), cos, sin, None, None, 1e-6, *cache, torch.tensor([0, 2, 1]), heads, 0.25,
              torch.zeros(4 * kv_heads, dtype=torch.int32))  # fmt: skip
    for maxnreg in (None, 168):
        config = ta.AttentionConfig(block_n=16, num_warps=1, num_stages=4, maxnreg=maxnreg)
        ta.decode_rope_attention(*common, config=config, splits=2, k_scale=scales[0], v_scale=scales[1])
    (grid, plain), (_, capped) = recorder.launches
    assert grid == (rows, kv_heads, 2) and "maxnreg" not in plain and capped["maxnreg"] == 168
    assert (plain["BLOCK_N"], plain["num_warps"], plain["num_stages"], plain["KV_FP8"]) == (16, 1, 4, True)
    assert plain["DOT_TY"] == ta.tl.float32  # fp32 queries (the interpreter's path): ieee dots; bf16 ones get fp16
