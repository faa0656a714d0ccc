"""report / findings / compare / recommend on synthetic rows built by the real row code."""

from __future__ import annotations

import pytest

from inferlab.bench.cells import Cell
from inferlab.bench.compare import compare_rows, delta, format_comparison
from inferlab.bench.findings import seed_findings
from inferlab.bench.findings_classify import classify_findings, label_findings
from inferlab.bench.plan import build_plan
from inferlab.bench.plan_presets import get_plan_preset
from inferlab.bench.recommend import format_markdown, recommend
from inferlab.bench.report import write_report
from inferlab.bench.rows import Outcome, make_row

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11", "transformers": "5.17", "cuda": "12.8", "commit": "abc", "dirty": False}


def _gen_cell(model: str = "llama-380m", **knobs) -> Cell:
    base = {"batch_size": 16, "num_prompts": 64, "new_tokens": 1000, "prompt_tokens": 48}
    if model != "llama-380m":
        base.update(new_tokens=8, num_prompts=16)
    plan = build_plan({"sweep": [{"scenario": "generate", "model": model, "backend": "hf", "set": {**base, **knobs}}]})
    return plan.cells[0]


def _row(cell: Cell, tps: float | None = None, status: str = "ok", message: str = "", spread: float | None = 0.02,
         env=H100, **metrics):
    m = {}
    if tps is not None:
        m = {"output_tokens_per_s": tps, "first_call_s": 1.5, "steady_s": 30.0, "peak_memory_gb": 2.0,
             "achieved_gb_per_s": 100.0, "bandwidth_fraction": 0.04, "attention_kernel_observed": "flash", "spread": spread}
    m.update(metrics)
    return make_row(cell, Outcome(status, message, m if status == "ok" else {}), run_id="r1", env=env)


def _attention_row(kernel: str, ms: float | None, status: str = "ok", **shape):
    plan = build_plan({"sweep": [{"scenario": "attention-kernels", "set": {"kernel": kernel, **shape}}]})
    metrics = {"ms_per_iter": ms, "tflops_per_s": 1.0, "shape": "seed", "spread": 0.01, "max_abs_error": 0.01,
               "attention_kernel_observed": kernel} if ms is not None else {}
    return make_row(plan.cells[0], Outcome(status, "" if status == "ok" else "No available kernel", metrics), run_id="r1", env=H100)


@pytest.fixture()
def seed_rows():
    return [
        _row(_gen_cell(attn_implementation="eager", kv_cache="dynamic"), 1900.0),
        _row(_gen_cell(attn_implementation="sdpa", kv_cache="dynamic"), 2000.0),
        _row(_gen_cell(attn_implementation="flash_attention_2", kv_cache="dynamic"), status="unavailable",
             message="UnsupportedError: flash_attention_2 needs the flash-attn package"),
        _row(_gen_cell(attn_implementation="eager", kv_cache="static"), 3300.0),
        _row(_gen_cell(attn_implementation="sdpa", kv_cache="static"), 3400.0),
        _row(_gen_cell(attn_implementation="sdpa", sdpa_backend="flash", kv_cache="dynamic"), status="unavailable",
             message="RuntimeError: No available kernel"),
        _row(_gen_cell(attn_implementation="sdpa", sdpa_backend="flash", kv_cache="static"), status="unavailable",
             message="RuntimeError: No available kernel"),
        _row(_gen_cell(attn_implementation="sdpa", sdpa_backend="cudnn", kv_cache="dynamic"), status="timeout",
             message="no result after 240 s"),
        _row(_gen_cell(attn_implementation="sdpa", sdpa_backend="cudnn", kv_cache="static"), 2700.0),
        _row(_gen_cell(attn_implementation="sdpa", kv_cache="dynamic", processor="python"), 1700.0),
        _row(_gen_cell(attn_implementation="sdpa", kv_cache="static", processor="python"), 1800.0),
        _attention_row("cudnn", 0.12, batch_size=4, dtype="bfloat16"),
        _attention_row("flash", 0.16, batch_size=4, dtype="bfloat16"),
        _attention_row("math", 7.0, batch_size=4, dtype="bfloat16"),
    ]


def test_findings_are_computed_from_rows(seed_rows):
    by_claim = {f.claim.split(" (")[0]: f for f in seed_findings(seed_rows)}
    f = by_claim["With a dynamic cache, sdpa is about as fast as eager"]
    assert f.verdict == "holds" and "1.05x" in f.measured and "2,000 tok/s" in f.measured
    assert by_claim["flash_attention_2 is ~40% slower than sdpa in generation"].verdict == "not measured"
    static = by_claim["A static KV cache is ~1.8x faster than a dynamic one without a processor"]
    assert static.verdict == "holds" and "1.74x" in static.measured and "1.70x" in static.measured
    proc = [f for f in seed_findings(seed_rows) if f.claim.startswith("With a per-token Python processor")][0]
    assert proc.verdict == "does not hold" and "1.06x" in proc.measured and "first call" in proc.measured
    eager_static = by_claim["With a static cache eager is the fastest"]
    assert eager_static.verdict == "does not hold"
    forced = [f for f in seed_findings(seed_rows) if f.claim.startswith("Forcing")][0]
    assert forced.verdict == "holds" and "cudnn/dynamic: timeout" in forced.measured
    kernel = [f for f in seed_findings(seed_rows) if f.claim.startswith("At [4,16,2048,64]")][0]
    assert kernel.verdict == "holds" and kernel.measured.startswith("cudnn 0.12 ms")


def test_report_tables_winner_speedup_and_plots(tmp_path, seed_rows):
    tiny = [_row(_gen_cell("tiny", kv_cache=kv, compile=False, batch_size=b, num_prompts=16), tps, env=H100)
            for kv, b, tps in (("dynamic", 4, 100.0), ("static", 4, 150.0), ("dynamic", 8, 180.0), ("static", 8, 240.0))]
    path = write_report(["synthetic"], seed_rows + tiny, tmp_path, baseline="attn_implementation=eager")
    text = path.read_text()
    assert "## Do the seeds' findings hold?" in text and "**holds**" in text
    assert "### generate · llama-380m · NVIDIA H100 80GB HBM3" in text
    assert "### attention-kernels · - · NVIDIA H100 80GB HBM3" in text
    lines = {line.split(" | ")[0].strip("| *"): line for line in text.splitlines() if line.startswith("| ")}
    # speedup against eager with the same KV cache: 2000/1900 and 3400/3300
    sdpa_dynamic = [l for l in text.splitlines() if l.startswith("| attn_implementation=sdpa, sdpa_backend=auto, kv_cache=dynamic, compile=off, processor=none")]
    assert sdpa_dynamic and "1.05x" in sdpa_dynamic[0]
    sdpa_static = [l for l in text.splitlines() if "attn_implementation=sdpa, sdpa_backend=auto, kv_cache=static, compile=on, processor=none" in l]
    assert "(best)" in sdpa_static[0] and "1.03x" in sdpa_static[0]
    assert any("timeout: no result after 240 s" in l for l in lines.values())
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert len(pngs) == 3 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "![" in text and "plots/" in text


def test_default_baseline_is_the_first_configuration_per_workload(tmp_path):
    rows = [_row(_gen_cell("tiny", kv_cache=kv, compile=False, batch_size=b, num_prompts=16), tps)
            for kv, b, tps in (("dynamic", 4, 100.0), ("static", 4, 150.0), ("dynamic", 8, 180.0), ("static", 8, 90.0))]
    text = write_report(["s"], rows, tmp_path).read_text()
    table = [l for l in text.splitlines() if l.startswith("| kv_cache=") or l.startswith("| **kv_cache=")]
    assert [("1.50x" in l, "1.00x" in l, "(best)" in l) for l in table] == [
        (False, True, False), (True, False, True), (False, True, True), (False, False, False)]
    assert "0.50x" in table[3]


def test_compare_matches_cells_and_reports_deltas():
    a = [_row(_gen_cell("tiny", kv_cache="dynamic", num_prompts=16), 100.0), _attention_row("math", 2.0)]
    b = [_row(_gen_cell("tiny", kv_cache="dynamic", num_prompts=16), 125.0), _attention_row("math", 1.0),
         _row(_gen_cell("tiny", kv_cache="static", compile=False, num_prompts=16), 150.0)]
    cmp = compare_rows(a, b)
    assert len(cmp.pairs) == 2 and cmp.only_a == [] and len(cmp.only_b) == 1
    assert delta(*cmp.pairs[0]) == (25.0, 0.25, "better")
    assert delta(*cmp.pairs[1]) == (-1.0, -0.5, "better")  # ms/iter: lower is better
    text = format_comparison(cmp, "A", "B")
    assert "+25.0%" in text and "-50.0%" in text and "only in B (1)" in text


def _calls(tps: float, spread: float | None, n: int = 3) -> dict:
    """call_s_stats of `n` timed calls of 1000 tokens at a median of `tps`, ranging over `spread` of the rate."""
    median = 1000.0 / tps
    if spread is None:
        return {"n": 1, "median": median, "min": median, "max": median}
    # rate range median/min - median/max == spread, symmetric around the median
    half = spread / 2
    return {"n": n, "median": median, "min": median / (1 + half), "max": median / (1 - half)}


def test_recommend_names_a_winner_only_past_the_measured_spread():
    def rec_rows(spread_a, spread_b, tps_b, batch=16, n=3):
        return [_row(_gen_cell("tiny", kv_cache="dynamic", batch_size=batch, num_prompts=batch), 100.0,
                     call_s_stats=_calls(100.0, spread_a, n)),
                _row(_gen_cell("tiny", kv_cache="static", compile=False, batch_size=batch, num_prompts=batch), tps_b,
                     call_s_stats=_calls(tps_b, spread_b, n))]

    clear = recommend(rec_rows(0.02, 0.03, 110.0))[0]
    assert clear.best == "kv_cache=static" and clear.runner_up == "kv_cache=dynamic"
    assert clear.spread == pytest.approx(0.03)
    assert clear.margin == pytest.approx(0.10) and clear.recommended == "kv_cache=static"
    assert clear.verdict == "kv_cache=static (10.0% ahead of kv_cache=dynamic, spread 3.0%)"
    tie = recommend(rec_rows(0.20, 0.05, 103.5))[0]  # 3.5% ahead, inside a 20% spread
    assert tie.recommended == "-" and tie.verdict.startswith("kv_cache: no clear winner")
    assert "inside the spread 20.0%" in tie.verdict
    unknown = recommend(rec_rows(0.001, 0.001, 130.0, n=2))[0]  # two timed calls: no spread
    assert unknown.recommended == "-" and "spread not measured: 3 timed repeats needed, 2 made" in unknown.verdict
    assert recommend(rec_rows(None, 0.01, 130.0))[0].recommended == "-"
    single = recommend(rec_rows(0.01, 0.01, 130.0, batch=8)[:1])[0]
    assert single.verdict == "only one configuration" and single.recommended == "-"
    both = recommend(rec_rows(0.02, 0.03, 110.0) + rec_rows(0.02, 0.03, 90.0, batch=8))
    assert [(r.workload, r.best) for r in both] == [("batch_size=16, num_prompts=16", "kv_cache=static"),
                                                   ("batch_size=8, num_prompts=8", "kv_cache=dynamic")]
    assert "| GPU |" in format_markdown(both)


def test_recommend_never_names_a_baseline_knob():
    rows = [_row(_gen_cell("tiny", kv_cache="static", compile=False, processor=p, num_prompts=16), tps,
                 call_s_stats=_calls(tps, 0.01)) for p, tps in (("none", 100.0), ("python", 140.0))]
    rec = recommend(rows)[0]
    assert rec.best == "hf" and rec.verdict == "only one configuration"  # the Python processor is a reference


def test_failed_rows_never_win():
    rows = [_row(_gen_cell("tiny", kv_cache="dynamic", num_prompts=16), 100.0),
            _row(_gen_cell("tiny", kv_cache="static", compile=False, num_prompts=16), status="error", message="boom")]
    rec = recommend(rows)[0]
    assert rec.best == "hf" and rec.verdict == "only one configuration"  # nothing else ran ok to tell it apart


def _classify_row(samples_per_s: float, **knobs):
    cell = next(c for c in build_plan(get_plan_preset("seed-classify-matrix")).cells
                if all(c.config[k] == v for k, v in knobs.items()))
    metrics = {"requests_per_s": samples_per_s, "latency_ms": {"p50": 1.0, "p90": 2.0, "p95": 3.0, "p99": 4.0},
               "input_tokens_per_s": 1000.0, "padding_fraction": 0.5, "first_call_s": 0.1, "peak_memory_gb": 3.0}
    return make_row(cell, Outcome("ok", "", metrics), run_id="r1", env=H100)


def test_seed_004_findings_are_computed_from_classify_rows(tmp_path):
    rows = [_classify_row(40.0, quantization="none", attn_implementation="eager", batch_size=1),
            _classify_row(10.0, quantization="int8", attn_implementation="eager", batch_size=1),
            _classify_row(100.0, quantization="none", attn_implementation="eager", batch_size=32),
            _classify_row(150.0, quantization="int8", attn_implementation="eager", batch_size=32),
            _classify_row(120.0, quantization="none", attn_implementation="sdpa", batch_size=32)]
    verdicts = {f.claim.split(" (")[0]: f.verdict for f in classify_findings(rows)}
    assert verdicts == {"int8 weights are ~2.5x faster than fp16 at batch 32": "partly holds",  # 1.5x
                        "int8 weights are ~4x slower than fp16 at batch 1": "holds",  # 0.25x
                        "fp16 throughput barely grows with the batch": "does not hold",  # 2.5x
                        "FlashAttention": "partly holds"}  # 1.2x
    assert [f.verdict for f in classify_findings(rows[:1])] == ["not measured"] * 4
    text = write_report(["r"], rows, tmp_path / "rep").read_text()
    assert "Seed 004 (classification)" in text and "| samples/s |" not in text.split("## Results")[0]
    assert "### classify · qwen2-cls" in text and "p95 ms" in text


def test_a_run_directory_without_rows_is_left_out_of_runs_star_with_a_warning(tmp_path, caplog):
    import json

    from inferlab.bench.results import load_rows
    from inferlab.errors import InputError

    done, stopped = tmp_path / "done", tmp_path / "stopped"
    done.mkdir()
    stopped.mkdir()
    (done / "results.jsonl").write_text(json.dumps(_row(_gen_cell(), 100.0)) + "\n")
    with caplog.at_level("WARNING"):
        rows = load_rows([done, stopped])
    assert len(rows) == 1 and "stopped: no results.jsonl yet" in caplog.text
    with pytest.raises(InputError, match="no results.jsonl there"):
        load_rows([stopped])
    with pytest.raises(InputError, match="no results.jsonl there"):
        load_rows([done, tmp_path / "typo.jsonl"])


def test_recommend_judges_only_the_knobs_that_tell_rows_apart():
    from inferlab.bench.recommend import _telling_knobs

    def row(backend, **config):
        return {"backend": backend, "config": config}

    group = [row("hf", batch_size=16, bucket="on"), row("hf", batch_size=64, bucket="on"),
             row("inferlab", weights="auto", budget=32768), row("inferlab", weights="fp8", budget=32768),
             row("vllm", gpu_memory=0.92)]
    knobs = ["backend", "bucket", "batch_size", "budget", "weights", "gpu_memory", "dtype"]
    # bucket, budget and gpu_memory follow from the backend; dtype is the same everywhere
    assert _telling_knobs(group, knobs) == ["backend", "batch_size", "weights"]
    assert _telling_knobs(group[:1], knobs) == []


def _backend_classify_row(backend: str, samples_per_s: float, batch_size: int | None = None, **knobs):
    knobs = {**knobs, **({"batch_size": batch_size} if batch_size is not None else {})}
    plan = build_plan({"sweep": [{"scenario": "classify", "model": "tiny-qwen2-cls", "backend": backend,
                                  "set": {"num_samples": 16, "min_tokens": 8, "max_tokens": 64, **knobs}}]})
    metrics = {"requests_per_s": samples_per_s, "latency_ms": {"n": 16, "p50": 1.0, "p95": 2.0, "p99": 3.0}}
    return make_row(plan.cells[0], Outcome("ok", "", metrics), run_id="r1", env=H100)


def test_the_plot_keeps_the_engines_point_and_its_legend_names_only_knobs_the_row_has(tmp_path):
    from inferlab.bench.plots import throughput_series

    rows = [_backend_classify_row("hf", 30.0, 16), _backend_classify_row("hf", 40.0, 32),
            _backend_classify_row("inferlab", 120.0)]
    series = {label: (points, levels) for label, points, levels in throughput_series(rows)}
    assert series == {"backend=hf": ([(16, 30.0), (32, 40.0)], []),
                      "backend=inferlab": ([], [120.0])}  # the engine's packed batches: batch_size None, a level
    write_report(["s"], rows, tmp_path)
    assert len(list((tmp_path / "plots").glob("*.png"))) == 1


def test_recommend_and_compare_fit_a_100_column_terminal_and_the_report_holds_the_whole_table(tmp_path):
    """The committed H100 seed-classify rows: long labels and verdicts wrap inside 100 columns; the whole
    table is the report's "Recommendations" section and --markdown."""
    from pathlib import Path

    from inferlab.bench.recommend import format_text
    from inferlab.bench.results import load_rows

    rows = load_rows([Path(__file__).parents[3] / "benchmarks/results/2026-11-26-h100-seed-classify.jsonl"])
    text = format_text(recommend(rows))
    assert max(len(line) for line in text.splitlines()) <= 100 and "None" not in text
    assert "verdict:" in text and "recommend --markdown" in text
    report = write_report(["r"], rows, tmp_path).read_text()
    assert "## Recommendations" in report and format_markdown(recommend(rows)) in report

    long = {"attn_implementation": "sdpa", "sdpa_backend": "cudnn", "processor": "python", "kv_cache": "static"}
    dynamic = _gen_cell(kv_cache="dynamic")
    a = [_row(_gen_cell(**long, batch_size=n), 100.0 + n) for n in (16, 64)] + [_row(dynamic, 90.0)]
    b = [_row(_gen_cell(**long, batch_size=n), 120.0 + n) for n in (16, 64)] + [_row(dynamic, 80.0)]
    cmp = compare_rows(a, b)
    text = format_comparison(cmp, "runs/a", "runs/b")
    assert max(len(line) for line in text.splitlines()) <= 100 and "+17.2%" in text and "better" in text
    assert "| cell | metric |" in format_comparison(cmp, "runs/a", "runs/b", markdown=True)


def test_a_cells_rows_in_three_runs_are_its_repeats():
    def run(tps_a, tps_b):
        return [_row(_gen_cell("tiny", kv_cache="dynamic", num_prompts=16), tps_a),
                _row(_gen_cell("tiny", kv_cache="static", compile=False, num_prompts=16), tps_b)]

    once = recommend(run(100.0, 110.0))[0]
    assert once.recommended == "-" and "1 made, 2 more of each would decide it" in once.verdict
    thrice = recommend(run(100.0, 110.0) + run(101.0, 111.0) + run(99.0, 112.0))[0]
    assert thrice.recommended == "kv_cache=static" and thrice.best_value == 111.0
    assert thrice.spread == pytest.approx((112.0 - 110.0) / 111.0)
    assert thrice.verdict == f"kv_cache=static ({111.0 / 100.0 - 1:.1%} ahead of kv_cache=dynamic, spread 2.0%)"


def test_report_and_recommend_show_one_spread(tmp_path):
    """A row whose calls have a tight interquartile range and one outlier: the report's spread column and
    recommend's are the same relative range of the row's timed calls (not the row's stored IQR figure)."""
    from inferlab.bench.recommend import _pct
    from inferlab.bench.results import row_spread

    stats = {"n": 5, "median": 1.0, "min": 0.5, "max": 1.02}
    rows = [_row(_gen_cell("tiny", kv_cache="dynamic", num_prompts=16), 100.0, spread=0.02, call_s_stats=stats),
            _row(_gen_cell("tiny", kv_cache="static", compile=False, num_prompts=16), 90.0,
                 call_s_stats={"n": 5, "median": 1.0, "min": 0.99, "max": 1.01})]
    spread = row_spread(rows[0])[0]
    assert spread == pytest.approx(1.0 / 0.5 - 1.0 / 1.02)
    rec = recommend(rows)[0]
    assert rec.spread == spread
    table = write_report(["s"], rows, tmp_path).read_text()
    line = next(l for l in table.splitlines() if l.startswith("| **kv_cache=dynamic"))
    assert f"| {spread * 100:.1f}% |" in line and _pct(rec.spread) == f"{spread * 100:.1f}%" and "| 2% |" not in line


def _checked_row(weights: str, share: float | None, decidable: int, model: str = "qwen2-cls", **extra):
    cell = next(c for c in build_plan(get_plan_preset("seed-classify")).cells
                if c.backend == "inferlab" and c.model == model and c.config["weights"] == weights
                and c.config["check_texts"])
    metrics = {"requests_per_s": 300.0, "latency_ms": {"p50": 1.0, "p95": 3.0, "p99": 4.0}, "check_texts": 256,
               "labels_agree_with_hf": 0.95, "labels_decidable": decidable, "labels_agree_with_hf_decidable": share,
               "label_margin_tolerance": 0.0812, "label_tolerance_dtype": "float32", **extra}
    return make_row(cell, Outcome("ok", "", metrics), run_id="r1", env=H100)


def test_label_agreement_is_judged_where_decidable_and_printed_beside_the_raw_share(tmp_path):
    trained = "qwen2-cls-aromatic"
    rows = [_checked_row("auto", 0.996, 240), _checked_row("fp8", 0.985, 240), _checked_row("auto", None, 0, trained),
            _checked_row("fp8", 0.999, 980, trained, accuracy=0.975, hf_accuracy=0.98),
            _classify_row(40.0, quantization="none", attn_implementation="eager", batch_size=1)]  # not checked
    findings = label_findings(rows)
    assert [(f.verdict, f.criterion) for f in findings] == [
        ("holds", ">= 99.5% of decidable rows"), ("does not hold", ">= 99.0% of decidable rows"),
        ("not measured", ">= 99.5% of decidable rows"), ("holds", ">= 99.0% of decidable rows")]
    assert findings[0].measured.startswith("99.6% of 240 decidable rows (transformers' margin > 0.0812, from bfloat16 "
                                           "vs float32); all 256 rows: 95.0%")
    assert findings[3].measured.endswith("accuracy 97.5% (transformers 98.0%)") and "fp8 weights" in findings[3].claim
    text = write_report(["r"], rows, tmp_path / "rep").read_text()
    section = text.split("## Labels beside transformers'", 1)[1].split("\n## ", 1)[0]
    assert section.count("**holds**") == 2 and "**does not hold**" in section and "On NVIDIA H100" in section
    results = text.split("## Results", 1)[1]
    assert "| labels = hf | = hf where decidable | accuracy (hf) |" in results
    assert "| 95.0% | 99.6% of 240 | - |" in results and "| 95.0% | 99.9% of 980 | 97.5% (98.0%) |" in results
    assert "## Labels beside transformers'" not in write_report(["r"], rows[-1:], tmp_path / "rep2").read_text()


def test_the_report_shows_a_profiled_prefill_by_family():
    from inferlab.bench.report_prefill import render_section

    profile = {"batches": 8, "passes": 2, "kernels_us": 900.0, "wall_us": 1000.0, "busy": 0.9,
               "families": [{"family": "gemm", "us": 600.0, "share": 0.667, "tflops": 500.0, "pct_of_matmul_peak": 63.4},
                            {"family": "attention", "us": 300.0, "share": 0.333, "tflops": 210.0,
                             "pct_of_matmul_peak": 26.6}],
               "top_kernels": [{"kernel": "nvjet_x", "family": "gemm", "us": 600.0}]}
    rows = [{"status": "ok", "scenario": "classify", "model": "qwen2-cls", "backend": "inferlab",
             "config": {"min_tokens": 1024, "max_tokens": 5557}, "env": {"gpu": "NVIDIA H200"},
             "metrics": {"prefill_profile": profile, "engine": {"weights": "auto"}}},
            {"status": "ok", "scenario": "classify", "metrics": {}}]
    text = "\n".join(render_section(rows))
    assert "## The packed prefill by kernel family" in text and "1024-5557 tokens" in text
    assert "| gemm | 600 | 67% | 500 | 63.4 |" in text and "busy 90%" in text and "| nvjet_x | gemm | 600 |" in text
    assert render_section([rows[1]]) == []


def test_the_report_draws_the_profiled_prefills(tmp_path):
    from inferlab.bench.report_prefill import write_plot

    profile = {"batches": 2, "passes": 2, "kernels_us": 10.0, "wall_us": 12.0, "busy": 0.83,
               "families": [{"family": "gemm", "us": 7.0, "share": 0.7}, {"family": "norm", "us": 3.0, "share": 0.3}]}
    row = {"status": "ok", "scenario": "hidden-states", "model": "llama-380m", "backend": "inferlab",
           "config": {"pool": "mean"}, "env": {}, "metrics": {"prefill_profile": profile}}
    path = write_plot([row, {**row, "config": {"pool": "last"}}], tmp_path)
    assert path is not None and path.name == "prefill-profile.png" and path.stat().st_size > 1000
    assert write_plot([{"status": "ok", "metrics": {}}], tmp_path / "none") is None
