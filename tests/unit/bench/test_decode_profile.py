"""Scenario decode-profile: the roofline arithmetic, the attribution of kernels to families, the CPU run of a
cell (the child's code path in this process) and the report's section built from its row."""

from __future__ import annotations

import json

import pytest

from inferlab.bench.plan import build_plan
from inferlab.bench.plan_presets import get_plan_preset
from inferlab.bench.roofline import (
    GAPS,
    Ceilings,
    Measured,
    StepShape,
    family_rows,
    gemm_tiles,
    kv_read_bytes,
    minimum_work,
    weight_bytes,
)
from inferlab.bench.step_profile import Kernel, carry_labels, one_step, per_step
from inferlab.errors import ConfigError

QWEN = dict(layers=28, hidden=1024, heads=16, kv_heads=8, head_dim=128, intermediate=3072, vocab=151936,
            dtype_bytes=2, kv_bytes_per_token=2 * 28 * 8 * 128 * 2, logits_bytes=2, stop_ids=8)  # fmt: skip
CEILINGS = Ceilings(copy_gb_per_s=3000.0, matmul_tflops=700.0, kernel_floor_us=2.0, graph_gap_us=1.0,
                    copy_curve=((2e6, 1000.0), (8e6, 2000.0), (32e6, 2800.0)))  # fmt: skip


def test_the_minimum_work_reads_every_weight_once_and_each_rows_kv_over_its_length():
    no_rows = StepShape(rows=0, context=330, **QWEN)
    work = minimum_work(no_rows, norm_launches=57)
    gemms = sum(work[f].bytes for f in ("gemm qkv", "gemm o", "gemm mlp", "gemm lm_head"))
    assert gemms == weight_bytes(no_rows)
    assert 1.1e9 < weight_bytes(no_rows) < 1.2e9  # qwen3-0.6b: ~0.6 B parameters in bf16
    step = StepShape(rows=256, context=330, **QWEN)
    assert kv_read_bytes(step) == 256 * 330 * QWEN["kv_bytes_per_token"]
    work = minimum_work(step, norm_launches=57)
    assert work["attention"].bytes > kv_read_bytes(step)  # + the new K/V written, q in and the output out
    assert work["gemm mlp"].flops == 28 * 2 * 256 * 3 * 3072 * 1024
    assert work["sampling"].bytes == 256 * (151936 * 2 + 8)


def test_each_family_is_read_against_the_largest_of_its_three_bounds():
    step = StepShape(rows=16, context=330, **QWEN)
    work = minimum_work(step, norm_launches=57)
    bytes_us = {f: work[f].bytes / 3e6 for f in work}  # at 3,000 GB/s
    measured = {
        "gemm qkv": Measured(bytes_us["gemm qkv"] / 0.9, 28),  # near its bound
        "attention": Measured(bytes_us["attention"] / 0.3, 28),  # far from it, and a large share
        "norm": Measured(150.0, 57),  # 57 launches x 2 us = 114 us floor: launch-bound
        "bookkeeping": Measured(10.0, 2),  # far from its (tiny) bound, under 5% of the step
    }
    step_us = 1.3 * sum(m.us for m in measured.values())
    rows = {r["family"]: r for r in family_rows(measured, work, step_us, CEILINGS)}
    assert list(rows) == ["gemm qkv", "attention", "norm", "bookkeeping", GAPS]
    assert rows["gemm qkv"]["meets"] and rows["gemm qkv"]["limit"] == "bandwidth"
    assert rows["gemm qkv"]["pct_of_bound"] == pytest.approx(0.9)
    assert not rows["attention"]["meets"] and rows["attention"]["reason"].startswith("30% of its bandwidth")
    assert rows["norm"]["limit"] == "launches" and rows["norm"]["meets"]
    assert rows["norm"]["reason"].startswith("launch-bound: 57 launches take >= 114.0 us")
    assert rows["bookkeeping"]["meets"] and rows["bookkeeping"]["reason"] is not None
    gaps = rows[GAPS]
    assert gaps["us"] == pytest.approx(step_us - sum(m.us for m in measured.values()))
    assert gaps["launches"] == 28 + 28 + 57 + 2 and gaps["floor_us"] == pytest.approx(gaps["launches"] * 1.0)


def test_a_gemm_family_below_its_compute_bound_says_how_few_output_tiles_it_has():
    step = StepShape(rows=256, context=330, **QWEN)
    work = minimum_work(step, norm_launches=57)
    ceilings = Ceilings(4500.0, 700.0, 0.5, 1.0, sm_count=132)
    o_us = work["gemm o"].flops / 700e6  # at the matrix rate
    rows = family_rows({"gemm o": Measured(o_us / 0.2, 28)}, work, 10 * o_us / 0.2, ceilings, gemm_tiles(step))
    assert rows[0]["limit"] == "compute" and not rows[0]["meets"]
    assert rows[0]["reason"] == "20% of its compute bound; 16 output tiles of 128x128 per GEMM for 132 SMs"
    assert gemm_tiles(step)["gemm mlp"] == [2 * 48, 2 * 8]  # gate_up [256, 6144], down [256, 1024]


def test_the_copy_bandwidth_of_a_size_follows_the_measured_curve():
    assert CEILINGS.copy_gb_per_s_at(1e6) == 1000.0  # below the curve: its smallest copy
    assert CEILINGS.copy_gb_per_s_at(4e6) == pytest.approx(1500.0)  # halfway in log size
    assert CEILINGS.copy_gb_per_s_at(1e9) == 3000.0  # beyond it: the large copy


def test_replayed_kernels_take_the_eager_steps_labels_only_when_they_are_its_launches():
    eager = [Kernel("gemm", 0, 5.0, "gemm qkv"), Kernel("attn", 1, 9.0, "attention"), Kernel("norm", 2, 1.0, "norm")]
    assert one_step(eager * 3, 3) == eager and one_step(eager + eager[:2], 2) is None
    replayed = [Kernel(k.name, i, k.us + 1, "") for i, k in enumerate(eager * 2)]
    carried, matched = carry_labels(eager, replayed)
    assert [k.family for k in carried] == ["gemm qkv", "attention", "norm"] * 2 and matched == 6
    assert per_step(carried, 2)["attention"] == Measured(10.0, 1.0)
    # captured, the library picked another GEMM kernel and added a reduce kernel after it: aligned by name
    other = [Kernel(n, i, 1.0, "") for i, n in enumerate(["gemm2", "reduce", "attn", "norm"] * 10)]
    carried, matched = carry_labels(eager * 10, other)
    assert [k.family for k in carried] == ["gemm qkv", "gemm qkv", "attention", "norm"] * 10 and matched == 20
    assert carry_labels(eager, [Kernel("x", 0, 1.0, "")] * 3) is None  # other launches


def test_the_probes_labelled_step_puts_every_family_into_the_profile(tiny_checkpoint):
    from functools import partial

    from torch.profiler import ProfilerActivity, profile

    from inferlab.bench.roofline import FAMILIES
    from inferlab.bench.step_profile import family_range, labelled_kernels, step_range
    from inferlab.engine import DecodeStepProbe, Engine, EngineConfig, SamplingParams

    assert set(DecodeStepProbe.FAMILIES) <= set(FAMILIES)  # the engine's labels are families the table knows
    engine = Engine(EngineConfig(model=str(tiny_checkpoint()), device="cpu", max_slots=2, max_seq_len=16,
                                 decode_text=False, load_tokenizer=False))  # fmt: skip
    sampling = SamplingParams(temperature=1.0, top_p=0.9)
    with engine, DecodeStepProbe(engine, rows=2, context=6, sampling=sampling) as probe:
        with probe.labelled(partial(family_range, synchronise=False)), profile(activities=[ProfilerActivity.CPU]) as p:
            with step_range(synchronise=False):
                probe.eager_step()
    kernels, how = labelled_kernels(list(p.events()), on_cuda=False)
    families = {k.family for k in kernels}
    assert how == "cpu ops"
    assert {"gemm qkv", "gemm o", "gemm mlp", "gemm lm_head", "attention", "norm", "sampling", "bookkeeping"} <= families


def test_the_decode_roofline_preset_covers_both_models_row_counts_and_caches():
    cells = build_plan(get_plan_preset("decode-roofline")).cells
    profiles = [c for c in cells if c.scenario == "decode-profile"]
    cases = {(c.model, c.config["batch_size"], c.config["kv_dtype"]) for c in profiles}
    rows = {"qwen3-0.6b": (16, 256, 1024), "llama-380m": (16, 256)}  # issue 29's table: qwen3 at 256 and 1024
    assert cases == {(m, b, kv) for m, sizes in rows.items() for b in sizes for kv in ("auto", "fp8")}
    assert {c.config["context_tokens"] for c in profiles if c.model == "qwen3-0.6b"} == {330}
    engine_runs = [c for c in cells if c.scenario == "generate"]
    assert {(c.model, c.config["batch_size"], c.config["new_tokens"]) for c in engine_runs} == {("qwen3-0.6b", 256, 600)}


def test_the_packed_step_profile_preset_pairs_each_constrained_case_with_its_packed_step():
    cells = build_plan(get_plan_preset("packed-step-profile")).cells
    cases = {(c.config["batch_size"], c.config["kv_dtype"], c.config["forced_run_tokens"]) for c in cells}
    assert len(cells) == 8 and cases == {(b, kv, f) for b in (256, 1024) for kv in ("auto", "fp8") for f in (0, 4)}
    assert {(c.scenario, c.model, c.config["constraint"], c.config["context_tokens"], c.config["top_p"])
            for c in cells} == {("decode-profile", "qwen3-0.6b", "on", 330, 1.0)}  # fmt: skip
    only = build_plan(get_plan_preset("packed-step-profile"),
                      only={"forced_run_tokens": ["4"], "kv_dtype": ["fp8"], "batch_size": ["1024"]}).cells
    assert [(c.config["forced_run_tokens"], c.config["kv_dtype"], c.config["batch_size"]) for c in only] == [(4, "fp8", 1024)]


def test_a_cpu_cell_profiles_the_step_and_the_report_renders_its_table(run_cell, tiny_checkpoint, tmp_path):
    from inferlab.bench.report import write_report
    from inferlab.bench.rows import make_row

    path = tiny_checkpoint()
    cell, out = run_cell({"sweep": [{"scenario": "decode-profile", "model": str(path),
                                     "set": {"batch_size": 3, "context_tokens": 12, "dtype": "float32", "top_p": 0.9,
                                             "device": "cpu", "min_repeats": 2, "min_duration_s": 0.0, "warmup": 1,
                                             "profile_steps": 2}}]}, path)  # fmt: skip
    assert out.status == "ok", out.message
    m = out.metrics
    families = {f["family"]: f for f in m["families"]}
    assert {"gemm qkv", "gemm o", "gemm mlp", "gemm lm_head", "attention", "norm", "sampling", GAPS} <= set(families)
    assert m["profile_source"] == "cpu ops of eager steps" and m["shape"]["rows"] == 3 and m["shape"]["context"] == 12
    assert m["kernel_us"] == pytest.approx(sum(f["us"] for f in m["families"] if f["family"] != GAPS))
    assert m["step_us"] > 0 and m["step_gb_per_s"] > 0 and m["ceilings"]["graph_gap_us"] is None
    assert all(f["family"] in m["below_bound"] for f in m["families"] if not f["meets"])
    step = json.loads((tmp_path / "profiles" / f"{cell.key}.json").read_text())["step"]
    assert step and {"kernel", "family", "us"} <= set(step[0])
    report = write_report(["run"], [make_row(cell, out, run_id="r1", env={"gpu": None, "cpu": "test"})],
                          tmp_path / "report")
    text = report.read_text()
    assert "## The decode step against its bound" in text and "| gemm lm_head |" in text
    assert (tmp_path / "report" / "plots" / "decode-roofline.png").is_file()


def test_a_constrained_cpu_cell_with_forced_runs_profiles_the_packed_step_by_family(run_cell, tiny_checkpoint,
                                                                                   tmp_path):
    """constraint=on, forced_run_tokens=4 on tiny-qwen3 (the qwen3-chem tokenizer): the rows take the conformer
    programs, the step is the packed one (T = 3 rows + 12 booked positions of room, none booked by the frozen
    rows), and the constraint's kernels, the booking and the booked tokens' pressure are families of their own."""
    from inferlab.bench.report import write_report
    from inferlab.bench.rows import make_row

    path = tiny_checkpoint("tiny-qwen3")
    cell, out = run_cell({"sweep": [{"scenario": "decode-profile", "model": str(path),
                                     "set": {"batch_size": 3, "context_tokens": 12, "dtype": "float32", "top_p": 1.0,
                                             "device": "cpu", "min_repeats": 2, "min_duration_s": 0.0, "warmup": 1,
                                             "profile_steps": 2, "constraint": "on", "forced_run_tokens": 4}}]},
                         path)  # fmt: skip
    assert out.status == "ok", out.message
    m = out.metrics
    families = {f["family"]: f for f in m["families"]}
    for family in ("constraint", "forced runs", "forced pressure"):
        assert families[family]["us"] > 0 and families[family]["launches"] > 0, family
        assert families[family]["bytes"] == 0 and families[family]["limit"] == "launches"  # no minimum modelled
    assert {"gemm qkv", "attention", "sampling", GAPS} <= set(families)
    assert m["constraint_programs"] == 16 and m["packed_positions"] == 3 + 12 and m["booked_per_step"] == 0
    report = write_report(["run"], [make_row(cell, out, run_id="r1", env={"gpu": None, "cpu": "test"})],
                          tmp_path / "report")
    text = report.read_text()
    assert "· constrained · forced runs 4, 15 positions" in text and "| forced pressure |" in text


def test_forced_runs_without_the_constraint_are_refused():
    cell = {"scenario": "decode-profile", "model": "tiny", "set": {"forced_run_tokens": 4}}
    with pytest.raises(ConfigError, match="forced_run_tokens=4 packs the forced runs of constrained steps.*"
                                          "--set constraint=on"):
        build_plan({"sweep": [cell]})
    from inferlab.engine import EngineConfig

    cell["set"]["constraint"] = "on"
    assert build_plan({"sweep": [cell]}).cells[0].config["forced_run_budget"] == EngineConfig.forced_run_budget

