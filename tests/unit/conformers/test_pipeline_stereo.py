"""Stereo through the real pipeline on CPU (tiny random checkpoint): every row says whether its coordinates
have the input's stereo, and an independent reading of the SDF (RDKit assigns stereo from the written
coordinates, atoms numbered as the input SMILES) agrees; `--stereo-retries` with the stereo check forced
to fail the first attempts of chosen rows keeps exactly K rows per molecule, records the attempts, counts
every attempt's tokens, writes only the last attempt's conformer, and reruns reproduce."""

from __future__ import annotations

import json

import numpy as np

import pytest
from rdkit import Chem

from inferlab.cli import main
from inferlab.engine import EngineConfig
from inferlab.errors import ConfigError
from inferlab.workloads.conformers.chemistry.sdf import read_sdf
from inferlab.workloads.conformers.chemistry.stereo import StereoAgreement, stereo_agreement
from inferlab.workloads.conformers.pipeline import judge as judge_module
from inferlab.workloads.conformers.pipeline.config import ConformerSampling, PipelineConfig
from inferlab.workloads.conformers.pipeline.generate import generate_conformers

MOLECULES = {"alaninol": "C[C@H](N)CO", "difluoro": "F/C=C/CF", "propanol": "CCCO"}
ENGINE = {"max_slots": 4, "max_seq_len": 320}
K = 3

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return tiny_checkpoint("tiny")


@pytest.fixture
def inp(tmp_path):
    path = tmp_path / "in.smi"
    path.write_text("".join(f"{smiles} {name}\n" for name, smiles in MOLECULES.items()))
    return path


def rows_of(sdf_path) -> dict[str, dict]:
    rows = [json.loads(line) for line in sdf_path.with_suffix(".jsonl").read_text().splitlines()]
    assert len(rows) == len({r["id"] for r in rows})
    return {r["id"]: r for r in rows}


def test_every_row_reports_stereo_and_the_sdf_agrees(tmp_path, inp, model):
    out = tmp_path / "out.sdf"
    summary = generate_conformers(EngineConfig(model=model, **ENGINE), inp, out,
                                  PipelineConfig(num_conformers=K, seed=5))
    rows = rows_of(out)
    assert len(rows) == K * len(MOLECULES) and all(r["status"] == "ok" and r["attempts"] == 1 for r in rows.values())
    for row in rows.values():
        if row["input_id"] == "propanol":
            assert row["stereo_ok"] is None and row["stereo_centres"] == row["stereo_bonds"] == 0
        else:
            assert isinstance(row["stereo_ok"], bool)
            assert (row["stereo_centres"], row["stereo_bonds"]) == ((1, 0) if row["input_id"] == "alaninol" else (0, 1))
    assert summary.stereo_checked == 2 * K
    assert summary.stereo_matches == sum(r["stereo_ok"] is True for r in rows.values())
    for record in read_sdf(out):  # independent: the input SMILES against the SDF's coordinates
        found = stereo_agreement(Chem.MolFromSmiles(MOLECULES[record.prop("input_id")]), record.mol)
        assert found.ok == rows[record.prop("row_id")]["stereo_ok"]


FAILS = {"alaninol#0": 0, "alaninol#1": 1, "alaninol#2": 9, "difluoro#0": 2, "difluoro#2": 1}  # forced failures


@pytest.fixture
def forced_contradictions(monkeypatch):
    """The stereo check contradicts the first FAILS[row] attempts of a row and passes the later ones (what
    a random model's coordinates say is left out); every other check is real."""
    real_judge, real_stereo = judge_module.judge, judge_module.stereo_agreement
    attempts: list[tuple[str, int]] = []

    def passing(reference, mol):
        real = real_stereo(reference, mol)
        return real if real.ok is None else StereoAgreement(real.centres, real.bonds, 0, True)

    def judge(task):
        attempts.append((f"{task.input_id}#{task.conformer_index}", task.attempt))
        forced = task.attempt < FAILS.get(f"{task.input_id}#{task.conformer_index}", 0)
        stereo = (lambda reference, mol: StereoAgreement(1, 0, 1, False)) if forced else passing
        with monkeypatch.context() as m:
            m.setattr(judge_module, "stereo_agreement", stereo)
            return real_judge(task)

    monkeypatch.setattr(judge_module, "judge", judge)  # judge_all, inline, calls it
    return attempts


def test_stereo_retries_keep_k_rows_and_record_the_attempts(tmp_path, inp, model, forced_contradictions):
    config = PipelineConfig(num_conformers=K, seed=5, stereo_retries=2, judge_workers=0)
    out = tmp_path / "out.sdf"
    summary = generate_conformers(EngineConfig(model=model, **ENGINE), inp, out, config)
    rows = rows_of(out)
    assert len(rows) == K * len(MOLECULES)
    for name in MOLECULES:
        assert sorted(r["conformer_index"] for r in rows.values() if r["input_id"] == name) == list(range(K))
    expected_attempts = {row: min(FAILS.get(row, 0), 2) + 1 for row in rows}
    assert {row: r["attempts"] for row, r in rows.items()} == expected_attempts
    assert sorted(forced_contradictions) == sorted((row, a) for row, n in expected_attempts.items() for a in range(n))
    assert rows["alaninol#2"]["status"] == "ok" and rows["alaninol#2"]["stereo_ok"] is False  # all 3 contradicted
    assert rows["difluoro#0"]["stereo_ok"] is True and rows["propanol#0"]["stereo_ok"] is None
    assert summary.stereo_retries == sum(n - 1 for n in expected_attempts.values()) == 6
    assert 1 <= summary.stream_calls <= 3  # an engine taking requests up front: a call per attempt level at most
    records = {r.prop("row_id"): Chem.MolToMolBlock(r.mol) for r in read_sdf(out)}
    assert set(records) == set(rows)  # one record per row: the last attempt's

    # the same job without retries draws exactly the first attempts
    plain = tmp_path / "plain.sdf"
    first = generate_conformers(EngineConfig(model=model, **ENGINE), inp, plain,
                                PipelineConfig(num_conformers=K, seed=5, judge_workers=0))
    first_rows = rows_of(plain)
    first_draws = {r.prop("row_id"): Chem.MolToMolBlock(r.mol) for r in read_sdf(plain)}
    for row, n in expected_attempts.items():
        assert (records[row] == first_draws[row]) == (n == 1)  # a retried row holds a new draw
        # every attempt's tokens are generated work: the row counts them all beside the last attempt's
        assert (rows[row]["generated_tokens"] > first_rows[row]["output_tokens"]) == (n > 1)
    assert summary.output_tokens == sum(r["generated_tokens"] for r in rows.values())
    assert summary.retry_output_tokens == summary.output_tokens - first.output_tokens > 0

    # a rerun (other batches) reproduces every attempt
    again = tmp_path / "again.sdf"
    generate_conformers(EngineConfig(model=model, **{**ENGINE, "max_slots": 3}), inp, again, config)
    assert {r.prop("row_id"): Chem.MolToMolBlock(r.mol) for r in read_sdf(again)} == records
    assert rows_of(again) == rows


def test_retries_with_greedy_decoding_are_refused():
    with pytest.raises(ConfigError, match="greedy"):
        PipelineConfig(num_conformers=1, sampling=ConformerSampling("greedy"), stereo_retries=1)


def test_cli_prints_the_stereo_line_and_writes_the_summary_json(tmp_path, inp, model, capsys):
    summary_path = tmp_path / "summary.json"
    code = main(["conformers", "generate", "--model", str(model), "--input", str(inp), "--output",
                 str(tmp_path / "out.sdf"), "--num-conformers", "2", "--max-slots", "4", "--stereo-retries", "1",
                 "--summary-json", str(summary_path)])
    assert code == 0
    out = capsys.readouterr().out
    summary = json.loads(summary_path.read_text())
    assert f"stereo: {summary['stereo_matches']} of 4 conformers with specified stereo match their input" in out
    assert summary["stereo_checked"] == 4 and summary["engine"]["generated_tokens"] == summary["output_tokens"]
    assert summary["stream_calls"] >= 1 and summary["prefill_share"] is not None


def test_with_a_lazy_engine_retries_join_the_same_stream_call(tmp_path, inp, model, forced_contradictions,
                                                              monkeypatch):
    """Engine.stream as the lazy intake behaves (contracts item 2): requests are pulled a few at a time,
    after results came back; a retry queued meanwhile is given by the same generator, in the same call."""
    from itertools import islice

    from inferlab.engine import Engine

    real_stream = Engine.stream

    def pulling_stream(self, requests, on_tokens=None):
        requests = iter(requests)
        while chunk := list(islice(requests, 2)):
            yield from real_stream(self, chunk, on_tokens)

    monkeypatch.setattr(Engine, "stream", pulling_stream)
    monkeypatch.setitem(FAILS, "alaninol#2", 1)  # every forced retry comes back while molecules are left
    monkeypatch.setitem(FAILS, "difluoro#0", 0)
    monkeypatch.setitem(FAILS, "difluoro#2", 0)
    config = PipelineConfig(num_conformers=K, seed=5, stereo_retries=2, judge_workers=0)
    summary = generate_conformers(EngineConfig(model=model, **ENGINE), inp, tmp_path / "out.sdf", config)
    rows = rows_of(tmp_path / "out.sdf")
    assert summary.stream_calls == 1 and summary.stereo_retries == 2
    assert {row: r["attempts"] for row, r in rows.items() if r["attempts"] > 1} == {"alaninol#1": 2, "alaninol#2": 2}
    assert len(rows) == K * len(MOLECULES)


def test_a_wrong_handed_conformer_is_written_mirrored_by_default(tmp_path, inp, model):
    """The same draws (seed 5) with and without --stereo-mirror: every alaninol conformer (one centre) of the wrong
    hand is written as its mirror image and marked; the rest, and the E/Z molecule's, are the same records."""
    engine = EngineConfig(model=model, **ENGINE)
    written = {}
    for mirror in (True, False):
        out = tmp_path / f"mirror-{mirror}.sdf"
        summary = generate_conformers(engine, inp, out, PipelineConfig(num_conformers=6, seed=5, judge_workers=0,
                                                                       stereo_mirror=mirror))
        written[mirror] = (rows_of(out), {r.prop("row_id"): r.mol for r in read_sdf(out)}, summary)
    (rows, mols, summary), (plain_rows, plain_mols, plain) = written[True], written[False]
    flipped = {row for row, r in plain_rows.items() if r["stereo_ok"] is False and r["input_id"] == "alaninol"}
    assert flipped and {row for row, r in rows.items() if r["mirrored"]} == flipped
    assert all(r["stereo_ok"] is True for r in rows.values() if r["input_id"] == "alaninol")
    assert summary.stereo_mirrored == len(flipped) and plain.stereo_mirrored == 0
    assert summary.stereo_matches == plain.stereo_matches + len(flipped)
    for row, mol in mols.items():
        before, after = plain_mols[row].GetConformer().GetPositions(), mol.GetConformer().GetPositions()
        sign = -1.0 if row in flipped else 1.0
        assert np.allclose(after[:, 0], sign * before[:, 0], atol=1e-4) and np.allclose(after[:, 1:], before[:, 1:])
