"""The lab's conformer-pipeline scenario and its inputs: the drug-sized selection (heavy-atom range, stereo
assigned where the file leaves it open, the file's graphs in file order), the independent read-back of
a run's SDF and JSONL catching each kind of wrong output, and one cell end to end on CPU (the CLI in a
subprocess on a tiny Qwen3 with the qwen3-chem tokenizer)."""

from __future__ import annotations

import json

import pytest
from rdkit import Chem
from rdkit.Chem import AllChem
from transformers import AutoTokenizer

from inferlab.bench.plan import build_plan
from inferlab.bench.plan_presets import get_plan_preset
from inferlab.bench.scenarios.conformer_output_check import check_outputs, graph_key
from inferlab.bench.scenarios.conformer_pipeline import cli_argv
from inferlab.bench.scenarios.conformer_pipeline_scale import figures_from_scale_report
from inferlab.bench.scenarios.molecules import MoleculeSelection, load_molecules
from inferlab.errors import ConfigError
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.stereo import stereo_agreement
from inferlab.workloads.conformers.pipeline.output import ConformerResultWriter

PROFILE = get_profile("v3-fixed4")


@pytest.mark.slow
def test_the_drug_sized_selection_keeps_the_files_graphs_with_stereo_assigned(qwen3_chem_dir, nci_head):
    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_chem_dir))
    found = load_molecules(nci_head, 40, PROFILE, tokenizer, 2048, MoleculeSelection(20, 50, True))
    lines = {ln.split()[1]: ln.split()[0] for ln in nci_head.read_text().splitlines() if ln.split()}
    assert found.skipped_by_size > 0 and [int(m.id) for m in found.molecules] == sorted(int(m.id) for m in found.molecules)
    for m in found.molecules:
        mol = Chem.MolFromSmiles(m.smiles)
        assert 20 <= mol.GetNumHeavyAtoms() <= 50
        assert graph_key(mol) == graph_key(Chem.MolFromSmiles(lines[m.id]))  # the file's molecule, stereo apart
        unspecified = [c for c in Chem.FindPotentialStereo(mol) if c.specified == Chem.StereoSpecified.Unspecified]
        assert not unspecified
    assert sum("@" in m.smiles for m in found.molecules) > 5  # NCI specifies no stereo; these now do
    again = load_molecules(nci_head, 40, PROFILE, tokenizer, 2048, MoleculeSelection(20, 50, True))
    assert [m.smiles for m in again.molecules] == [m.smiles for m in found.molecules]


def _embedded(smiles: str, seed: int) -> Chem.Mol:
    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
    assert AllChem.EmbedMolecule(mol, randomSeed=seed) == 0
    return Chem.RemoveHs(mol)


def _write_run(path, rows: list[tuple[str, int, Chem.Mol | None, dict]]):
    with ConformerResultWriter(path / "out.sdf", profile="v3-fixed4") as writer:
        for input_id, k, mol, fields in rows:
            if mol is None:
                writer.write_error(input_id, "?", k, "not a valid conformer", fields)
            else:
                writer.write_ok(input_id, Chem.MolToSmiles(mol), k, mol, fields)


INPUTS = {"ala": "C[C@H](N)C(=O)O", "ring": "c1ccncc1"}


def test_the_read_back_passes_a_good_run_and_catches_every_kind_of_wrong_output(tmp_path):
    ala, ring = _embedded(INPUTS["ala"], 1), _embedded(INPUTS["ring"], 1)
    good = tmp_path / "good"
    _write_run(good, [("ala", 0, ala, {"stereo_ok": True}), ("ala", 1, ala, {"stereo_ok": True}),
                      ("ring", 0, ring, {"stereo_ok": None}), ("ring", 1, ring, {"stereo_ok": None})])
    found = check_outputs(good / "out.sdf", good / "out.jsonl", INPUTS, 2)
    assert found["invalid_total"] == 0 and found["sdf_records"] == 4 and found["sdf_stereo_agreement"] == 1.0
    assert found["stereo_disagreements"] == 0

    mirror = Chem.Mol(ala)
    for i in range(mirror.GetNumAtoms()):
        p = mirror.GetConformer().GetAtomPosition(i)
        mirror.GetConformer().SetAtomPosition(i, (-p.x, p.y, p.z))
    bad = tmp_path / "bad"
    _write_run(bad, [("ala", 0, mirror, {"stereo_ok": True}),  # the rows say match, the coordinates do not
                     ("ala", 1, None, {"finish_reason": "eos"}),  # rejected by the strict check
                     ("ring", 0, ala, {"stereo_ok": None})])  # another molecule's graph; ring#1 missing
    found = check_outputs(bad / "out.sdf", bad / "out.jsonl", INPUTS, 2)
    assert found["invalid_strict"] == 1 and found["graph_mismatches"] == 1 and found["molecules_without_k_rows"] == 1
    assert found["sdf_stereo_matches"] == 0 and found["stereo_disagreements"] == 1
    assert found["invalid_total"] == 1 + 1 + 1  # strict, graph, the missing row
    assert stereo_agreement(Chem.MolFromSmiles(INPUTS["ala"]), mirror).ok is False


def test_the_presets_split_and_name_their_cells():
    cells = build_plan(get_plan_preset("conformer-pipeline")).cells
    cli = [c for c in cells if c.scenario == "conformer-pipeline"]
    assert sorted(c.config["kv_dtype"] for c in cli) == ["auto", "auto", "fp8"] and all(c.config["runs"] == 2 for c in cli)
    defaults = [c for c in cli if c.config["max_slots"] == 0]  # no speed flag: --max-num-seqs auto, --kv-dtype auto
    assert len(defaults) == 1 and defaults[0].config["kv_dtype"] == "auto"
    engine = [c for c in cells if c.scenario == "constrained"]
    assert {c.config["constraint"] for c in engine} == {"on", "off"}
    assert sorted((c.config["slots"], c.config["kv_dtype"], c.config["forced_run_tokens"], c.config["forced_run_budget"])
                  for c in engine if c.config["slots"] != 256 or c.config["forced_run_tokens"]) == [
        (256, "auto", 4, 0.125), (256, "auto", 4, 0.25), (1024, "fp8", 0, 0.125), (1024, "fp8", 4, 0.125)]  # fmt: skip
    for c in cells:
        assert (c.config["num_molecules"], c.config["num_conformers"], c.config["min_heavy_atoms"],
                c.config["max_heavy_atoms"], c.config["assign_stereo"]) == (400, 8, 20, 50, True)
    soak = build_plan(get_plan_preset("conformer-soak")).cells
    assert sorted(c.config["temperature"] for c in soak) == [1.0, 1.5]
    assert sum(c.config["num_molecules"] * c.config["num_conformers"] for c in soak) >= 20_000


def test_impossible_cells_are_refused():
    base = {"scenario": "conformer-pipeline", "model": "tiny-qwen3"}
    with pytest.raises(ConfigError, match="max_heavy_atoms"):
        build_plan({"sweep": [{**base, "set": {"min_heavy_atoms": 20, "max_heavy_atoms": 10}}]})
    with pytest.raises(ConfigError, match="greedy"):
        build_plan({"sweep": [{**base, "set": {"temperature": 0.0, "stereo_retries": 1}}]})


@pytest.mark.slow  # ~15-30 s: the CLI in a subprocess (interpreter, torch, a tiny engine)
def test_a_cell_runs_the_cli_end_to_end(run_cell, tiny_checkpoint, tmp_path):
    model = tiny_checkpoint("tiny-qwen3")
    data = {"sweep": [{"scenario": "conformer-pipeline", "model": str(model),
                       "set": {"num_molecules": 2, "num_conformers": 1, "min_heavy_atoms": 3, "max_heavy_atoms": 4,
                               "assign_stereo": True, "dtype": "float32", "max_slots": 4, "runs": 1,
                               "device": "cpu", "cpu_threads": 1}}]}
    cell, outcome = run_cell(data, model)
    assert outcome.status == "ok", outcome.message
    m = outcome.metrics
    assert m["rows"] == m["rows_expected"] == 2 and m["invalid_total"] == 0 and m["valid_fraction"] == 1.0
    assert m["output_tokens"] > 0 and m["wall_s"] > m["pipeline_wall_s"] > m["engine_start_s"] > 0
    assert m["output_tokens_per_s"] == pytest.approx(m["output_tokens"] / m["wall_s"])
    assert "rerun_engine_start_s" not in m and m["command"].startswith("-m inferlab.cli conformers generate")
    # where the command's time went before the engine and outside the pipeline (Linux: /proc)
    assert list(m["before_engine_parts"]) == ["inputs", "pools", "torch", "sizing"]
    assert sum(m["before_engine_parts"].values()) == pytest.approx(m["before_engine_s"], abs=0.01)
    assert 0 < m["cli_entered_s"] < m["cli_start_s"] and m["cli_exit_s"] == pytest.approx(
        m["cli_start_s"] - m["cli_entered_s"])
    summary = json.loads((tmp_path / "conformer-pipeline" / cell.key / "run-1" / "summary.json").read_text())
    assert summary["output_tokens"] == m["output_tokens"]


def test_the_scale_out_preset_and_its_figures_from_the_scale_report(tmp_path):
    cells = build_plan(get_plan_preset("scale-out")).cells
    assert sorted(c.config["gpus"] for c in cells) == [1, 2] and all(c.config["runs"] == 1 for c in cells)
    argv = cli_argv({**cells[0].config, "gpus": 2}, tmp_path / "m", tmp_path / "in.smi", tmp_path / "run-1")
    assert argv[argv.index("--gpus") + 1] == "2" and "--summary-json" not in argv

    def shard(index: int, ok: int, tokens: int, run_s: float) -> dict:
        summary = {"conformers_ok": ok, "conformers_error": 1, "conformers_generated": ok + 1, "conformers_rejected": 1,
                   "output_tokens": tokens, "molecules_run": ok // 2, "engine_start_s": 3.0 + index, "run_s": run_s}
        return {"index": index, "rows": ok + 1, "est_tokens": tokens, "status": "done", "stats": {"summary": summary}}

    report = {"complete": True, "workers": 2, "imbalance": 1.1, "work_dir": "w",
              "shards": [shard(0, 10, 1000, 4.0), shard(1, 8, 600, 5.0)]}
    m = figures_from_scale_report(report, wall=10.0)
    assert m["output_tokens_per_s"] == 160.0 and m["steady_output_tokens_per_s"] == 320.0
    assert m["conformers_per_s"] == 2.0 and m["steady_conformers_per_s"] == 4.0 and m["engine_start_s"] == 4.0
    assert m["valid_fraction"] == pytest.approx(18 / 20) and [s["run_s"] for s in m["per_shard"]] == [4.0, 5.0]
    report["complete"], report["shards"][1]["status"] = False, "failed"
    with pytest.raises(RuntimeError, match=r"shards \[1\] failed"):
        figures_from_scale_report(report, wall=10.0)
