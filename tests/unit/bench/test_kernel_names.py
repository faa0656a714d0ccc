"""Which attention kernel ran: names from profiler traces (aten ops, CUDA kernel names) to kinds."""

from __future__ import annotations

from collections import Counter

import pytest

from inferlab.bench.kernel_names import classify, kind_of


@pytest.mark.parametrize("name, kind", [
    ("aten::_scaled_dot_product_flash_attention", "flash"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>", "flash"),
    ("void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<64, 64, 256, 4>>", "flash"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "flash"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<64, 64, 256, 4, false, false, cutlass::bfloat16_t>>", "flash-attn"),
    ("flash_attn::_flash_attn_forward", "flash-attn"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0", "cudnn"),
    ("aten::_scaled_dot_product_cudnn_attention", "cudnn"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)", "efficient"),
    ("aten::_efficient_attention_forward", "efficient"),
    ("aten::_scaled_dot_product_attention_math", "math"),
    ("aten::scaled_dot_product_attention", None),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", None),
])
def test_names_map_to_kinds(name, kind):
    assert kind_of(name) == kind


def test_classify_counts_and_orders_kinds():
    names = Counter({"aten::_scaled_dot_product_efficient_attention": 30, "fmha_cutlassF_bf16_aligned_64x64_rf_sm80": 30,
                     "aten::_scaled_dot_product_flash_attention": 2, "aten::scaled_dot_product_attention": 32,
                     "aten::mm": 500})
    report = classify(names, on_cpu=False)
    assert report.observed == "efficient+flash" and report.counts == {"efficient": 60, "flash": 2}
    assert "aten::mm" not in report.attention_names


def test_eager_attention_is_unfused_and_cpu_kinds_are_prefixed():
    assert classify({"aten::softmax": 32, "aten::bmm": 64}, on_cpu=True).observed == "cpu:unfused"
    assert classify({"aten::_scaled_dot_product_flash_attention_for_cpu": 4}, on_cpu=True).observed == "cpu:flash"
    assert classify({"aten::add": 3}, on_cpu=False).observed == "none seen"
