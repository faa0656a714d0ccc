"""Memory planning on a byte budget: derived sizes, and refusals that name feasible values (which must fit)."""

from __future__ import annotations

import re

import pytest
import torch

from inferlab.engine import Engine, EngineConfig
from inferlab.engine.kv_cache import MemoryModel, kv_bytes_per_token, plan_memory
from inferlab.engine.startup import plan_without_loading
from inferlab.errors import CapacityError
from inferlab.models.config import read_model_spec
from inferlab.models.presets import get_preset

GIB = 1024**3


@pytest.fixture(scope="module")
def llama380m(tmp_path_factory):
    """The llama-380m spec, from its preset's config.json (no weights needed for planning)."""
    path = tmp_path_factory.mktemp("spec")
    config = get_preset("llama-380m").make_config()
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(path)
    return read_model_spec(path)


def _model(spec, reserve=512 * 1024**2):
    return MemoryModel(
        spec=spec, dtype=torch.bfloat16, weight_bytes=760 * 1024**2, max_prefill_tokens=8192, reserve_bytes=reserve
    )


def test_kv_bytes_per_token_of_llama380m(llama380m):
    assert kv_bytes_per_token(llama380m, torch.bfloat16) == 32 * 1024  # 2 x 16 layers x 8 heads x 64 x 2 bytes


def test_derived_slots_and_length_fill_the_budget(llama380m):
    model = _model(llama380m)
    plan = plan_memory(model, 20 * GIB, None, 2048, slot_cap=10_000, default_len_cap=4096)
    assert model.total(plan.slots, 2048) <= 20 * GIB < model.total(plan.slots + 1, 2048)
    plan = plan_memory(model, 20 * GIB, 64, None, slot_cap=256, default_len_cap=2048)
    assert plan.max_seq_len == 2048  # capped by the model's 2048 positions
    plan = plan_memory(model, 6 * GIB, 256, None, slot_cap=256, default_len_cap=2048)
    assert 2 <= plan.max_seq_len < 2048
    assert model.total(256, plan.max_seq_len) <= 6 * GIB < model.total(256, plan.max_seq_len + 1)


def test_refusal_names_the_largest_feasible_values_and_they_fit(llama380m):
    model = _model(llama380m)
    budget = 8 * GIB
    with pytest.raises(CapacityError) as err:
        plan_memory(model, budget, 512, 2048, slot_cap=256, default_len_cap=2048)
    message = str(err.value)
    slots = int(re.search(r"max_slots=(\d+) at max_seq_len=2048", message).group(1))
    length = int(re.search(r"or max_seq_len=(\d+) at max_slots=512", message).group(1))
    assert model.total(slots, 2048) <= budget < model.total(slots + 1, 2048)
    assert model.total(512, length) <= budget < model.total(512, length + 1)
    assert "gpu_memory_fraction" in message
    plan_memory(model, budget, slots, 2048, slot_cap=256, default_len_cap=2048)  # the suggestion is accepted


def test_a_budget_below_the_weights_is_refused_without_suggesting_zero(llama380m):
    with pytest.raises(CapacityError, match="Not even one row of 2 positions fits") as err:
        plan_memory(_model(llama380m), 1 * GIB, None, 2048, slot_cap=256, default_len_cap=2048)
    assert not re.search(r"max_(slots|seq_len)=0\b", str(err.value))


def test_when_one_row_does_not_fit_the_refusal_suggests_a_shorter_one_that_does(llama380m):
    model = _model(llama380m)
    budget = model.total(1, 1024)
    with pytest.raises(CapacityError) as err:
        plan_memory(model, budget, 4, 4096, slot_cap=256, default_len_cap=4096)
    message = str(err.value).split("Largest feasible: ")[1]
    assert not re.search(r"max_slots=0\b|max_seq_len=[01]\b", message)
    for slots, length in re.findall(r"max_slots=(\d+) at max_seq_len=(\d+)", message) + [
            (s, n) for n, s in re.findall(r"max_seq_len=(\d+) at max_slots=(\d+)", message)]:
        plan_memory(model, budget, int(slots), int(length), slot_cap=256, default_len_cap=4096)  # each one fits


def test_engine_refuses_before_loading_anything(tiny_checkpoint):
    small = dict(
        model=tiny_checkpoint("tiny"),
        max_seq_len=512,
        memory_budget_bytes=16 * 1024**2,
        reserve_bytes=0,
        max_prefill_tokens=512,
    )
    with pytest.raises(CapacityError, match="Largest feasible: max_slots=\\d+ at max_seq_len=512"):
        Engine(EngineConfig(max_slots=64, **small))
    engine = Engine(EngineConfig(**small))
    assert 1 <= engine.plan.slots < 64 and engine.stats.max_slots == engine.plan.slots
    # the same plan without an engine (what `inferlab tune` asks), and past slot_cap when raised
    assert plan_without_loading(EngineConfig(device="cpu", **small)) == engine.plan
    beyond = plan_without_loading(EngineConfig(device="cpu", **{**small, "memory_budget_bytes": 1 << 32},
                                               slot_cap=1 << 20))
    assert beyond.slots > 256 and beyond.total_bytes <= 1 << 32
    with pytest.raises(CapacityError, match="Largest feasible"):
        plan_without_loading(EngineConfig(device="cpu", max_slots=64, **small))


def test_a_gemma2_plan_with_an_fp8_cache_counts_the_scales_and_the_windowed_prefill(tmp_path):
    """Both terms at once: e4m3 + an fp32 scale per head and position, and the eager windowed prefill's
    blocks (Gemma 2 has windows and soft-caps, so its prefill runs attention.windowed_attention)."""
    from dataclasses import replace

    from inferlab.engine.attention import EAGER_SCORE_ELEMENTS

    config = get_preset("tiny-gemma2").make_config()
    config.architectures = ["Gemma2ForCausalLM"]
    config.save_pretrained(tmp_path)
    spec = read_model_spec(tmp_path)
    assert any(spec.layer_windows) and spec.attn_logit_softcap is not None
    fp8 = MemoryModel(spec=spec, dtype=torch.bfloat16, weight_bytes=0, max_prefill_tokens=4096, reserve_bytes=0,
                      kv_dtype=torch.float8_e4m3fn)  # fmt: skip
    assert fp8.kv_per_token == 2 * spec.num_layers * spec.num_kv_heads * (spec.head_dim + 4)
    sdpa_spec = replace(spec, layer_windows=(0,) * spec.num_layers, attn_logit_softcap=None)  # SDPA's prefill
    sdpa = replace(fp8, spec=sdpa_spec)
    eager = 4 * 4 * EAGER_SCORE_ELEMENTS + 4 * 3 * 4096 * spec.num_heads * spec.head_dim
    assert fp8.prefill_activation_bytes(512) - sdpa.prefill_activation_bytes(512) == eager
    assert fp8.total(8, 512) - sdpa.total(8, 512) == eager
