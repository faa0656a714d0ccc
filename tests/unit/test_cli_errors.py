"""Wrong inputs at the command line: each error names the flag or the file and the fix, exits 2, and comes
before any model is loaded (so these run in milliseconds, on the tiny checkpoint at most)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferlab.cli import in_flag_words, main


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "a", "prompt_ids": [5, 6]}\n')
    text = tmp_path / "prompts.txt"
    text.write_text("hello\n")
    smi = tmp_path / "mols.smi"
    smi.write_text("CCO ethanol\n")
    return {"prompts": prompts, "text": text, "smi": smi, "dir": tmp_path}


def _error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err.strip().splitlines()[-1]  # after any progress bar of a fixture


def test_generate_refuses_paths_it_would_misuse(capsys, files, tiny_checkpoint):
    model, prompts = str(tiny_checkpoint("tiny")), str(files["prompts"])
    base = ["generate", "--model", model, "--device", "cpu"]
    assert _error(capsys, base + ["--input", str(files["text"]), "--output", "o.jsonl"]) == (
        f"error: --input {files['text']}: expected a JSONL file, one object per line (.jsonl or .json or .ndjson); "
        "rename it if it is one"
    )
    assert "is a folder; pass a file path inside it, e.g." in _error(
        capsys, base + ["--input", prompts, "--output", str(files["dir"])])
    assert _error(capsys, base + ["--input", prompts, "--output", prompts]) == (
        f"error: --output {prompts} is the --input file; write the output to a new file"
    )
    assert "--output" in _error(capsys, base + ["--input", prompts, "--output", str(files["dir"] / "o.txt")])
    missing = files["dir"] / "nothere"
    assert f"model folder {missing} does not exist" in _error(
        capsys, ["generate", "--model", str(missing), "--input", prompts, "--output", str(files["dir"] / "o.jsonl")])


def test_config_field_errors_name_the_flag(capsys, files, tiny_checkpoint):
    argv = ["generate", "--model", str(tiny_checkpoint("tiny")), "--input", str(files["prompts"]),
            "--output", str(files["dir"] / "o.jsonl"), "--device", "cpu"]
    assert _error(capsys, argv + ["--max-slots", "0"]) == "error: --max-slots=0 must be >= 1 (or left unset to derive it)"
    assert _error(capsys, argv + ["--top-p", "2"]).startswith("error: --top-p=2.0 must be in (0, 1]")


def test_in_flag_words_rewrites_only_the_commands_own_fields():
    flags = {"max_slots": "--max-slots", "device": "--device"}
    assert in_flag_words("max_slots=0 must be >= 1; use device='cpu'", flags) == (
        "--max-slots=0 must be >= 1; use --device='cpu'"
    )
    assert in_flag_words("knob batch_size=0 is below its minimum 1", flags) == "knob batch_size=0 is below its minimum 1"


def test_conformer_commands_check_their_files(capsys, files, tiny_checkpoint):
    smi = str(files["smi"])
    out_txt = files["dir"] / "out.txt"
    message = _error(capsys, ["conformers", "generate", "--model", str(tiny_checkpoint("tiny")), "--input", smi,
                              "--output", str(out_txt)])
    assert message.startswith(f"error: --output {out_txt}: the command writes an SDF") and "name the file out.sdf" in message
    assert _error(capsys, ["conformers", "evaluate", "--generated", smi, "--reference", smi]).startswith(
        f"error: --generated {smi}: expected an SDF of generated conformers (.sdf)"
    )
    assert "name the file r.sdf" in _error(
        capsys, ["conformers", "reference", "--input", smi, "--output", str(files["dir"] / "r.txt")])
    message = _error(capsys, ["conformers", "generate", "--model", "m", "--input", smi, "--output", "o.sdf",
                              "--sampling", "greedy", "--temperature", "1.5"])
    assert "--sampling greedy takes the argmax: --temperature=1.5" in message
    missing = files["dir"] / "nothere"  # named as missing, not as a folder without tokenizer files
    assert _error(capsys, ["conformers", "generate", "--model", str(missing), "--input", smi, "--output",
                           str(files["dir"] / "o.sdf")]) == (
        f"error: model folder {missing} does not exist; pass a local HuggingFace checkpoint folder as --model "
        "(or make one: inferlab model init --preset tiny --out DIR)")
    assert "has no config.json" in _error(capsys, ["conformers", "--model", str(files["dir"]), "--input", smi,
                                                    "--output", str(files["dir"] / "o.sdf")])


def test_folders_that_are_files_and_missing_heads(capsys, files, tiny_checkpoint):
    text = str(files["text"])
    assert _error(capsys, ["model", "init", "--preset", "tiny", "--output", text]) == (
        f"error: --out {text} is a file; pass a folder (it is created if missing)"
    )
    assert f"--run-dir {text} is a file" in _error(capsys, ["bench", "--preset", "quick", "--run-dir", text])
    causal = tiny_checkpoint("tiny")
    message = _error(capsys, ["classify", "--model", str(causal), "--input", str(files["prompts"]),
                              "--output", str(files["dir"] / "c.jsonl"), "--device", "cpu"])
    assert "is a LlamaForCausalLM checkpoint, without a sequence-classification head" in message
    assert "inferlab model init --preset tiny-qwen2-cls" in message


DEVICE_COMMANDS = {  # every command with --device, and what else it needs to parse
    "generate": ["--model", "m", "--input", "i.jsonl", "--output", "o.jsonl"],
    "conformers generate": ["--model", "m", "--input", "i.smi", "--output", "o.sdf"],
    "classify": ["--model", "m", "--input", "i.jsonl", "--output", "o.jsonl"],
    "hidden-states": ["--model", "m", "--input", "i.jsonl", "--output", "o.safetensors", "--layers", "0"],
    "tune": ["--model", "m", "--workload", "generate", "--sample", "i.jsonl"],
    "demo": [],
}


@pytest.mark.parametrize("command", list(DEVICE_COMMANDS))
def test_a_device_no_command_runs_on_is_a_usage_error(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        main(command.split() + DEVICE_COMMANDS[command] + ["--device", "tpu"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --device: 'tpu' is not a device inferlab runs on; use auto, cpu, cuda or cuda:N" in err
    assert "Traceback" not in err


def test_the_engine_refuses_an_unknown_device_by_name():
    from inferlab.engine.startup import resolve_device
    from inferlab.errors import ConfigError

    with pytest.raises(ConfigError, match="device='tpu' is not a torch device"):
        resolve_device("tpu")


@pytest.mark.parametrize("value", ["-1", "0", "nan"])
def test_bench_refuses_a_timeout_that_is_not_positive(capsys, tmp_path, value):
    argv = ["bench", "--preset", "quick", "--run-dir", str(tmp_path / "run"), "--timeout", value]
    assert _error(capsys, argv) == f"error: --timeout {float(value)} must be a number of seconds > 0"
    assert not (tmp_path / "run").exists()


def test_bench_set_and_baseline_name_knobs_that_exist(capsys, tmp_path):
    base = ["bench", "--preset", "quick", "--run-dir", str(tmp_path / "run")]
    message = _error(capsys, base + ["--set", "bogus=3"])
    assert "--set bogus matches no knob of any sweep; this plan's knobs: " in message and "batch_size" in message
    assert "--list-knobs" not in message and "`inferlab bench --list`" in message
    assert "'nonsense' is not a knob of this plan" in _error(capsys, base + ["--baseline", "nonsense=1"])


def _results(run: Path) -> Path:
    run.mkdir()
    rows = [{"status": "ok", "scenario": "generate", "backend": b, "model": "tiny", "cell_key": b,
             "config": {"batch_size": 1}, "headline_metric": "tok_s", "metrics": {"tok_s": v}, "env": {}}
            for b, v in (("hf", 10.0), ("inferlab", 20.0))]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_report_refuses_a_baseline_no_row_has(capsys, tmp_path):
    run = str(_results(tmp_path / "run"))
    out = ["--out", str(tmp_path / "report")]
    assert "no row has the knob 'nonsense'; the rows' knobs: backend, batch_size" in _error(
        capsys, ["report", run, "--baseline", "nonsense=1"] + out)
    assert _error(capsys, ["report", run, "--baseline", "backend=vllm"] + out) == (
        "error: --baseline backend=vllm: no row with a figure has backend=vllm; its values: hf, inferlab")
    assert main(["report", run, "--baseline", "backend=hf"] + out) == 0


@pytest.mark.parametrize("command", ["generate", "conformers generate"])
def test_vllm_spellings_of_the_engine_flags_are_accepted(command):
    from inferlab.cli import build_parser

    args = build_parser().parse_args(command.split() + DEVICE_COMMANDS[command] + [
        "--max-num-seqs", "8", "--max-model-len", "256", "--gpu-memory-utilization", "0.5", "--kv-cache-dtype", "fp8"])
    assert (args.max_slots, args.max_seq_len, args.gpu_memory_fraction, args.kv_dtype) == (8, 256, 0.5, "fp8")
    if command == "generate":
        assert build_parser().parse_args(command.split() + DEVICE_COMMANDS[command] + [
            "--max-tokens", "7"]).max_new_tokens == 7


def test_every_conformer_count_flag_is_spelled_num_conformers():
    from inferlab.cli import build_parser

    flags = set()
    parsers = [build_parser()]
    while parsers:
        for action in parsers.pop()._actions:
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                parsers.extend(action.choices.values())
            flags.update(o for o in action.option_strings if "conf" in o and o != "--config")
    assert flags == {"--num-conformers"}


def test_retry_errors_is_refused_with_a_scale_out_for_now(capsys, files, tiny_checkpoint):
    model = str(tiny_checkpoint("tiny"))
    for argv in (["generate", "--input", str(files["prompts"]), "--output", str(files["dir"] / "o.jsonl")],
                 ["conformers", "generate", "--input", str(files["smi"]), "--output", str(files["dir"] / "o.sdf")]):
        message = _error(capsys, argv + ["--model", model, "--gpus", "2", "--retry-errors"])
        assert message.startswith("error: --retry-errors runs without --gpus / --launcher for now")
