"""The constraint pressure in the conformer job (pipeline/pressure.py): its row fields and the place it
peaked in words, the run's figures in the summary and the CLI's closing lines, and the warning: raised for a
model whose probability the constraint takes away (a checkpoint that predicts a forbidden token at every
step: logit_controlled_checkpoints.py), naming the likely mismatch from where the peaks sit, silent for
low pressure. On the trained reference model: test_reference_model_pressure.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from logit_controlled_checkpoints import favouring

from inferlab.cli import main
from inferlab.engine import EngineConfig
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.pipeline.config import PipelineConfig
from inferlab.workloads.conformers.pipeline.generate import generate_conformers
from inferlab.workloads.conformers.pipeline.pressure import FIELDS, PressureTally, RowPressure, row_pressure

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def forbidden_favourite(tiny_checkpoint, tmp_path_factory):
    """A tiny checkpoint whose every next token is the pad id, which no conformer program allows."""
    base = tiny_checkpoint("tiny")
    pad = json.loads((base / "config.json").read_text())["pad_token_id"]
    return favouring(base, tmp_path_factory.mktemp("favouring") / "model", pad)


def test_rows_and_the_summary_carry_the_pressure_and_the_cli_warns(forbidden_favourite, tmp_path, capsys):
    inp = tmp_path / "in.smi"
    inp.write_text("CCO ethanol\nC=O formaldehyde\n")
    out = tmp_path / "out.sdf"
    summary = generate_conformers(EngineConfig(model=forbidden_favourite, max_slots=4, max_seq_len=320), inp, out,
                                  PipelineConfig(num_conformers=2, seed=1))
    rows = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)  # valid: the constraint wrote them
    for row in rows:
        assert row["pressure_mean"] > 0.99 and row["pressure_max"] >= row["pressure_mean"]
        assert 0 <= row["pressure_max_step"] < row["output_tokens"]
        assert "atom" in row["pressure_max_at"] or "copy" in row["pressure_max_at"] or "EOS" in row["pressure_max_at"]
    figures = summary.as_dict()["constraint_pressure"]
    assert figures["conformers"] == 4
    assert figures["mean"] == pytest.approx(sum(r["pressure_mean"] for r in rows) / 4, abs=1e-5)
    assert figures["max"] == pytest.approx(max(r["pressure_max"] for r in rows), abs=1e-5)
    assert "random weights" in figures["warning"]

    assert main(["conformers", "generate", "--model", str(forbidden_favourite), "--input", str(inp), "--output",
                 str(tmp_path / "cli.sdf"), "--max-slots", "4"]) == 0
    printed = capsys.readouterr().out
    assert "constraint pressure (the model's probability the constraint took away, per token): mean 1.000" in printed
    assert "warning: constraint pressure is high" in printed


def _tally(profile: str, rows: list[tuple[float, float, bool]]) -> dict:
    tally = PressureTally(profile)
    for i, (mean, peak, in_block) in enumerate(rows):
        tally.add(f"m{i}#0", RowPressure(mean, peak, 7, f"place {i}", in_block))
    return tally.figures()


def test_the_warning_names_the_likely_mismatch_and_stays_silent_when_the_model_fits():
    fits = _tally("v3-fixed4", [(0.01, 0.3, True), (0.02, 0.1, False), (0.015, 0.95, True), (0.01, 0.2, True),
                                (0.01, 0.4, True)])
    assert fits["warning"] is None and fits["max"] == 0.95 and fits["max_at"] == "m2#0 token 7: place 2"
    assert fits["median_request_max"] == 0.3 and fits["high_share"] == 0.2 and fits["mean"] == pytest.approx(0.013)
    assert fits["p95_request_mean"] == pytest.approx(0.019)
    descriptors = _tally("v3-fixed4", [(0.04, 0.99, False), (0.05, 0.97, False), (0.03, 0.2, True)])
    assert "descriptor style" in descriptors["warning"] and "--profile v2-fixed4" in descriptors["warning"]
    coordinates = _tally("v2-stripped", [(0.06, 0.99, True), (0.05, 0.97, True), (0.03, 0.98, False)])
    assert "coordinate style" in coordinates["warning"] and "--profile v2-fixed4" in coordinates["warning"]
    everywhere = _tally("v3-fixed4", [(0.8, 1.0, True), (0.7, 1.0, False)])
    assert "random weights" in everywhere["warning"]
    assert "took away a mean 0.25" in _tally("v3-fixed4", [(0.25, 0.4, True)])["warning"]  # the mean alone
    assert PressureTally("v3-fixed4").figures() is None  # nothing measured


def test_a_template_names_its_segments():
    template = build_template("CO", get_profile("v3-fixed4"))  # [CONFORMER][C]< hole >[O]< hole >[/CONFORMER]
    assert [template.describe_segment(i) for i in range(len(template.segments))] == [
        "the copy '[CONFORMER][C]<' (the opening)", "atom 0's coordinates ([C])",
        "the copy '>[O]<' (before atom 1's coordinates)", "atom 1's coordinates ([O])",
        "the copy '>[/CONFORMER]' (the closing)", "the end of the conformer (EOS)"]
    assert set(FIELDS) == {"pressure_mean", "pressure_max", "pressure_max_step", "pressure_max_at"}


@pytest.fixture(scope="module")
def prepared():
    """Molecules prepared as the pipeline prepares them (template, program) on the reference model's tokenizer."""
    from inferlab.workloads.conformers.pipeline.prepare import _load_state, prepare_with
    from inferlab.workloads.conformers.reference_model import reference_model_dir

    state = _load_state(str(reference_model_dir()), "v3-fixed4")
    return lambda smiles: prepare_with(state, smiles)


def test_a_peak_tells_of_the_profile_only_where_another_profile_reads_otherwise(prepared):
    from inferlab.constraints.program import HOLE
    from inferlab.types import ConstraintPressure

    def pressure(smiles: str, text: str | None, peak: float = 0.9, at_exit: bool = False) -> RowPressure:
        molecule = prepared(smiles)
        ops, template = molecule.program.ops, molecule.template
        if text is None:  # atom 0's block: its HOLE op
            op = int(np.flatnonzero(ops[0] == HOLE)[0])
        else:  # the first op of the copy run holding `text`
            segment = next(i for i, s in enumerate(template.segments) if text in getattr(s, "text", ""))
            op = next(o for o in range(molecule.program.length) if molecule.program.segment_at(o) == segment)
        token_ids = [int(ops[1, op + 1]) if at_exit else -1] * 10
        return row_pressure(ConstraintPressure(0.01, peak, 5, op, 10), molecule, token_ids)

    assert not pressure("C/C=C/C", "/").telling  # an E/Z mark: v2 writes the same copy run
    assert pressure("CCO", "[O]").telling  # v2 writes `>[O]<` as `>[OH]<`
    block = pressure("C/C=C/C", None)
    assert block.in_block and block.telling and "coordinates" in block.where  # a digit of a block always tells
    closing = pressure("C1CC1", None, at_exit=True)  # the block's exit token: the copy after it doubted
    assert not closing.in_block and not closing.telling and "copy" in closing.where
    assert pressure("C/C=C/C", "/", peak=0.2).telling  # below STEP_HIGH: not judged
    tally = PressureTally("v3-fixed4")
    for i in range(3):
        tally.add(f"m{i}#0", pressure("C/C=C/C", "/"))
    figures = tally.figures()
    assert figures["warning"] is None and figures["high_share"] == 0 and figures["high_in_common"] == 3
    tally.add("m3#0", pressure("CCO", "[O]"))
    tally.add("m4#0", pressure("OCCO", "[O]"))
    assert tally.figures()["high_in_copies"] == 2 and "descriptor style" in tally.figures()["warning"]
