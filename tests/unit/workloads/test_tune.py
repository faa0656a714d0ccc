"""`inferlab tune` on CPU with tiny models: every candidate is measured warm in >= 3 timed passes (median and
spread in the file), the engine's grid doubles up to what its memory plan fits (never fp8 on CPU), a
setting is recommended only when it wins past the measured spread (else the file sets nothing), a
budget stops the sweep and a rerun goes on from the work dir; `--config FILE` on generate, classify and
conformers generate applies it, explicit flags win (even one equal to its default), and a file for
another workload or with a bad value is refused clearly."""

from __future__ import annotations

import json

import pytest
import torch

from inferlab.cli import build_parser, main
from inferlab.cli.tuned_config_args import apply_tuned_config
from inferlab.errors import ConfigError
from inferlab.models.tokenizer_loading import load_tokenizer
from inferlab.workloads.tune.candidates import doubling_sizes, useful_sizes
from inferlab.workloads.tune.runners import pass_figures
from inferlab.workloads.tune.tuned_file import FORMAT


pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def write_lines(path, rows: list[dict]):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def tune(model, workload, sample, out, *extra) -> int:
    return main(["tune", "--model", str(model), "--workload", workload, "--sample", str(sample), "--out", str(out),
                 "--device", "cpu", "--min-seconds", "0.05", *extra])


def parsed(argv: list[str]):
    args = build_parser().parse_args(argv)
    apply_tuned_config(args)
    return args


def check_measured(tuned: dict, workload: str, metric: str, settings: list[dict], rows: int,
                   min_seconds: float = 0.05) -> None:
    assert tuned["format"] == FORMAT and tuned["workload"] == workload and tuned["metric"] == metric
    assert [c["settings"] for c in tuned["candidates"]] == settings
    figures = [c["figures"] for c in tuned["candidates"]]
    for f in figures:
        per_pass = f[f"{metric}_per_pass"]
        assert f["passes"] == 3 == len(per_pass) and f["seconds"] >= 3 * min_seconds
        assert f[metric] == pytest.approx(sorted(per_pass)[1], rel=1e-4) and f["spread"] == pytest.approx(
            (max(per_pass) - min(per_pass)) / f[metric], rel=1e-3)
        done = f["rows" if workload != "conformers" else "conformers"]
        assert done >= 3 * rows and done % rows == 0  # whole runs of the sample, >= 1 per pass
    best = max(range(len(figures)), key=lambda i: figures[i][metric])
    assert tuned["best"] == settings[best]
    clear = {v["knob"]: v["value"] for v in tuned["verdicts"] if v["clear"]}
    assert tuned["recommended"] == clear and all(settings[best][k] == v for k, v in clear.items())
    ranked = sorted((f[metric] for f in figures), reverse=True)
    assert tuned["runner_up_margin"] == pytest.approx(ranked[0] / ranked[1] - 1, abs=1e-4)
    env = tuned["environment"]
    assert env["torch"] == torch.__version__ and env["device_kind"] == "cpu" and env["python"]


def test_useful_sizes_stop_at_the_first_reaching_the_sample():
    assert useful_sizes([32, 8, 16, 64], 10) == [8, 16]
    assert useful_sizes([4, 8], 100) == [4, 8]
    assert useful_sizes([256, 128], 3) == [128]


def test_doubling_sizes_end_at_the_largest_and_keep_the_largest_four():
    assert doubling_sizes(64, 540) == [64, 128, 256, 540]  # 512 is within a quarter of 540
    assert doubling_sizes(64, 285) == [64, 128, 285]
    assert doubling_sizes(64, 512) == [64, 128, 256, 512]
    assert doubling_sizes(16, 1500) == [256, 512, 1024, 1500]
    assert doubling_sizes(64, 40) == [40]
    with pytest.raises(ConfigError, match="no row fits"):
        doubling_sizes(2, 0)


def test_generate_tuned_and_applied(tmp_path, tiny_checkpoint, capsys):
    model = tiny_checkpoint("tiny")
    sample = write_lines(tmp_path / "prompts.jsonl", [{"id": f"p{i}", "prompt": "count " * (i + 1)} for i in range(6)])
    out = tmp_path / "tuned.json"
    assert tune(model, "generate", sample, out, "--sizes", "1,2,4", "--max-new-tokens", "4") == 0
    tuned = json.loads(out.read_text())
    check_measured(tuned, "generate", "output_tokens_per_s",
                   [{"max_slots": n, "kv_dtype": "auto"} for n in (1, 2, 4)], 6)  # the model dtype only: a CPU
    for c in tuned["candidates"]:
        f = c["figures"]
        assert min(f["output_tokens_per_s_per_pass"]) * 0.99 <= f["output_tokens"] / f["seconds"]
        assert f["output_tokens"] / f["seconds"] <= max(f["output_tokens_per_s_per_pass"]) * 1.01
        assert 0 < f["output_tokens"] <= f["rows"] * 4 and f["error_rows"] == 0 and f["warmup_s"] > 0
    text = capsys.readouterr().out
    assert "median of 3 passes, spread" in text and ("recommended: " in text or "no clear winner" in text)
    tokenizer = load_tokenizer(model)  # every candidate ran at the sample's need: longest prompt + new tokens
    assert tuned["sample"]["max_seq_len"] == max(len(tokenizer("count " * (i + 1)).input_ids) for i in range(6)) + 4

    base = ["generate", "--model", str(model), "--input", str(sample), "--output", str(tmp_path / "out.jsonl")]
    assert parsed(base).max_slots is None  # no file: the flag's own default
    assert parsed(base + ["--config", str(out)]).max_slots == tuned["recommended"].get("max_slots")
    assert parsed(base + ["--config", str(out), "--max-slots", "3"]).max_slots == 3
    assert main(base + ["--config", str(out), "--device", "cpu", "--max-new-tokens", "3", "--temperature", "0"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["error"] is None and r["output_tokens"] <= 3 for r in rows)


def test_classify_tuned_applied_and_explicit_flags_win(tmp_path, tiny_checkpoint):
    model = tiny_checkpoint("tiny-qwen2-cls")
    sample = write_lines(tmp_path / "texts.jsonl", [{"id": f"t{i}", "text": "same words here"} for i in range(7)])
    out = tmp_path / "tuned.json"
    assert tune(model, "classify", sample, out, "--sizes", "3") == 0
    tuned = json.loads(out.read_text())
    expected = [{"dtype": "float32", "attn": attn, "batch_size": 3} for attn in ("sdpa", "eager")]
    check_measured(tuned, "classify", "rows_per_s", expected, 7)
    assert [v["knob"] for v in tuned["verdicts"]] == ["attn"]  # one batch size and dtype: nothing to compare
    out.write_text(json.dumps(dict(tuned, recommended={"batch_size": 3, "dtype": "float32", "attn": "sdpa"})))

    def classify(output, *extra) -> list[dict]:
        assert main(["classify", "--model", str(model), "--input", str(sample), "--output", str(output),
                     "--device", "cpu", "--config", str(out), *extra]) == 0
        return [json.loads(line) for line in output.read_text().splitlines()]

    rows = classify(tmp_path / "tuned-rows.jsonl", "--backend", "hf")
    assert len(rows) == 7 and max(r["batch_rows"] for r in rows) == 3  # the file's batch size ran
    rows = classify(tmp_path / "explicit-rows.jsonl", "--backend", "hf", "--batch-size", "16")
    assert max(r["batch_rows"] for r in rows) == 7
    rows = classify(tmp_path / "engine-rows.jsonl")  # auto: the engine; a batch size tuned on transformers is not its
    assert max(r["batch_rows"] for r in rows) == 7
    rows = classify(tmp_path / "engine-capped-rows.jsonl", "--batch-size", "2")  # given on the command line: it is
    assert max(r["batch_rows"] for r in rows) == 2
    args = parsed(["classify", "--model", str(model), "--input", "x", "--output", "y", "--config", str(out),
                   "--attn", "sdpa"])
    assert (args.batch_size, args.dtype, args.attn) == (3, "float32", "sdpa")


def test_conformers_tuned_and_applied(tmp_path, tiny_checkpoint):
    model = tiny_checkpoint("tiny")
    sample = tmp_path / "molecules.smi"
    sample.write_text("CO methanol\nC1CC broken\n")
    out = tmp_path / "tuned.json"
    assert tune(model, "conformers", sample, out, "--sizes", "1,2", "--num-conformers", "2", "--min-seconds", "0") == 0
    tuned = json.loads(out.read_text())
    # one token per step over the sizes, then forced tokens in bulk at the best of them
    best_size = max(tuned["candidates"][:2], key=lambda c: c["figures"]["conformers_per_s"])["settings"]["max_slots"]
    check_measured(tuned, "conformers", "conformers_per_s",
                   [{"max_slots": n, "kv_dtype": "auto", "forced_run_tokens": 0} for n in (1, 2)]
                   + [{"max_slots": best_size, "kv_dtype": "auto", "forced_run_tokens": 4}], 2, min_seconds=0)
    for c in tuned["candidates"]:
        f = c["figures"]
        assert f["valid_fraction"] == 1.0 and f["error_rows"] == f["conformers"] and f["start_s"] > 0  # K=2 each
    recommended = tuned["recommended"].get("max_slots")
    for command in (["conformers", "generate"], ["conformers"]):  # the alias form takes it too
        base = command + ["--model", str(model), "--input", str(sample), "--output", "o.sdf"]
        assert parsed(base + ["--config", str(out)]).max_slots == (recommended or "auto")  # auto: the default
        assert parsed(base + ["--config", str(out), "--max-slots", "7"]).max_slots == 7
        assert parsed(base).max_slots == "auto"
        assert parsed(base + ["--config", str(out)]).forced_run_tokens == tuned["recommended"].get("forced_run_tokens", 0)
        assert parsed(base + ["--config", str(out), "--forced-run-tokens", "2"]).forced_run_tokens == 2
    # run: the file's max_slots is a ceiling for the memory plan (a job of longer rows than the sample's fits)
    out.write_text(json.dumps(dict(tuned, recommended={"max_slots": 3})))
    summary = tmp_path / "summary.json"
    assert main(["conformers", "generate", "--model", str(model), "--input", str(sample), "--output",
                 str(tmp_path / "run.sdf"), "--num-conformers", "2", "--device", "cpu", "--config", str(out),
                 "--summary-json", str(summary)]) == 0
    assert "the tune's max_slots (--config)" in json.loads(summary.read_text())["sizing"]["slots"]


def test_a_wrong_or_bad_file_is_refused(tmp_path, capsys):
    base = ["generate", "--model", "m", "--input", "i", "--output", "o", "--config"]
    tuned = {"format": FORMAT, "workload": "classify", "model": "m", "metric": "rows_per_s",
             "recommended": {"batch_size": 4}}
    path = write_lines(tmp_path / "tuned.json", [tuned])
    with pytest.raises(ConfigError, match="tuned for 'classify', not generate"):
        parsed(base + [str(path)])
    write_lines(path, [dict(tuned, workload="generate")])
    with pytest.raises(ConfigError, match="batch_size cannot be set for generate"):
        parsed(base + [str(path)])
    write_lines(path, [dict(tuned, recommended={"attn": "bogus"})])
    with pytest.raises(ConfigError, match="attn='bogus' is not one of"):
        parsed(["classify", "--model", "m", "--input", "i", "--output", "o", "--config", str(path)])
    path.write_text("{not json")
    assert main(base + [str(path)]) == 2 and "is not valid JSON" in capsys.readouterr().err


class FixedRates:
    """A generate runner whose passes run at given rates (per max_slots): the choice alone is under test."""

    metric = "output_tokens_per_s"
    rates: dict[int, list[float]] = {}
    measured: list[int] = []

    def __init__(self, job) -> None:
        pass

    def measure(self, candidate: dict, index: int) -> dict:
        FixedRates.measured.append(candidate["max_slots"])
        return pass_figures([(1.0, {"output_tokens": rate}) for rate in self.rates[candidate["max_slots"]]],
                            "output_tokens", self.metric)

    def close(self) -> None:
        pass


@pytest.fixture()
def fixed_rates(monkeypatch):
    from inferlab.workloads.tune.runners import RUNNERS

    monkeypatch.setitem(RUNNERS, "generate", FixedRates)
    monkeypatch.setattr(FixedRates, "measured", [])
    return FixedRates


@pytest.fixture()
def prompts(tmp_path):
    return write_lines(tmp_path / "prompts.jsonl", [{"id": f"p{i}", "prompt": "count " * (i % 3 + 1)} for i in range(6)])


def test_a_margin_inside_the_spread_names_no_winner(tmp_path, tiny_checkpoint, prompts, fixed_rates, capsys):
    model, out = tiny_checkpoint("tiny"), tmp_path / "tuned.json"
    fixed_rates.rates = {1: [100.0, 80.0, 120.0], 2: [103.5, 95.0, 115.0]}  # 3.5% ahead, spreads 40% and 19%
    assert tune(model, "generate", prompts, out, "--backend", "hf", "--sizes", "1,2") == 0
    tuned = json.loads(out.read_text())
    assert tuned["recommended"] == {} and tuned["best"] == {"max_slots": 2}
    [verdict] = tuned["verdicts"]
    assert not verdict["clear"] and verdict["margin"] == pytest.approx(0.035) and verdict["spread"] == pytest.approx(0.4)
    text = capsys.readouterr().out
    assert "max_slots: no clear winner (max_slots=2 leads max_slots=1 by 3.5%, inside the spread 40.0%)" in text
    assert "no clear winner: the file sets nothing" in text
    base = ["generate", "--model", str(model), "--input", str(prompts), "--output", "o.jsonl", "--config", str(out)]
    assert parsed(base).max_slots is None  # the command's own default

    fixed_rates.rates = {1: [100.0, 99.0, 101.0], 2: [150.0, 149.0, 151.0]}  # 50% ahead, spreads of 2%
    assert tune(model, "generate", prompts, out, "--backend", "hf", "--sizes", "1,2") == 0
    tuned = json.loads(out.read_text())
    assert tuned["recommended"] == {"max_slots": 2} and tuned["verdicts"][0]["clear"]
    assert "recommended: max_slots=2" in capsys.readouterr().out and parsed(base).max_slots == 2


def test_the_engine_grid_reaches_the_memory_plans_largest_slots(tmp_path, tiny_checkpoint):
    from inferlab.engine.config import EngineConfig
    from inferlab.engine.startup import plan_without_loading
    from inferlab.workloads.tune.row_lengths import generate_row_length
    from inferlab.workloads.tune.sweep import TuneSettings, run_sweep

    model = str(tiny_checkpoint("tiny"))
    sample = write_lines(tmp_path / "prompts.jsonl", [{"id": f"p{i}", "prompt": "count " * (i % 3 + 1)} for i in range(12)])
    length = generate_row_length(sample, model, 4)
    eight_rows = plan_without_loading(EngineConfig(model=model, device="cpu", max_slots=8, max_seq_len=length,
                                                   memory_budget_bytes=1 << 40)).total_bytes
    settings = TuneSettings("generate", model, str(sample), device="cpu", max_new_tokens=4, min_seconds=0,
                            memory_budget_bytes=eight_rows)  # the budget of exactly eight rows
    tuned = run_sweep(settings)
    # the top 2% below the plan's largest (candidates.TOP_HEADROOM: 8 -> 7)
    assert tuned.grid == [{"kv_dtype": "auto", "max_seq_len": length, "memory_slots": 8, "requests": 12, "largest": 7,
                           "bound": "memory plan"}]
    # largest first (descent.py); a size left out by the descent is a row that says why
    assert [c["settings"] for c in tuned.candidates] == [{"max_slots": n, "kv_dtype": "auto"} for n in (7, 4, 2)]
    assert all(c["figures"]["rows"] == 3 * 12 and c["figures"]["error_rows"] == 0 for c in tuned.candidates
               if "skipped" not in c)
    assert "figures" in tuned.candidates[0] and "figures" in tuned.candidates[1]


def _engine_sweep_with_rates(tmp_path, tiny_checkpoint, fixed_rates, rates):
    from inferlab.engine.config import EngineConfig
    from inferlab.engine.startup import plan_without_loading
    from inferlab.workloads.tune.row_lengths import generate_row_length
    from inferlab.workloads.tune.sweep import TuneSettings, run_sweep

    model = str(tiny_checkpoint("tiny"))
    sample = write_lines(tmp_path / "prompts.jsonl", [{"id": f"p{i}", "prompt": "count"} for i in range(12)])
    length = generate_row_length(sample, model, 4)
    budget = plan_without_loading(EngineConfig(model=model, device="cpu", max_slots=8, max_seq_len=length,
                                               memory_budget_bytes=1 << 40)).total_bytes
    fixed_rates.rates = rates
    return run_sweep(TuneSettings("generate", model, str(sample), device="cpu", backend="inferlab", max_new_tokens=4,
                                  min_seconds=0, memory_budget_bytes=budget))  # the engine grid 7, 4, 2


def test_the_descent_leaves_out_sizes_below_one_clearly_slower(tmp_path, tiny_checkpoint, fixed_rates):
    tuned = _engine_sweep_with_rates(tmp_path, tiny_checkpoint, fixed_rates,
                                     {7: [300.0, 298.0, 302.0], 4: [200.0, 199.0, 201.0], 2: [100.0] * 3})
    assert fixed_rates.measured == [7, 4]  # 4 ran 50% below 7, past both spreads: 2 is left out
    skipped = tuned.candidates[2]
    assert skipped["settings"]["max_slots"] == 2 and "max_slots=4 ran 50.0% below max_slots=7" in skipped["skipped"]
    assert tuned.best == {"max_slots": 7, "kv_dtype": "auto"}


def test_the_descent_goes_on_while_a_smaller_size_is_inside_the_spread(tmp_path, tiny_checkpoint, fixed_rates):
    tuned = _engine_sweep_with_rates(tmp_path, tiny_checkpoint, fixed_rates,
                                     {7: [300.0, 240.0, 330.0], 4: [290.0, 280.0, 300.0], 2: [100.0] * 3})
    assert fixed_rates.measured == [7, 4, 2]  # 4 is 3% behind, inside 7's 30% spread: the descent goes on
    assert all("figures" in c for c in tuned.candidates)


def test_a_budget_stops_the_sweep_and_a_rerun_measures_only_the_rest(tmp_path, tiny_checkpoint, prompts, fixed_rates,
                                                                      capsys):
    model, out = tiny_checkpoint("tiny"), tmp_path / "tuned.json"
    fixed_rates.rates = {n: [100.0 * n] * 3 for n in (1, 2, 3)}
    args = ["--backend", "hf", "--sizes", "1,2,3", "--work-dir", str(tmp_path / "work"), "--budget-s", "0.000001"]
    assert [tune(model, "generate", prompts, out, *args) for _ in range(3)] == [3, 3, 0]
    assert fixed_rates.measured == [1, 2, 3]  # one new candidate per run, the earlier ones reused
    text = capsys.readouterr().out
    assert "not finished: 1 of 3 candidates measured" in text and "not finished: 2 of 3" in text
    assert [c["settings"]["max_slots"] for c in json.loads(out.read_text())["candidates"]] == [1, 2, 3]
    assert tune(model, "generate", prompts, out, *args[:-2], "--passes", "4") == 0  # other settings: all measured again
    assert fixed_rates.measured == [1, 2, 3, 1, 2, 3]
    capsys.readouterr()
    assert tune(model, "generate", prompts, out, "--budget-s", "5") == 2
    assert "--budget-s) needs a value > 0 and a work_dir (--work-dir" in capsys.readouterr().err


def test_the_kv_dtypes_tried_are_the_devices(monkeypatch):
    import inferlab.engine
    from inferlab.workloads.tune.candidates import engine_kv_dtypes

    assert not inferlab.engine.fp8_kv_supported(torch.device("cpu")) and engine_kv_dtypes("cpu", None) == ("auto",)
    monkeypatch.setattr(inferlab.engine, "fp8_kv_supported", lambda device: True)  # a GPU with FP8 (CUDA >= 8.9)
    assert engine_kv_dtypes("cpu", None) == ("auto", "fp8")
    assert engine_kv_dtypes("cpu", ("fp8", "fp8")) == ("fp8",)  # --kv-dtypes as given


def test_a_tune_file_knows_its_checkpoint_by_its_files_not_its_path(tmp_path, tiny_checkpoint, caplog):
    """--config on the same checkpoint copied elsewhere (another node, another folder) applies without a
    warning; on another checkpoint at the tuned path it warns, naming the files that differ; a file written
    before the identity was recorded compares paths."""
    import logging
    import shutil
    from pathlib import Path

    from inferlab.models.checkpoint_identity import checkpoint_identity
    from inferlab.workloads.tune.tuned_file import TunedConfig, model_mismatch, write_tuned_config

    model = Path(tiny_checkpoint("tiny"))
    copy = tmp_path / "copy"
    shutil.copytree(model, copy)
    tuned = TunedConfig(workload="generate", model=str(model.resolve()), metric="output_tokens_per_s",
                        recommended={"max_slots": 4}, model_identity=checkpoint_identity(model))
    assert model_mismatch(tuned, model) is None and model_mismatch(tuned, copy) is None
    config = copy / "config.json"
    config.write_text(config.read_text().replace("}", ', "note": 1}', 1))
    assert model_mismatch(tuned, copy) == "its files differ (config.json)"
    old = TunedConfig(workload="generate", model=str(model.resolve()), metric="output_tokens_per_s",
                      recommended={"max_slots": 4})
    assert model_mismatch(old, model) is None and model_mismatch(old, copy) == "another path"
    path = write_tuned_config(tuned, tmp_path / "tuned.json")
    with caplog.at_level(logging.WARNING):
        args = parsed(["generate", "--model", str(copy), "--input", "in.jsonl", "--output", "out.jsonl",
                       "--config", str(path)])
    assert args.max_slots == 4 and "its files differ (config.json)" in caplog.text


def test_the_forced_runs_candidate_goes_at_each_kv_dtypes_best_size_after_its_group():
    """candidates.forced_runs_at through sweep._forced_runs_after: after a KV dtype's last size (not before),
    at its best measured size one token per step, never after a forced-runs candidate, not for generate, and
    not when the settings try no width or no size of the group ran."""
    from inferlab.workloads.tune.sweep import TuneSettings, _forced_runs_after

    def ran(size, kv, rate, forced=0):
        return {"settings": {"max_slots": size, "kv_dtype": kv, "forced_run_tokens": forced},
                "figures": {"conformers_per_s": rate}}

    measured = [ran(64, "auto", 5.0), ran(32, "auto", 7.0), {"settings": {"max_slots": 64, "kv_dtype": "fp8",
                                                                          "forced_run_tokens": 0}, "error": "OOM"}]
    candidates = [m["settings"] for m in measured]
    settings = TuneSettings("conformers", "m", "s.smi")
    metric = "conformers_per_s"
    assert _forced_runs_after(settings, candidates, 0, measured[:1], metric) is None  # auto's group goes on
    assert _forced_runs_after(settings, candidates, 1, measured[:2], metric) == {
        "max_slots": 32, "kv_dtype": "auto", "forced_run_tokens": 4}  # the best of the group, not its last
    assert _forced_runs_after(settings, candidates, 2, measured, metric) is None  # no fp8 size ran
    follow_up = [*candidates[:2], {"max_slots": 32, "kv_dtype": "auto", "forced_run_tokens": 4}]
    assert _forced_runs_after(settings, follow_up, 2, [*measured[:2], ran(32, "auto", 8.0, 4)], metric) is None
    off = TuneSettings("conformers", "m", "s.smi", forced_run_tokens=0)
    assert _forced_runs_after(off, candidates, 1, measured[:2], metric) is None
    with pytest.raises(ConfigError, match="forced_run_tokens=-1"):
        TuneSettings("conformers", "m", "s.smi", forced_run_tokens=-1)
