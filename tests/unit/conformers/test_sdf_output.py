"""SDF + JSONL output: properties round-trip, torn records are repaired, resume keeps them consistent."""

from __future__ import annotations

import json

from conformer_molecules import embed
from hypothesis import given, settings
from hypothesis import strategies as st
from rdkit import Chem

from inferlab.workloads.conformers.chemistry.sdf import ConformerSdfWriter, read_sdf, record_row_ids, sdf_id, sdf_text
from inferlab.workloads.conformers.pipeline.output import ConformerResultWriter


def heavy(smiles: str, num_confs: int = 2) -> Chem.Mol:
    return Chem.RemoveHs(embed(smiles, num_confs=num_confs))


def test_properties_and_coordinates_round_trip(tmp_path):
    mol = heavy("CC(=O)N", num_confs=2)
    path = tmp_path / "out.sdf"
    with ConformerSdfWriter(path) as writer:
        for k, conf in enumerate(mol.GetConformers()):
            writer.write(mol, "m1", "CC(N)=O", k, "v3-fixed4", conf_id=conf.GetId())
    records = list(read_sdf(path))
    assert len(records) == 2
    for k, record in enumerate(records):
        assert record.prop("input_id") == "m1" and record.prop("row_id") == f"m1#{k}"
        assert record.prop("canonical_smiles") == "CC(N)=O" and record.prop("conformer_index") == str(k)
        assert record.prop("profile") == "v3-fixed4"
        want = mol.GetConformer(mol.GetConformers()[k].GetId()).GetPositions()
        got = record.mol.GetConformer().GetPositions()
        assert abs(want - got).max() < 1e-4  # molfile coordinates have 4 decimals


def test_torn_last_record_is_dropped_on_reopen(tmp_path):
    mol = heavy("CCO", num_confs=1)
    path = tmp_path / "out.sdf"
    with ConformerSdfWriter(path) as writer:
        writer.write(mol, "a", "CCO", 0)
    good = path.read_text()
    with path.open("a") as f:
        f.write(good[: len(good) // 2])  # a crash in the middle of the second record
    with ConformerSdfWriter(path) as writer:
        writer.write(mol, "b", "CCO", 0)
    ids = [r.prop("input_id") for r in read_sdf(path)]
    assert ids == ["a", "b"]
    assert all(r.mol is not None for r in read_sdf(path))


def test_unreadable_records_are_reported_not_raised(tmp_path):
    path = tmp_path / "bad.sdf"
    mol = heavy("CCO", num_confs=1)
    with ConformerSdfWriter(path) as writer:
        writer.write(mol, "a", "CCO", 0)
    with path.open("a") as f:
        f.write("junk\n\n\n  this is not a molfile\n$$$$\n")
    records = list(read_sdf(path))
    assert [r.mol is not None for r in records] == [True, False]
    assert "could not be read by RDKit: ERROR: Cannot convert" in records[1].error  # with RDKit's reason


def test_result_writer_resumes_and_drops_records_without_rows(tmp_path):
    mol = heavy("CCN", num_confs=1)
    sdf, jsonl = tmp_path / "out.sdf", tmp_path / "out.jsonl"
    with ConformerResultWriter(sdf, profile="v3-fixed4") as out:
        out.write_ok("m1", "CCN", 0, mol, extra={"tokens": 80})
        out.write_error("m1", "CCN", 1, "block 3 is junk")
    # A crash after the SDF record of m1#2 but before its JSONL row:
    with ConformerSdfWriter(sdf) as raw:
        raw.write(mol, "m1", "CCN", 2, "v3-fixed4")
    assert len(list(read_sdf(sdf))) == 2
    with ConformerResultWriter(sdf, profile="v3-fixed4") as out:
        assert out.is_done("m1", 0) and out.is_done("m1", 1) and not out.is_done("m1", 2)
        assert [r.prop("row_id") for r in read_sdf(sdf)] == ["m1#0"]  # the orphan record is gone
        out.write_ok("m1", "CCN", 2, mol)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["id"], r["status"]) for r in rows] == [("m1#0", "ok"), ("m1#1", "error"), ("m1#2", "ok")]
    assert rows[0]["tokens"] == 80 and rows[1]["error"] == "block 3 is junk"
    assert [r.prop("row_id") for r in read_sdf(sdf)] == ["m1#0", "m1#2"]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_id_is_written_safely_and_read_back_as_given(input_id):
    text = sdf_text(input_id)
    assert sdf_id(text) == input_id
    assert not set(text) & set("$<>") and text.isprintable()  # no record end, property start or line break


def test_hostile_ids_keep_every_record_readable(tmp_path):
    mol = heavy("CCO", num_confs=1)
    ids = ["$$$$", "a\nb", "> <row_id>", "50%", "x\r\n$$$$\ny", "plain id"]
    path = tmp_path / "out.sdf"
    with ConformerSdfWriter(path) as writer:
        for input_id in ids:
            writer.write(mol, input_id, "CCO", 0)
    records = list(read_sdf(path))
    assert [sdf_id(r.prop("input_id")) for r in records] == ids and all(r.mol is not None for r in records)
    assert records[-1].prop("input_id") == "plain id" and records[-1].mol.GetProp("_Name") == "plain id"
    held = record_row_ids(path)
    assert all(f"{i}#0" in held for i in ids) and len(held) == len(ids)
