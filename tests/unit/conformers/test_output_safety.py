"""`inferlab conformers generate` never loses data: no output may be an input, an SDF nobody can vouch for
is refused (not replaced), a rerun with other settings is refused by name, a second run on the same output
is refused, a resume regenerates rows whose SDF records are gone, the rerun an error row advises (a larger
--max-seq-len with --retry-errors) resumes, and hostile ids cannot corrupt the SDF."""

from __future__ import annotations

import json
import re

import pytest

from inferlab.cli import main
from inferlab.outputs.guard import lock_path
from inferlab.outputs.lock import OutputLock
from inferlab.workloads.conformers.chemistry.sdf import read_sdf, sdf_id

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return str(tiny_checkpoint("tiny"))


def run(model, inp, out, *extra):
    return main(["conformers", "generate", "--model", model, "--input", str(inp), "--output", str(out),
                 "--max-slots", "4", "--sampling", "greedy", "--device", "cpu", *extra])


def rows(out):
    return [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]


def test_refused_outputs_leave_every_file_as_it_was(tmp_path, model, capsys):
    inp = tmp_path / "mols.smi"
    inp.write_text("CCO ethanol\nCCN amine\n")
    assert run(model, inp, tmp_path / "out.sdf", "--summary-json", str(inp)) == 2
    assert "--summary-json" in capsys.readouterr().err and inp.read_text() == "CCO ethanol\nCCN amine\n"
    foreign = tmp_path / "refcopy.sdf"  # records of another tool, no rows file beside them
    foreign.write_text("x\n  RDKit\n\n  0  0  0  0  0  0  0  0  0  0999 V2000\nM  END\n$$$$\n")
    before = foreign.read_text()
    assert run(model, inp, foreign) == 2
    assert "--overwrite" in capsys.readouterr().err and foreign.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mols.smi", "refcopy.sdf"]  # nothing created
    with OutputLock(lock_path(tmp_path / "out.sdf"), "out.sdf"):  # a run already writing out.sdf
        assert run(model, inp, tmp_path / "out.sdf") == 2
    assert "another inferlab run" in capsys.readouterr().err
    assert run(model, inp, foreign, "--overwrite") == 0
    assert [r.prop("input_id") for r in read_sdf(foreign)] == ["ethanol", "amine"]


def test_a_rerun_resumes_only_its_own_job_and_regenerates_lost_records(tmp_path, model, capsys):
    inp = tmp_path / "mols.smi"
    inp.write_text("CCO ethanol\nCCN amine\n")
    out = tmp_path / "out.sdf"
    assert run(model, inp, out) == 0
    assert run(model, inp, out, "--num-conformers", "2") == 2
    assert "--num-conformers=1 then, 2 now" in capsys.readouterr().err
    assert run(model, inp, out, "--kv-dtype", "fp8") == 2  # an FP8 cache writes other conformers: not mixed in
    assert "--kv-dtype='auto' then, 'fp8' now" in capsys.readouterr().err
    assert len(rows(out)) == 2
    out.unlink()  # the SDF is lost; its rows say ok
    capsys.readouterr()
    assert run(model, inp, out) == 0
    assert "0 written by earlier runs" in capsys.readouterr().out
    assert len(rows(out)) == 2 and len(list(read_sdf(out))) == 2


def test_the_rerun_an_error_row_advises_resumes_its_output(tmp_path, model, capsys):
    inp = tmp_path / "mols.smi"
    inp.write_text("CCO ethanol\nCCCCCCCCCC decane\n")
    out = tmp_path / "out.sdf"
    assert run(model, inp, out, "--max-seq-len", "256") == 0
    error = {r["input_id"]: r for r in rows(out)}["decane"]["error"]
    advised = re.search(r"rerun with --max-seq-len (\d+) .*and --retry-errors", error)
    assert advised, error
    capsys.readouterr()
    assert run(model, inp, out, "--max-seq-len", advised.group(1), "--retry-errors") == 0  # not another job
    assert "1 error rows of earlier runs generated again" in capsys.readouterr().out
    after = rows(out)
    assert sorted((r["input_id"], r["status"]) for r in after) == [("decane", "ok"), ("ethanol", "ok")]
    assert sorted(sdf_id(r.prop("row_id")) for r in read_sdf(out)) == sorted(r["id"] for r in after)


def test_hostile_ids_cannot_corrupt_the_sdf(tmp_path, model):
    inp = tmp_path / "mols.csv"
    inp.write_text('id,smiles\n"$$$$",CCO\n"two\nlines",CCN\n"> <row_id>",CCC\n"50%",CO\n')
    out = tmp_path / "out.sdf"
    assert run(model, inp, out) == 0
    written = rows(out)  # in finishing order
    assert sorted(r["input_id"] for r in written) == sorted(["$$$$", "two\nlines", "> <row_id>", "50%"])  # as given
    assert all(r["status"] == "ok" for r in written)
    records = list(read_sdf(out))
    assert sorted(sdf_id(r.prop("row_id")) for r in records) == sorted(r["id"] for r in written)
    assert all(r.mol is not None and r.mol.GetNumAtoms() > 0 for r in records)
    assert run(model, inp, out) == 0 and len(list(read_sdf(out))) == 4  # the repair on a rerun keeps them all
