"""`--kv-dtype auto|fp8` on the engine workloads: generate runs the FP8 cache, conformers generate passes it to
the engine (tune takes the list it tries, --kv-dtypes), and the text workload never falls back to the hf
backend (which has no FP8 cache) when fp8 was asked for."""

from __future__ import annotations

import json

import pytest

from inferlab.cli import build_parser, main
from inferlab.engine import EngineConfig
from inferlab.errors import ConfigError, UnsupportedError
from inferlab.workloads.text import open_backend


def test_generate_runs_with_an_fp8_cache(tiny_checkpoint, tmp_path):
    prompts = tmp_path / "in.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt_ids": [5 + i, 9, 100]}) + "\n" for i in range(3)))
    out = tmp_path / "out.jsonl"
    code = main(["generate", "--model", str(tiny_checkpoint("tiny")), "--input", str(prompts), "--output", str(out),
                 "--device", "cpu", "--temperature", "0", "--max-new-tokens", "5", "--max-slots", "2",
                 "--kv-dtype", "fp8"])  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == 0 and len(rows) == 3 and all(r["error"] is None and r["output_tokens"] >= 1 for r in rows)


def test_fp8_is_never_silently_dropped_by_the_hf_fallback(tiny_checkpoint, tmp_path):
    with pytest.raises(ConfigError, match="--backend inferlab, or --kv-dtype auto"):
        open_backend("hf", EngineConfig(model=str(tiny_checkpoint("tiny")), device="cpu", kv_dtype="fp8"))
    other = tmp_path / "gpt2"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    with pytest.raises(UnsupportedError, match="use --kv-dtype auto to run this model on the hf backend"):
        open_backend("auto", EngineConfig(model=str(other), device="cpu", kv_dtype="fp8"))


def test_conformers_and_tune_pass_the_kv_dtype_to_the_engine():
    from inferlab.cli.engine_args import engine_config_from
    from inferlab.workloads.tune.sweep import TuneSettings

    args = build_parser().parse_args(["conformers", "generate", "--model", "m", "--input", "x.smi", "--output", "o.sdf",
                                      "--kv-dtype", "fp8"])  # fmt: skip
    assert engine_config_from(args).kv_dtype == "fp8" and engine_config_from(args).forced_run_tokens == 0
    forced = build_parser().parse_args(["conformers", "generate", "--model", "m", "--input", "x.smi", "--output",
                                        "o.sdf", "--forced-run-tokens", "4"])  # fmt: skip
    assert engine_config_from(forced).forced_run_tokens == 4
    with pytest.raises(ConfigError, match="forced_run_tokens=9"):
        engine_config_from(build_parser().parse_args(["conformers", "generate", "--model", "m", "--input", "x.smi",
                                                      "--output", "o.sdf", "--forced-run-tokens", "9"]))
    tune = build_parser().parse_args(["tune", "--model", "m", "--workload", "conformers", "--sample", "x.smi",
                                      "--kv-dtypes", "auto,fp8"])  # fmt: skip
    assert tune.kv_dtypes == ("auto", "fp8")
    with pytest.raises(ConfigError, match="classify has no KV cache"):
        TuneSettings(workload="classify", model="m", sample="s.jsonl", kv_dtypes=("fp8",))


def test_fp8_on_a_cpu_says_what_it_does_there(caplog):
    import logging

    import torch

    from inferlab.engine.startup import resolve_kv_dtype

    with caplog.at_level(logging.WARNING, logger="inferlab.engine.startup"):
        assert resolve_kv_dtype("fp8", torch.float32, torch.device("cpu")) == torch.float8_e4m3fn
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "on the cpu: the K/V are stored as e4m3" in said and "torch reference path" in said
    assert "slower than the model dtype" in said
