"""The conformer pipeline end to end on CPU (tiny random checkpoint, built-in Llama-3-style tokenizer):
every conformer written is the input's molecule, checked here independently of the pipeline by reading
the SDF back with RDKit; rows and records come in input order; bad inputs, a repeated id and a molecule too
long for the rows become error rows while the rest goes on, naming only fixes that exist, and
retry_errors generates them again; a run cut short resumes with every row exactly once; the process pools (preparation,
judging) give the same rows as in-process work; the CLI (both spellings) writes the same files."""

from __future__ import annotations

import dataclasses
import json
import re
import resource
import time

import pytest
from rdkit import Chem

from inferlab.cli import main
from inferlab.engine import EngineConfig
from inferlab.errors import ConfigError
from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs
from inferlab.workloads.conformers.chemistry.sdf import read_sdf
from inferlab.workloads.conformers.pipeline.config import ConformerSampling, PipelineConfig
from inferlab.workloads.conformers.pipeline.generate import generate_conformers

MOLECULES = {  # id -> SMILES; small, without stereo (an SDF read back assigns stereo from 3D coordinates)
    "ethanol": "CCO",
    "benzene": "c1ccccc1",
    "acetic": "CC(=O)O",
    "pyridine": "c1ccncc1",
    "propylamine": "CCCN",
}
ENGINE = {"max_slots": 4, "max_seq_len": 320}


pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return tiny_checkpoint("tiny")


def write_input(path, extra_lines=()):
    lines = [f"{smiles} {name}" for name, smiles in MOLECULES.items()] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def rows_of(sdf_path):
    text = sdf_path.with_suffix(".jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def graph(smiles_or_mol) -> str:
    mol = Chem.MolFromSmiles(smiles_or_mol) if isinstance(smiles_or_mol, str) else smiles_or_mol
    return Chem.MolToSmiles(Chem.RemoveHs(mol), isomericSmiles=False)


def stable(rows):
    """Rows keyed by id (a resumed run's rows follow the earlier run's: compare them by id)."""
    return {row["id"]: row for row in rows}


def test_every_written_conformer_is_the_input_molecule(tmp_path, model):
    inp = write_input(tmp_path / "in.smi", ["C1CC broken", "CCO ethanol", "C[N+](C)(C)(C)C pentavalent",
                                            "C[NH2]->[Cu] dative"])
    out = tmp_path / "out.sdf"
    summary = generate_conformers(EngineConfig(model=model, **ENGINE), inp, out,
                                  PipelineConfig(num_conformers=3, seed=1))

    rows = rows_of(out)
    assert len(rows) == len(stable(rows)) == 9 * 3
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == len(MOLECULES) * 3 == summary.conformers_ok
    assert summary.valid_fraction == 1.0 and summary.conformers_generated == 15 and summary.graph_matches == 15
    errors = {r["input_id"]: r["error"] for r in rows if r["status"] == "error"}
    assert "cannot be parsed: unclosed ring" in errors["broken"] and "valence" in errors["pentavalent"]
    assert "id 'ethanol' repeats line 1" in errors["line-7"]
    assert "dative bond" in errors["dative"]  # reaches the preparation pool, which cannot template it
    for row in ok:
        assert row["finish_reason"] == "eos" and row["graph_match"] is True and row["output_tokens"] > 0
        assert row["smiles"] == MOLECULES[row["input_id"]]

    in_input_order = [(record.id, k) for record in read_molecule_inputs(inp).records for k in range(3)]
    assert [(r["input_id"], r["conformer_index"]) for r in rows] == in_input_order
    records = list(read_sdf(out))
    assert [(r.prop("input_id"), int(r.prop("conformer_index"))) for r in records] == [
        (r["input_id"], r["conformer_index"]) for r in ok]
    for record in records:  # independent of the pipeline: RDKit reads the SDF back
        smiles = MOLECULES[record.prop("input_id")]
        assert graph(record.mol) == graph(smiles)
        assert record.mol.GetNumAtoms() == Chem.MolFromSmiles(smiles).GetNumAtoms()
        assert record.mol.GetConformer().Is3D()
    sampled = {r.prop("row_id"): Chem.MolToMolBlock(r.mol) for r in records if r.prop("input_id") == "benzene"}
    assert len(set(sampled.values())) == 3  # each conformer draws with its own seed


@pytest.mark.slow
def test_greedy_and_seeded_runs_are_reproducible(tmp_path, model):
    inp = write_input(tmp_path / "in.smi")
    greedy = PipelineConfig(num_conformers=2, sampling=ConformerSampling("greedy"))
    generate_conformers(EngineConfig(model=model, **ENGINE), inp, tmp_path / "g.sdf", greedy)
    rows = stable(rows_of(tmp_path / "g.sdf"))
    records = {r.prop("row_id"): Chem.MolToMolBlock(r.mol) for r in read_sdf(tmp_path / "g.sdf")}
    assert records["benzene#0"] == records["benzene#1"]  # greedy: the K conformers are the same

    seeded = PipelineConfig(num_conformers=2, seed=7, sampling=ConformerSampling("top-p", 0.8, 0.95))
    generate_conformers(EngineConfig(model=model, **ENGINE), inp, tmp_path / "a.sdf", seeded)
    generate_conformers(EngineConfig(model=model, **{**ENGINE, "max_slots": 3}), inp, tmp_path / "b.sdf",
                        seeded)  # other batches
    assert stable(rows_of(tmp_path / "a.sdf")) == stable(rows_of(tmp_path / "b.sdf"))
    assert (tmp_path / "a.sdf").read_text().count("$$$$") == 10
    assert set(rows) == set(stable(rows_of(tmp_path / "a.sdf")))


def test_a_molecule_too_long_for_the_rows_is_an_error_row(tmp_path, model):
    inp = write_input(tmp_path / "in.smi", ["CCCCCCCCCC decane"])
    out = tmp_path / "out.sdf"
    summary = generate_conformers(EngineConfig(model=model, max_slots=2, max_seq_len=256), inp, out,
                                  PipelineConfig(num_conformers=1))
    rows = stable(rows_of(out))
    assert "over max_seq_len=256; rerun with --max-seq-len" in rows["decane#0"]["error"]
    assert summary.conformers_ok == len(MOLECULES)


def test_error_rows_name_only_fixes_that_exist_and_retry_errors_runs_them_again(tmp_path, model):
    inp = write_input(tmp_path / "in.smi", ["CCCCCCCCCC decane", "CCCCCCCCCCCCCCCCCCCCCCCC tetracosane"])
    out = tmp_path / "out.sdf"
    config = PipelineConfig(num_conformers=1)
    generate_conformers(EngineConfig(model=model, max_slots=2, max_seq_len=256), inp, out, config)
    rows = stable(rows_of(out))
    needed = int(re.search(r"rerun with --max-seq-len (\d+)", rows["decane#0"]["error"]).group(1))
    assert needed <= 512  # the tiny model's positions: a value that works
    too_large = rows["tetracosane#0"]["error"]
    assert "more than the model's 512" in too_large and "--max-seq-len" not in too_large

    retry = dataclasses.replace(config, retry_errors=True)
    summary = generate_conformers(EngineConfig(model=model, max_slots=2, max_seq_len=needed), inp, out, retry)
    after = rows_of(out)
    assert summary.conformers_retried == 2 and summary.conformers_skipped == len(MOLECULES)
    assert len(after) == len(stable(after)) == len(MOLECULES) + 2  # one row per id
    assert stable(after)["decane#0"]["status"] == "ok" and stable(after)["tetracosane#0"]["status"] == "error"
    assert sorted(r.prop("row_id") for r in read_sdf(out)) == sorted(r["id"] for r in after if r["status"] == "ok")


def test_any_k_streams_from_the_first_molecule_with_flat_memory(tmp_path, model):
    inp = write_input(tmp_path / "in.smi")

    class Enough(Exception):
        pass

    def stop_after_three(row):
        stop_after_three.rows += 1
        if stop_after_three.rows == 3:
            raise Enough

    stop_after_three.rows = 0
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    started = time.perf_counter()
    with pytest.raises(Enough):
        generate_conformers(EngineConfig(model=model, **ENGINE), inp, tmp_path / "out.sdf",
                            PipelineConfig(num_conformers=100_000_000), on_row=stop_after_three)
    assert time.perf_counter() - started < 120
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # a list of K would be GBs
    assert [r["id"] for r in rows_of(tmp_path / "out.sdf")][:3] == ["ethanol#0", "ethanol#1", "ethanol#2"]


def test_the_automatic_row_length_fits_the_largest_molecule(tmp_path, model):
    inp = write_input(tmp_path / "in.smi", ["CCCCCCCCCC decane"])  # needs ~330 positions with this tokenizer
    summary = generate_conformers(EngineConfig(model=model, max_slots=2), inp, tmp_path / "out.sdf",
                                  PipelineConfig(num_conformers=1))
    assert summary.conformers_ok == len(MOLECULES) + 1
    assert 330 < summary.max_seq_len <= 512  # the tiny model's positions


def test_a_run_cut_short_resumes_with_every_row_once(tmp_path, model):
    inp = write_input(tmp_path / "in.smi", ["C1CC broken"])
    out = tmp_path / "out.sdf"
    config = PipelineConfig(num_conformers=2, seed=3)

    class Crash(Exception):
        pass

    def crash_after_five(row):
        if crash_after_five.seen == 5:
            raise Crash
        crash_after_five.seen += 1

    crash_after_five.seen = 0
    with pytest.raises(Crash):
        generate_conformers(EngineConfig(model=model, **ENGINE), inp, out, config, on_row=crash_after_five)
    first = rows_of(out)
    assert 6 <= len(first) < 12  # the sixth row, and finished rows that waited for an earlier one
    summary = generate_conformers(EngineConfig(model=model, **ENGINE), inp, out, config)
    assert summary.conformers_skipped == len(first) and summary.conformers_written == 12 - len(first)
    rows = rows_of(out)
    assert len(rows) == len(stable(rows)) == 12
    assert len(list(read_sdf(out))) == sum(r["status"] == "ok" for r in rows) == 10

    generate_conformers(EngineConfig(model=model, **ENGINE), inp, tmp_path / "whole.sdf", config)
    assert stable(rows) == stable(rows_of(tmp_path / "whole.sdf"))  # the same rows as an uninterrupted run


@pytest.mark.slow
def test_the_process_pools_give_the_same_rows_as_in_process(tmp_path, model):
    inp = write_input(tmp_path / "in.smi", ["C1CC broken"])
    base = dict(num_conformers=2, seed=4)
    engine = EngineConfig(model=model, **ENGINE)
    generate_conformers(engine, inp, tmp_path / "inline.sdf", PipelineConfig(workers=0, judge_workers=0, **base))
    summary = generate_conformers(engine, inp, tmp_path / "pool.sdf", PipelineConfig(workers=1, judge_workers=1, **base))
    assert stable(rows_of(tmp_path / "pool.sdf")) == stable(rows_of(tmp_path / "inline.sdf"))
    assert (tmp_path / "pool.sdf").read_text() != "" and summary.judge_workers == 1
    assert {r.prop("row_id"): Chem.MolToMolBlock(r.mol) for r in read_sdf(tmp_path / "pool.sdf")} == {
        r.prop("row_id"): Chem.MolToMolBlock(r.mol) for r in read_sdf(tmp_path / "inline.sdf")}
    assert summary.template_cpu_s > 0 and summary.decode_s > 0
    assert summary.engine["tokenizer_s"] == 0.0  # the engine loaded no tokenizer: the judges decoded the ids


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="num_conformers"):
        PipelineConfig(num_conformers=0)
    with pytest.raises(ConfigError, match="unknown conformer profile"):
        PipelineConfig(num_conformers=1, profile="v9")
    with pytest.raises(ConfigError, match="greedy"):
        ConformerSampling("top-p", temperature=0.0)
    with pytest.raises(ConfigError, match="top_p"):
        ConformerSampling("top-p", top_p=1.5)


def test_cli_both_spellings(tmp_path, model, capsys):
    inp = write_input(tmp_path / "in.smi")
    common = ["--model", str(model), "--input", str(inp), "--num-conformers", "2", "--max-slots", "4",
              "--sampling", "greedy"]
    assert main(["conformers", *common, "--output", str(tmp_path / "a.sdf")]) == 0
    out = capsys.readouterr().out
    assert "validity: 10 of 10 generated conformers are valid (100.0%)" in out and "tok/s" in out
    assert main(["conformers", "generate", *common, "--output", str(tmp_path / "b.sdf")]) == 0
    assert stable(rows_of(tmp_path / "a.sdf")) == stable(rows_of(tmp_path / "b.sdf"))
    assert main(["conformers", "--model", str(model), "--output", str(tmp_path / "c.sdf")]) == 2
    assert "needs --input" in capsys.readouterr().err
