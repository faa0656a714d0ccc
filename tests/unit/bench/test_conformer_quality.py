"""The `conformer-quality` scenario: the per-seed figures and their spread (known answers, the zero-coverage rule),
the preset's plan, its refusals, the report's verdicts and model card table, and cells end to end on a tiny
random checkpoint (CPU, the built-in tokenizer, 2 small molecules)."""

from __future__ import annotations

import json
import math

import pytest

from inferlab.bench.plan import build_plan
from inferlab.bench.plan_presets import get_plan_preset
from inferlab.bench.scenarios import get_scenario
from inferlab.bench.scenarios.conformer_quality import quality_requests, request_seed
from inferlab.bench.scenarios.conformer_quality_scores import MoleculeScore, seed_figures, spread
from inferlab.errors import ConfigError

THRESHOLDS = (0.75, 1.25)


def _score(molecule, valid, recall, precision, amr_r, amr_p, attempted=4, stereo=(0, 0), mirrored=0):
    return MoleculeScore(seed=1, molecule=molecule, attempted=attempted, valid=valid, stereo_checked=stereo[0],
                         stereo_matches=stereo[1], stereo_mirrored=mirrored, coverage_recall=recall, coverage_precision=precision,
                         matching_recall=amr_r, matching_precision=amr_p, failed_pairs=0, conformers=(), reasons=())


def test_seed_figures_count_a_molecule_without_valid_output_as_zero_coverage():
    scores = [_score(0, 4, (0.5, 1.0), (0.25, 0.75), 0.8, 1.0, stereo=(4, 3)),
              _score(1, 2, (1.0, 1.0), (0.5, 0.5), 0.4, 0.6, stereo=(2, 1)),
              _score(2, 0, (0.0, 0.0), (0.0, 0.0), math.nan, math.nan)]  # no valid output: a miss
    f = seed_figures(scores, THRESHOLDS)
    assert f["cov_r_0.75"] == pytest.approx(0.5) and f["cov_r_1.25"] == pytest.approx(2 / 3)  # (0.5 + 1 + 0) / 3
    assert f["cov_p_0.75"] == pytest.approx(0.25) and f["cov_p_1.25"] == pytest.approx(1.25 / 3)
    assert f["cov_r_0.75_median"] == pytest.approx(0.5)
    assert f["amr_r"] == pytest.approx(0.6) and f["amr_p"] == pytest.approx(0.8) and f["amr_molecules"] == 2
    assert f["validity"] == pytest.approx(6 / 12) and f["molecules_without_valid_output"] == 1
    assert f["stereo_agreement"] == pytest.approx(4 / 6)


def test_spread_over_seeds():
    s = spread([0.2, 0.4, 0.3])
    assert (s["mean"], s["min"], s["max"]) == (pytest.approx(0.3), 0.2, 0.4) and s["std"] == pytest.approx(0.1)
    assert spread([0.5])["std"] is None
    assert spread([0.5, None]) is None  # a seed without the figure: no spread claimed


def test_requests_have_their_own_seeds_and_bounds():
    from types import SimpleNamespace

    from inferlab.types import SamplingParams

    molecules = [SimpleNamespace(prompt_ids=(1, 2), smiles="CCO", template=None, max_output_tokens=40),
                 SimpleNamespace(prompt_ids=(3,), smiles="CCN", template=None, max_output_tokens=50)]
    one = quality_requests(molecules, 3, SamplingParams(top_k=50), seed=1)
    two = quality_requests(molecules, 3, SamplingParams(top_k=50), seed=2)
    assert [r.id for r in one[:4]] == ["s1/0#0", "s1/0#1", "s1/0#2", "s1/1#0"]
    assert [r.sampling.max_new_tokens for r in one] == [40] * 3 + [50] * 3 and one[0].sampling.top_k == 50
    seeds = {r.sampling.seed for r in one + two}
    assert len(seeds) == 12  # every request of every sampling seed draws its own
    assert one[0].sampling.seed == request_seed(1, "s1/0#0") == quality_requests(molecules, 1, SamplingParams(), 1)[0].sampling.seed
    assert (one[3].constraint.molecule, one[3].constraint.conformer, one[3].constraint.smiles) == (1, 0, "CCN")


def test_the_preset_runs_every_system_on_the_same_molecules_and_references():
    cells = build_plan(get_plan_preset("conformer-quality")).cells
    systems = {(c.backend, c.config.get("constraint"), c.config.get("kv_dtype"), c.config.get("processor"),
                c.config["top_k"]) for c in cells}
    for top_k in (0, 50):
        assert {("inferlab", "on", "auto", None, top_k), ("inferlab", "on", "fp8", None, top_k),
                ("inferlab", "off", "auto", None, top_k), ("hf", None, None, "none", top_k),
                ("hf", None, None, "python", top_k)} <= systems
    assert ("etkdg", None, None, None, 0) in systems and len(cells) == 15
    repaired = [cell for cell in cells if cell.config["stereo_mirror"] or cell.config["stereo_retries"]]
    assert sorted((cell.config["kv_dtype"], cell.config["top_k"], cell.config["stereo_mirror"],
                   cell.config["stereo_retries"]) for cell in repaired) == [
        ("auto", 0, True, 0), ("auto", 0, True, 3), ("auto", 50, True, 0), ("auto", 50, True, 3)]
    # the pipeline's remedies beside the model's own stereo: every other cell scores the model's own
    shared = ("model", "num_molecules", "molecules_file", "max_heavy_atoms", "assign_stereo", "num_references", "reference_seed",
              "num_seeds", "seed", "subset_molecules", "temperature", "top_p", "thresholds", "num_generations")
    assert len({json.dumps([c.model if k == "model" else c.config[k] for k in shared]) for c in cells}) == 1
    c = cells[0].config
    from inferlab.workloads.conformers.reference_model import FOLDER, HELD_OUT_FILE

    # the committed reference model on its held-out molecules, every stereocentre scored
    assert cells[0].model == str(FOLDER) and c["molecules_file"] == str(HELD_OUT_FILE) and c["assign_stereo"]
    assert (c["num_molecules"], c["max_heavy_atoms"], c["num_references"], c["num_seeds"], c["reference_seed"],
            c["thresholds"], c["temperature"], c["top_p"]) == (100, 30, 8, 3, 1001, "0.75,1.25", 1.0, 1.0)
    slow = [cell for cell in cells if cell.config.get("processor") == "python"]
    assert all(cell.config["on_subset_only"] and cell.config["subset_molecules"] == 16 for cell in slow)
    assert not any(cell.config["on_subset_only"] for cell in cells if cell not in slow)
    estimate = sum(get_scenario(cell.scenario).estimate_s(cell, True) for cell in cells)
    assert estimate < 12 * 60  # ~11 minutes on an H200: two device calls (the lab resumes a preset)


def _plan(backend="inferlab", **settings):
    return {"sweep": [{"scenario": "conformer-quality", "model": "tiny", "backend": backend, "set": settings}]}


@pytest.mark.parametrize("backend, settings, match", [
    ("inferlab", {"thresholds": "0.75,x"}, "thresholds"),
    ("inferlab", {"on_subset_only": True}, "subset_molecules"),
    ("inferlab", {"num_molecules": 4, "subset_molecules": 8}, "subset_molecules=8"),
    ("inferlab", {"temperature": 0.0}, "greedy"),
    ("inferlab", {"temperature": 0.0, "num_seeds": 1, "stereo_retries": 1}, "temperature > 0"),
    ("etkdg", {"stereo_retries": 1}, "not etkdg"),
    ("etkdg", {"seed": 1000, "num_seeds": 3}, "reference_seed"),
])
def test_impossible_cells_are_refused_by_name(backend, settings, match):
    with pytest.raises(ConfigError, match=match):
        build_plan(_plan(backend, **settings))


TINY = {"num_molecules": 2, "num_references": 2, "num_seeds": 2, "dtype": "float32", "device": "cpu",
        "min_heavy_atoms": 4, "max_heavy_atoms": 8, "workers": 1, "subset_molecules": 1, "slots": 4}


@pytest.fixture(autouse=True)
def _molecules_from_the_nci_head(nci_head, monkeypatch):
    """The cells' default molecules: the head of NCI first_5K.smi (conftest.py's nci_head: the same first
    molecules, a tenth of the parse per cell); a test that names its own file overrides it."""
    monkeypatch.setitem(TINY, "molecules_file", str(nci_head))


def _cell(run_cell, tiny_checkpoint, backend, **settings):
    knobs = {**TINY, **settings}
    if backend != "inferlab":
        knobs.pop("slots")
    return run_cell(_plan(backend, **knobs), tiny_checkpoint("tiny"))


def test_an_etkdg_cell_end_to_end_scores_the_shared_references(run_cell, tiny_checkpoint, tmp_path, capsys):
    from inferlab.cli import main

    _, first = _cell(run_cell, tiny_checkpoint, "etkdg")
    assert first.status == "ok", first.message
    m = first.metrics
    assert m["molecules_evaluated"] == 2 and m["generations_per_molecule"] == 4 and m["seeds"] == [1, 2]
    assert m["references_embed_s"] > 0 and m["system"] == "ETKDG, another seed (the ceiling)"
    for seed in m["per_seed"]:  # ETKDG's conformers pass the strict check (encoded, tokenised, read back)
        assert seed["validity"] == 1.0 and seed["molecules_without_valid_output"] == 0
        assert 0.0 < seed["cov_r_1.25"] <= 1.0 and seed["amr_r"] < 2.0
    q = m["quality"]
    assert q["cov_r_0.75"]["values"] == [s["cov_r_0.75"] for s in m["per_seed"]] and m["coverage_recall"] == q["cov_r_0.75"]["mean"]
    assert m["quality_on_subset"]["validity"]["mean"] == 1.0 and m["subset_molecules"] == 1
    curve = m["coverage_curve"]
    assert curve["cov_r"] == sorted(curve["cov_r"]) and curve["cov_r"][-1] > 0  # coverage grows with the threshold
    # the seed's SDF read by `conformers evaluate` against the references gives the row's figures
    out = tmp_path / "eval.json"
    assert main(["conformers", "evaluate", "--generated", m["generated_files"][0], "--reference", m["references_file"],
                 "--workers", "1", "--output", str(out)]) == 0
    capsys.readouterr()
    summary = json.loads(out.read_text())["summary"]
    assert summary["coverage_recall"]["0.75"]["mean"] == pytest.approx(m["per_seed"][0]["cov_r_0.75"])
    assert summary["matching_precision"]["mean"] == pytest.approx(m["per_seed"][0]["amr_p"])
    # a second cell of the same molecules reads the references back instead of embedding them
    _, again = _cell(run_cell, tiny_checkpoint, "etkdg", seed=5)
    assert again.status == "ok" and again.metrics["references_embed_s"] == 0
    assert again.metrics["references_file"] == m["references_file"]


def test_the_fp8_cache_is_not_measured_on_cpu(run_cell, tiny_checkpoint):
    _, out = _cell(run_cell, tiny_checkpoint, "inferlab", kv_dtype="fp8")
    assert out.status == "unavailable" and "CUDA" in out.message


@pytest.mark.slow
def test_engine_cells_constrained_and_unconstrained(run_cell, tiny_checkpoint):
    _, on = _cell(run_cell, tiny_checkpoint, "inferlab", top_k=50, warmup=0)
    _, off = _cell(run_cell, tiny_checkpoint, "inferlab", constraint="off", warmup=0)
    assert on.status == off.status == "ok", (on.message, off.message)
    assert [s["validity"] for s in on.metrics["per_seed"]] == [1.0, 1.0]  # by construction, random weights or not
    assert on.metrics["system"] == "engine, constrained, float32 KV"
    assert off.metrics["system"] == "engine, unconstrained" and off.metrics["references_file"] == on.metrics["references_file"]
    # a random model's unconstrained outputs are not conformers: misses, which coverage counts as 0
    for seed in off.metrics["per_seed"]:
        assert seed["validity"] == 0.0 and seed["molecules_without_valid_output"] == 2
        assert seed["cov_r_1.25"] == seed["cov_p_1.25"] == 0.0 and seed["amr_r"] is None
    assert all(call["output_tokens"] > 0 for call in on.metrics["calls"])


@pytest.mark.slow
def test_stereo_retries_sample_the_wrong_stereo_again_and_never_lose_a_match(run_cell, tiny_checkpoint, tmp_path):
    chiral = tmp_path / "chiral.smi"
    chiral.write_text("C[C@H](N)C(=O)O alanine\nC[C@@H](O)CC butanol\n")
    _, plain = _cell(run_cell, tiny_checkpoint, "inferlab", molecules_file=str(chiral), warmup=0)
    _, retried = _cell(run_cell, tiny_checkpoint, "inferlab", molecules_file=str(chiral), warmup=0, stereo_retries=2)
    assert plain.status == retried.status == "ok", (plain.message, retried.message)
    assert retried.metrics["system"] == "engine, constrained, float32 KV + 2 stereo retries"
    for before, after, call in zip(plain.metrics["per_seed"], retried.metrics["per_seed"], retried.metrics["calls"]):
        matches = [round(s["stereo_agreement"] * s["stereo_checked"]) for s in (before, after)]
        wrong = before["stereo_checked"] - matches[0]  # a random model: about half the hands wrong
        attempts = call["stereo_retry_attempts"]
        assert wrong > 0 and attempts[0] == wrong  # the same first attempts (same seeds), each wrong one redrawn
        assert all(b <= a for a, b in zip(attempts, attempts[1:]))  # a round redraws only what the last got wrong
        assert matches[1] >= matches[0] and after["validity"] == 1.0  # a right hand is never replaced
        assert call["stereo_retry_output_tokens"] > 0


@pytest.mark.slow
def test_the_mirror_repairs_every_wrong_hand_of_a_one_centre_molecule(run_cell, tiny_checkpoint, tmp_path):
    chiral = tmp_path / "chiral.smi"
    chiral.write_text("C[C@H](N)C(=O)O alanine\nC[C@@H](O)CC butanol\n")
    _, plain = _cell(run_cell, tiny_checkpoint, "inferlab", molecules_file=str(chiral), warmup=0)
    _, mirrored = _cell(run_cell, tiny_checkpoint, "inferlab", molecules_file=str(chiral), warmup=0, stereo_mirror=True)
    assert plain.status == mirrored.status == "ok", (plain.message, mirrored.message)
    assert mirrored.metrics["system"] == "engine, constrained, float32 KV + mirror"
    for before, after in zip(plain.metrics["per_seed"], mirrored.metrics["per_seed"]):
        wrong = before["stereo_checked"] * (1 - before["stereo_agreement"])
        assert wrong > 0.5 and before["stereo_mirrored"] == 0  # a random model: about half the hands wrong
        assert after["stereo_agreement"] == 1.0 and after["stereo_mirrored"] * after["stereo_checked"] == pytest.approx(wrong)
        assert after["validity"] == before["validity"] and after["generations"] == before["generations"]


@pytest.mark.slow
def test_transformers_cells_with_and_without_the_seeds_processor(run_cell, tiny_checkpoint):
    _, free = _cell(run_cell, tiny_checkpoint, "hf", batch_size=3, warmup=0)
    _, python = _cell(run_cell, tiny_checkpoint, "hf", processor="python", top_k=50, on_subset_only=True, warmup=0)
    assert free.status == python.status == "ok", (free.message, python.message)
    assert free.metrics["system"] == "transformers, unconstrained"
    assert python.metrics["molecules_run"] == 1 and "on_subset_only" in python.metrics["run_on"]
    assert any("on_subset_only" in w for w in python.warnings)
    # the processor's blocks are its placeholder's length: a random model fills them with junk the check rejects
    assert python.metrics["quality"]["validity"]["mean"] == 0.0 and python.metrics["invalid_examples"]


def _row(backend, values, *, top_k=0, status="ok", subset=None, **config):
    """A conformer-quality row whose figures take `values` (name -> per-seed values); subset: the same over
    the comparison subset."""
    names = ("cov_r_0.75", "cov_p_0.75", "cov_r_1.25", "cov_p_1.25", "amr_r", "amr_p", "validity", "stereo_agreement",
             "molecules_without_valid_output", "output_tokens_per_s")

    def quality(figures):
        return {n: spread(list(figures.get(n, [0.5, 0.5, 0.5]))) for n in names}

    metrics = {"thresholds": [0.75, 1.25], "quality": quality(values), "molecules_run": 100, "molecules_evaluated": 100,
               "run_on": "all 100 molecules", "seeds": [1, 2, 3], "generations_per_molecule": 16,
               "coverage_curve": {"thresholds": [0.5, 1.0, 1.5], "cov_r": [0.1, 0.4, 0.8], "cov_p": [0.1, 0.3, 0.6]}}
    if subset is not None:
        metrics.update(quality_on_subset=quality(subset), subset_molecules=32)
    cfg = {"temperature": 1.0, "top_p": 1.0, "top_k": top_k, "num_references": 8, "reference_seed": 1001,
           "dtype": "bfloat16", "on_subset_only": False, **config}
    return {"scenario": "conformer-quality", "backend": backend, "model": "/ckpt/ref", "status": status,
            "message": "" if status == "ok" else "kv_dtype=fp8 on cpu", "config": cfg,
            "metrics": metrics if status == "ok" else {}, "env": {"gpu": "NVIDIA H200", "commit": "abcdef1234567"}}


def _verdict_lines(rows):
    from inferlab.bench.report_quality import groups, verdicts

    (key, systems), = groups(rows).items()
    return {line.split(":")[0].lstrip("- "): line for line in verdicts(systems, [0.75, 1.25])}


def test_verdicts_read_each_figure_against_the_other_systems_spread():
    free = _row("inferlab", {"cov_r_0.75": [0.40, 0.44, 0.48], "cov_r_1.25": [0.7, 0.72, 0.74], "amr_r": [0.9, 0.95, 1.0]},
                constraint="off")
    inside = _row("inferlab", {"cov_r_0.75": [0.41, 0.42, 0.43], "cov_r_1.25": [0.8, 0.8, 0.8], "amr_r": [0.97, 0.98, 0.99]},
                  constraint="on", kv_dtype="auto")
    worse = _row("inferlab", {"cov_r_0.75": [0.30, 0.35, 0.39], "cov_r_1.25": [0.8, 0.8, 0.8], "amr_r": [1.1, 1.2, 1.3]},
                 constraint="on", kv_dtype="fp8")
    lines = _verdict_lines([inside, free, worse])
    assert "**yes**" in lines["constrained within the unconstrained spread (COV-R, AMR-R)"]
    fp8 = lines["fp8 within bf16's spread"]
    assert "**no**" in fp8 and "COV-R <0.75 A" in fp8 and "AMR-R A" in fp8 and "COV-R <1.25 A" not in fp8.split("not on")[1]
    lines = _verdict_lines([worse | {"config": inside["config"]}, free])
    assert "**no**" in lines["constrained within the unconstrained spread (COV-R, AMR-R)"]


def test_the_engine_is_compared_with_the_processor_on_the_processors_subset():
    engine = _row("inferlab", {"validity": [1.0] * 3}, subset={"validity": [1.0] * 3, "cov_r_0.75": [0.6] * 3},
                  constraint="on", kv_dtype="auto")
    processor = _row("hf", {"validity": [0.3] * 3, "cov_r_0.75": [0.55] * 3}, processor="python", on_subset_only=True)
    line = _verdict_lines([engine, processor])["engine >= transformers + processor on every metric (on the processor's subset)"]
    assert "**yes**" in line
    processor["metrics"]["quality"]["cov_r_0.75"] = spread([0.7] * 3)  # better than the engine on the subset
    line = _verdict_lines([engine, processor])["engine >= transformers + processor on every metric (on the processor's subset)"]
    assert "**no**" in line and "COV-R <0.75 A" in line


def test_the_report_section_the_model_card_table_and_the_plot(tmp_path):
    from inferlab.bench.report import write_report

    rows = [_row("inferlab", {"cov_r_0.75": [0.41, 0.42, 0.43]}, top_k=top_k, constraint="on", kv_dtype="auto")
            for top_k in (0, 50)]
    rows += [_row("inferlab", {}, constraint="on", kv_dtype="fp8", status="unavailable"), _row("etkdg", {"validity": [1.0] * 3})]
    rows += [_row("inferlab", {"cov_r_0.75": [0.50, 0.51, 0.52]}, constraint="on", kv_dtype="auto", stereo_retries=3)]
    path = write_report(["run"], rows, tmp_path / "report")
    text = path.read_text()
    section = text.split("## Conformer quality", 1)[1]
    assert "T=1, top-p 1, no top-k" in section and "T=1, top-p 1, top-k 50" in section
    assert section.count("ETKDG, another seed (the ceiling)") == 2  # the ceiling beside both samplings
    assert "42.0% ± 1.0 [41.0-43.0]" in section and "unavailable: kv_dtype=fp8 on cpu" in section
    assert "KV + 3 stereo retries" in section and "51.0% ± 1.0 [50.0-52.0]" in section  # a system of its own
    card = (tmp_path / "report" / "quality-table.md").read_text()
    assert card.startswith("## Quality") and "42.0% ± 1.0 |" in card and "[41.0-43.0]" not in card
    assert "K = 8 ETKDGv3 references (seed 1001)" in card and "NVIDIA H200" in card
    assert (tmp_path / "report" / "plots" / "conformer-quality.png").is_file()


def test_recommend_names_no_best_system_from_quality_rows():
    from inferlab.bench.recommend import recommend

    rows = [_row("inferlab", {"cov_r_0.75": [0.4] * 3}, constraint="on", kv_dtype="auto"), _row("etkdg", {"cov_r_0.75": [0.9] * 3})]
    for r in rows:
        r["metrics"]["coverage_recall"], r["headline_metric"] = r["metrics"]["quality"]["cov_r_0.75"]["mean"], "coverage_recall"
    assert recommend(rows) == []
    rows[0]["scenario"] = rows[1]["scenario"] = "constrained"  # the same rows of a speed scenario are ranked
    assert recommend(rows)
