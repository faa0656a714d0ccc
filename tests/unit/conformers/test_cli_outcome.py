"""How `inferlab conformers generate` ends: error rows grouped by reason (count, an example row, the message
naming the fix), exit 1 when no row of the run succeeded (2 stays for usage errors), and "wrote" only for
files that exist; the pipeline tells the engine's token counts from its first decode chunk, before any row."""

from __future__ import annotations

import pytest

from inferlab.cli import main
from inferlab.cli.row_outcome import NO_ROW_OK
from inferlab.engine import EngineConfig
from inferlab.workloads.conformers.pipeline.config import PipelineConfig
from inferlab.workloads.conformers.pipeline.generate import generate_conformers

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return tiny_checkpoint("tiny")


def _generate(model, inp, out, *extra):
    return main(["conformers", "generate", "--model", str(model), "--input", str(inp), "--output", str(out),
                 "--max-slots", "4", "--sampling", "greedy", *extra])


def test_error_rows_are_grouped_by_reason_with_an_example_and_the_fix(tmp_path, model, capsys):
    inp = tmp_path / "in.smi"
    big = "C" * 24  # more positions than the tiny model's 512
    inp.write_text(f"CCO ethanol\n{big} c24\n{big}C c25\nC1CC broken\n")
    assert _generate(model, inp, tmp_path / "out.sdf", "--num-conformers", "2") == 0
    out = capsys.readouterr().out
    assert "error rows by reason (6 in " in out
    assert "  4 x, e.g. c24#0: " in out and "a model with at least" in out  # the two large molecules, x2
    assert "  2 x, e.g. broken#0: SMILES 'C1CC' cannot be parsed" in out
    assert f"wrote {tmp_path / 'out.sdf'} and {tmp_path / 'out.jsonl'}" in out


def test_no_row_succeeding_exits_1_and_no_missing_file_is_said_written(tmp_path, model, capsys):
    prose = tmp_path / "notes.smi"
    prose.write_text("These are my notes about the molecules.\nNot a single SMILES here.\n")
    assert _generate(model, prose, tmp_path / "n.sdf") == NO_ROW_OK == 1
    out = capsys.readouterr().out
    assert "0 valid, 2 error rows" in out and not (tmp_path / "n.sdf").exists()
    assert "wrote" not in out and f"no valid conformer, so no SDF; the error rows are in {tmp_path / 'n.jsonl'}" in out

    empty = tmp_path / "empty.smi"
    empty.write_text("")
    assert _generate(model, empty, tmp_path / "e.sdf") == 1
    out = capsys.readouterr().out
    assert "nothing written: the input holds no molecule" in out and "wrote" not in out

    # a rerun with nothing left to do succeeds: the work was done before
    inp = tmp_path / "ok.smi"
    inp.write_text("CCO ethanol\n")
    assert _generate(model, inp, tmp_path / "ok.sdf") == 0
    assert _generate(model, inp, tmp_path / "ok.sdf") == 0


def test_a_resume_left_only_the_rows_that_always_fail_exits_0_as_the_whole_run_would(tmp_path, model, capsys):
    """A kill can leave the broken molecule's rows for the rerun: its own rows are all errors, yet the job's
    exit code must not depend on where it was interrupted."""
    inp, out = tmp_path / "in.smi", tmp_path / "out.sdf"
    inp.write_text("CCO ethanol\nC1CC broken\n")
    assert _generate(model, inp, out) == 0
    rows = out.with_suffix(".jsonl")
    rows.write_text("".join(line for line in rows.read_text().splitlines(keepends=True) if '"broken#' not in line))
    capsys.readouterr()
    assert _generate(model, inp, out) == 0
    assert "0 valid, 1 error rows, 1 written by earlier runs" in capsys.readouterr().out


def test_the_engine_tokens_reach_the_caller_before_the_first_row(tmp_path, model):
    inp = tmp_path / "in.smi"
    inp.write_text("CCO ethanol\nc1ccccc1 benzene\n")
    events = []
    summary = generate_conformers(
        EngineConfig(model=model, max_slots=4, max_seq_len=320, decode_steps_per_sync=4), inp, tmp_path / "out.sdf",
        PipelineConfig(num_conformers=2, judge_workers=0),
        on_row=lambda row: events.append(("row", row["output_tokens"])),
        on_tokens=lambda tokens, given, bound: events.append(("tokens", tokens, given, bound)))
    first_row = next(i for i, e in enumerate(events) if e[0] == "row")
    told = [e for e in events if e[0] == "tokens"]
    assert first_row > 0 and events[0][0] == "tokens"  # tokens told before any row was written
    assert told[-1][1] == summary.output_tokens == sum(e[1] for e in events if e[0] == "row")
    assert told[0][2] == 4 and told[0][3] >= summary.output_tokens  # 4 requests, their bound holds the tokens


def test_a_molecule_too_large_for_a_preset_names_the_preset_that_fits(tmp_path, model, capsys):
    from inferlab.models.presets import get_preset
    from inferlab.workloads.conformers.pipeline.feed import LONG_CONTEXT_PRESET

    long = get_preset(LONG_CONTEXT_PRESET)
    assert long.tokenizer == "qwen3-chem" and long.make_config().max_position_embeddings == 40960
    assert "512 positions" in get_preset("tiny-qwen3").description  # what `inferlab model presets` says
    inp = tmp_path / "in.smi"
    inp.write_text(f"{'C' * 24} c24\n")
    assert _generate(model, inp, tmp_path / "out.sdf") == 1  # the tiny preset checkpoint: inferlab_preset.json
    assert f"inferlab model init --preset {LONG_CONTEXT_PRESET} --tokenizer PATH/qwen3-chem" in capsys.readouterr().out
