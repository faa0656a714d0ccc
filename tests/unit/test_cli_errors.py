"""Wrong inputs at the command line: each error names the flag or the file and the fix, exits 2, and comes
before any model is loaded (so these run in milliseconds, on the tiny checkpoint at most)."""

from __future__ import annotations

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
