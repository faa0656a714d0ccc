"""The packed prefill's profile (bench/prefill_profile.py): kernels named into families as the H200 names
them, and the table's arithmetic (per-pass time, shares, TFLOP/s against the peak, how busy the device was)."""

from __future__ import annotations

import pytest

from inferlab.bench.prefill_profile import family_of, family_table


@pytest.mark.parametrize("name, family", [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
    ("cutlass3x_sm90_tensorop_gemm_bf16", "gemm"),
    ("_wide_gated_kernel", "gemm"),
    ("_skinny_kernel", "gemm"),
    ("_varlen_attention_kernel", "attention"),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "attention"),
    ("_rope_inplace_kernel", "rope"),
    ("_rms_norm_kernel", "norm"),
    ("_embed_rms_norm_kernel", "norm"),
    ("_act_mul_kernel", "activation"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "copy"),
    ("Memcpy HtoD (Pinned -> Device)", "copy"),
    ("void at::native::reduce_kernel<512, 1>", "other"),
    ("aten::mm", "gemm"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
])
def test_kernels_are_named_into_families(name, family):
    assert family_of(name) == family


def test_the_table_is_per_pass_with_shares_rates_and_the_busy_fraction():
    times = {"nvjet_a": 600.0, "_varlen_attention_kernel": 300.0, "_rms_norm_kernel": 60.0, "reduce": 40.0}
    table = family_table(times, passes=2, wall_us=1250.0, projection_flops=3e11, attention_flops=6e10,
                         peak_tflops=800.0)
    rows = {row["family"]: row for row in table["families"]}
    assert rows["gemm"]["us"] == 300.0 and rows["gemm"]["share"] == 0.6
    assert rows["gemm"]["tflops"] == pytest.approx(1000.0) and rows["gemm"]["pct_of_matmul_peak"] == 125.0
    assert rows["attention"]["tflops"] == pytest.approx(400.0) and "tflops" not in rows["norm"]
    assert [row["family"] for row in table["families"]] == ["attention", "gemm", "norm", "other"]
    assert table["kernels_us"] == 500.0 and table["wall_us"] == 625.0 and table["busy"] == 0.8
    assert table["top_kernels"][0] == {"kernel": "nvjet_a", "family": "gemm", "us": 300.0}
