"""`inferlab tune` on CPU with tiny models: the file holds every candidate's measured figures, the
environment and, as the recommendation, the candidate with the best figure; `--config FILE` on generate,
classify and conformers generate applies it, explicit flags win (even one equal to its default), and a
file for another workload or with a bad value is refused clearly."""

from __future__ import annotations

import json

import pytest
import torch

from inferlab.cli import build_parser, main
from inferlab.cli.tuned_config_args import apply_tuned_config
from inferlab.errors import ConfigError
from inferlab.workloads.tune.candidates import useful_sizes
from inferlab.workloads.tune.tuned_file import FORMAT


pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def write_lines(path, rows: list[dict]):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def tune(model, workload, sample, out, *extra) -> int:
    return main(["tune", "--model", str(model), "--workload", workload, "--sample", str(sample), "--out", str(out),
                 "--device", "cpu", "--min-seconds", "0.2", *extra])


def parsed(argv: list[str]):
    args = build_parser().parse_args(argv)
    apply_tuned_config(args)
    return args


def check_measured(tuned: dict, workload: str, metric: str, settings: list[dict], rows: int,
                   min_seconds: float = 0.2) -> None:
    assert tuned["format"] == FORMAT and tuned["workload"] == workload and tuned["metric"] == metric
    assert [c["settings"] for c in tuned["candidates"]] == settings
    figures = [c["figures"] for c in tuned["candidates"]]
    for f in figures:
        assert f["passes"] >= 1 and f["seconds"] >= min_seconds or f["passes"] == 100
        assert f["rows" if workload != "conformers" else "conformers"] == rows * f["passes"]
    best = max(range(len(figures)), key=lambda i: figures[i][metric])
    assert tuned["recommended"] == settings[best]
    ranked = sorted((f[metric] for f in figures), reverse=True)
    assert tuned["runner_up_margin"] == pytest.approx(ranked[0] / ranked[1] - 1, abs=1e-4)
    env = tuned["environment"]
    assert env["torch"] == torch.__version__ and env["device_kind"] == "cpu" and env["python"]


def test_useful_sizes_stop_at_the_first_reaching_the_sample():
    assert useful_sizes([32, 8, 16, 64], 10) == [8, 16]
    assert useful_sizes([4, 8], 100) == [4, 8]
    assert useful_sizes([256, 128], 3) == [128]


def test_generate_tuned_and_applied(tmp_path, tiny_checkpoint, capsys):
    model = tiny_checkpoint("tiny")
    sample = write_lines(tmp_path / "prompts.jsonl", [{"id": f"p{i}", "prompt": "count " * (i + 1)} for i in range(6)])
    out = tmp_path / "tuned.json"
    assert tune(model, "generate", sample, out, "--sizes", "1,2,4", "--max-new-tokens", "4") == 0
    tuned = json.loads(out.read_text())
    check_measured(tuned, "generate", "output_tokens_per_s", [{"max_slots": 1}, {"max_slots": 2}, {"max_slots": 4}], 6)
    for c in tuned["candidates"]:
        f = c["figures"]
        assert f["output_tokens_per_s"] == pytest.approx(f["output_tokens"] / f["seconds"], rel=1e-2)
        assert 0 < f["output_tokens"] <= 6 * 4 * f["passes"] and f["error_rows"] == 0
    assert "recommended: max_slots=" in capsys.readouterr().out

    base = ["generate", "--model", str(model), "--input", str(sample), "--output", str(tmp_path / "out.jsonl")]
    assert parsed(base).max_slots is None  # no file: the flag's own default
    assert parsed(base + ["--config", str(out)]).max_slots == tuned["recommended"]["max_slots"]
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
    check_measured(tuned, "conformers", "conformers_per_s", [{"max_slots": 1}, {"max_slots": 2}], 2, min_seconds=0)
    assert all(c["figures"]["valid_fraction"] == 1.0 and c["figures"]["error_rows"] == 2 for c in tuned["candidates"])
    recommended = tuned["recommended"]["max_slots"]
    for command in (["conformers", "generate"], ["conformers"]):  # the alias form takes it too
        base = command + ["--model", str(model), "--input", str(sample), "--output", "o.sdf"]
        assert parsed(base + ["--config", str(out)]).max_slots == recommended
        assert parsed(base + ["--config", str(out), "--max-slots", "7"]).max_slots == 7
        assert parsed(base).max_slots is None


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
