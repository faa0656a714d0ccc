"""The `constrained` scenario: its inputs (molecules that fit, requests, batches), the strict validity
check, and the seeds' HF baseline run end to end on a tiny Qwen3 with the qwen3-chem tokenizer (CPU)."""

from __future__ import annotations

import pytest
from rdkit import Chem
from rdkit.Chem import AllChem
from transformers import AutoTokenizer

from inferlab.bench.plan import build_plan
from inferlab.bench.scenarios.conformer_output_check import check_generations
from inferlab.bench.scenarios.constrained import ConformerRequests
from inferlab.bench.scenarios.molecules import MoleculeSelection, load_molecules
from inferlab.constraints.program import compile_program
from inferlab.errors import ConfigError, InputError
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
from inferlab.types import SamplingParams
from inferlab.workloads.conformers.chemistry.encode import encode_conformer
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.evaluation.hf_baseline_processor import build_baseline_template

PROFILE = get_profile("v3-fixed4")
TINY = {"num_molecules": 2, "num_conformers": 2, "batch_size": 2, "dtype": "float32", "device": "cpu",
        "sampling": "greedy", "warmup_steps": 4}


@pytest.fixture(scope="module")
def chem_tokenizer(qwen3_chem_dir):
    return AutoTokenizer.from_pretrained(str(qwen3_chem_dir))


@pytest.mark.slow
@pytest.mark.parametrize("which", ["qwen3-chem", "llama3-style"])
def test_molecules_fit_by_a_bound_that_covers_the_compiled_constraint(which, chem_tokenizer, nci_head):
    tokenizer = chem_tokenizer if which == "qwen3-chem" else build_builtin_tokenizer()
    found = load_molecules(nci_head, 12, PROFILE, tokenizer, max_positions=400)
    assert len(found.molecules) == 12 and found.skipped_too_long > 0
    lines = [ln.split()[0] for ln in nci_head.read_text().splitlines()]
    positions = [lines.index(m.smiles) for m in found.molecules]
    assert positions == sorted(positions)  # the first ones that fit, in file order
    for m in found.molecules:
        exact = compile_program(m.template.segments, tokenizer).max_new_tokens  # the engine's exact bound
        assert exact <= m.max_output_tokens <= 1.6 * exact
        assert len(m.prompt_ids) + m.max_output_tokens <= 400


def test_requests_are_k_per_molecule_and_batches_run_longest_first(chem_tokenizer, nci_head):
    found = load_molecules(nci_head, 6, PROFILE, chem_tokenizer, max_positions=4096)
    requests = ConformerRequests(found, 3, SamplingParams(temperature=0.0))
    sent = requests.call(list(range(18)))
    assert [(r.constraint.molecule, r.constraint.conformer) for r in sent[:4]] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert [r.id for r in sent[:2]] == ["1-0", "1-1"] and requests.call([5])[0].id == "2-5"  # fresh ids per call
    assert sent[3].prompt_ids == found.molecules[1].prompt_ids
    assert sent[3].constraint.smiles == found.molecules[1].smiles
    bounds = [m.max_output_tokens for m in found.molecules]
    batches = requests.batches(18, 4, sort_by_length=True)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(18)) and [len(b) for b in batches] == [4, 4, 4, 4, 2]
    ordered = [bounds[i // 3] for i in flat]
    assert ordered == sorted(ordered, reverse=True)
    assert requests.batches(18, 4, sort_by_length=False)[0] == [0, 1, 2, 3]
    assert requests.batches(6, 4, sort_by_length=False) == [[0, 1, 2, 3], [4, 5]]  # the measured prefix


def _constraints(found):
    return [ConformerRequests(found, 1, SamplingParams()).items[i][1] for i in range(len(found.molecules))]


def test_validity_is_the_templates_strict_check(chem_tokenizer, nci_head):
    found = load_molecules(nci_head, 2, PROFILE, chem_tokenizer, max_positions=4096)
    requests = _constraints(found)
    eos = chem_tokenizer.eos_token_id
    outputs = []
    for r in requests:  # a real conformer, encoded by the encoder: what a perfect model writes
        mol = Chem.AddHs(Chem.MolFromSmiles(r.smiles))
        assert AllChem.EmbedMolecule(mol, randomSeed=1) == 0
        text = encode_conformer(mol, PROFILE).generation_text(PROFILE)
        outputs.append(chem_tokenizer(text, add_special_tokens=False)["input_ids"] + [eos, 0, 0])  # padded after EOS
    whole = check_generations(list(zip(requests, outputs)), frozenset([eos]), chem_tokenizer, PROFILE)
    assert whole["valid_fraction"] == 1.0 and whole["graph_match_fraction"] == 1.0
    broken = [outputs[0], outputs[1][:-3]]  # row 2: the whole text, but no EOS
    broken[0] = broken[0][:5] + broken[0][6:]  # a character of the first block dropped
    result = check_generations(list(zip(requests, broken)), frozenset([eos]), chem_tokenizer, PROFILE)
    assert result["valid_rows"] == 1 and result["ended_with_eos_fraction"] == 0.5
    assert result["graph_match_rows"] == 1  # the broken block reads as no molecule at all
    assert len(result["invalid_examples"]) == 1 and requests[0].smiles in result["invalid_examples"][0]


def test_validity_reports_the_stereo_of_the_coordinates(chem_tokenizer, nci_head):
    """Stereo assigned to drug-sized NCI molecules; ETKDG conformers of the input isomer match it, their
    mirror images (the same text skeleton, mirrored coordinates) do not."""
    found = load_molecules(nci_head, 20, PROFILE, chem_tokenizer, 4096, MoleculeSelection(20, 50, True))
    requests = [r for r in _constraints(found) if "@" in r.smiles][:2]
    assert len(requests) == 2
    eos = chem_tokenizer.eos_token_id
    for mirror, expected in ((1, 1.0), (-1, 0.0)):
        outputs = []
        for r in requests:
            mol = Chem.AddHs(Chem.MolFromSmiles(r.smiles))
            assert AllChem.EmbedMolecule(mol, randomSeed=1) == 0
            for i in range(mol.GetNumAtoms()):
                p = mol.GetConformer().GetAtomPosition(i)
                mol.GetConformer().SetAtomPosition(i, (mirror * p.x, p.y, p.z))
            text = encode_conformer(mol, PROFILE).generation_text(PROFILE)
            outputs.append(chem_tokenizer(text, add_special_tokens=False)["input_ids"] + [eos])
        result = check_generations(list(zip(requests, outputs)), frozenset([eos]), chem_tokenizer, PROFILE)
        assert result["valid_fraction"] == 1.0 and result["stereo_checked"] == 2
        assert result["stereo_agreement"] == expected


@pytest.fixture
def small_molecules(tmp_path):
    """Two molecules of 3 and 4 heavy atoms (a branch): short conformers, so the HF runs take seconds."""
    smi = tmp_path / "small.smi"
    smi.write_text("CCO ethanol\nCC(=O)O acetic-acid\n")
    return smi


@pytest.mark.slow
def test_the_hf_baseline_runs_and_every_row_ends_after_its_skeleton(tiny_checkpoint, run_cell, chem_tokenizer,
                                                                    small_molecules):
    path = tiny_checkpoint("tiny-qwen3")
    data = {"sweep": [{"scenario": "constrained", "model": str(path), "backend": "hf",
                       "set": {**TINY, "max_requests": 2, "molecules_file": str(small_molecules)}}]}
    cell, out = run_cell(data, path)
    assert out.status == "ok", out.message
    m = out.metrics
    found = load_molecules(small_molecules, 2, PROFILE, chem_tokenizer, max_positions=512)
    skeleton = len(build_baseline_template(found.molecules[0].smiles, PROFILE, chem_tokenizer))
    # the first 2 of 4 requests are molecule 0's two conformers; the processor forces EOS after its skeleton
    assert m["requests_measured"] == 2 and m["requests_total"] == 4 and m["output_tokens"] == 2 * (skeleton + 1)
    assert m["output_tokens_per_s"] == pytest.approx(m["output_tokens"] / m["steady_s"])
    assert m["molecules_per_s"] == pytest.approx(m["requests_per_s"] / 2)
    assert m["ended_with_eos_fraction"] == 1.0 and 0.0 <= m["valid_fraction"] <= 1.0 and m["checked_rows"] == 2
    # a dynamic cache (the default) warms up over the full length: None = no short warm-up
    assert m["first_call_steps"] is None and m["graphs_compiled_while_timed"] == 0
    assert any("the first 2 of 4 requests" in w for w in out.warnings)


@pytest.mark.slow
def test_a_compiled_static_cache_compiles_nothing_while_timed(tiny_checkpoint, run_cell, small_molecules):
    path = tiny_checkpoint("tiny-qwen3")
    data = {"sweep": [{"scenario": "constrained", "model": str(path), "backend": "hf",
                       "set": {**TINY, "num_molecules": 1, "kv_cache": "static", "compile": True,
                               "compile_backend": "eager", "molecules_file": str(small_molecules)}}]}
    _, out = run_cell(data, path)
    assert out.status == "ok", out.message
    assert out.metrics["compile_observed"] is True and out.metrics["graphs_compiled_while_timed"] == 0


def test_too_few_molecules_is_an_error_row_that_says_what_to_lower(tiny_checkpoint, run_cell, tmp_path):
    path = tiny_checkpoint("tiny-qwen3")
    smi = tmp_path / "mols.smi"
    smi.write_text("CCO ethanol\nnot-a-smiles bad\nc1ccccc1O phenol\n")
    data = {"sweep": [{"scenario": "constrained", "model": str(path), "backend": "hf",
                       "set": {**TINY, "num_molecules": 3, "num_conformers": 1, "max_requests": 2,
                               "molecules_file": str(smi)}}]}
    _, out = run_cell(data, path)
    assert out.status == "error" and "only 2 molecules" in out.message and "1 unreadable" in out.message
    with pytest.raises(InputError, match="lower num_molecules"):
        load_molecules(smi, 3, PROFILE, build_builtin_tokenizer(), 512)


@pytest.mark.parametrize("knobs, message", [
    ({"num_molecules": 3, "num_conformers": 1}, "not a multiple of batch_size=2"),
    ({"max_requests": 3}, "not a multiple of batch_size=2"),
    ({"processor": "python"}, "belongs to backend hf of scenario generate"),
    ({"compile": True}, "HF compiles only static caches"),
])
def test_impossible_constrained_plans_are_refused(knobs, message):
    with pytest.raises(ConfigError, match=message):
        build_plan({"sweep": [{"scenario": "constrained", "model": "tiny-qwen3", "backend": "hf",
                               "set": {**TINY, **knobs}}]})
    with pytest.raises(ConfigError, match="not a causal LM"):
        build_plan({"sweep": [{"scenario": "constrained", "model": "tiny-qwen2-cls", "backend": "hf", "set": TINY}]})


def test_a_qwen3_preset_is_built_with_the_qwen3_chem_tokenizer_and_hf_is_the_constrained_backend(qwen3_chem_dir):
    from inferlab.bench.backends import get_backend

    cell = build_plan({"sweep": [{"scenario": "constrained", "model": "tiny-qwen3", "backend": "hf", "set": TINY}]}).cells[0]
    assert cell.config["tokenizer"] == str(qwen3_chem_dir) and cell.config["compile"] is False
    assert get_backend("hf", "constrained") is not get_backend("hf", "generate")
    with pytest.raises(ConfigError, match="unknown backend 'hf-continuous' for scenario constrained; choose one of: "
                                          "hf, hf-xgrammar, inferlab, vllm"):
        get_backend("hf-continuous", "constrained")


def test_drug_sized_molecules_are_kept_by_their_heavy_atoms(chem_tokenizer, nci_head):
    found = load_molecules(nci_head, 5, PROFILE, chem_tokenizer, 2048, MoleculeSelection(20, 50))
    sizes = [Chem.MolFromSmiles(m.smiles).GetNumHeavyAtoms() for m in found.molecules]
    assert all(20 <= n <= 50 for n in sizes) and found.skipped_by_size > 0
    everything = load_molecules(nci_head, 5, PROFILE, chem_tokenizer, 2048)
    assert everything.skipped_by_size == 0 and min(Chem.MolFromSmiles(m.smiles).GetNumHeavyAtoms()
                                                   for m in everything.molecules) < 20
    with pytest.raises(ConfigError, match="max_heavy_atoms=20 is below min_heavy_atoms=30"):
        build_plan({"sweep": [{"scenario": "constrained", "model": "tiny-qwen3", "backend": "hf",
                               "set": {**TINY, "min_heavy_atoms": 30, "max_heavy_atoms": 20}}]})


@pytest.mark.slow  # ~10 s: two engines decoding on CPU
def test_the_engine_backend_serves_conformer_requests_with_the_constraint_on_and_off(tiny_checkpoint, tmp_path):
    """Requests carry a ConformerConstraint; the engine backend compiles it in prepare and generates valid
    conformers, or (constraint=off) unconstrained rows of exactly the constrained lengths. A request it was not
    prepared for is an error Result; a warm-up call runs the first `slots` requests."""
    import torch

    from inferlab.bench.backends import get_backend
    from inferlab.bench.backends.base import ConstrainedSpec

    tokenizer = build_builtin_tokenizer()
    (tmp_path / "small.smi").write_text("C m0\nCO m1\n")  # short conformers: a few seconds of CPU decoding
    found = load_molecules(tmp_path / "small.smi", 2, PROFILE, tokenizer, 512)
    requests = ConformerRequests(found, 2, SamplingParams(temperature=0.0))
    lengths = {}
    for constraint in ("on", "off"):
        knobs = {"slots": 2, "batch_size": 2, "constraint": constraint, "decode_steps_per_sync": 8, "kv_dtype": "auto",
                 "forced_run_tokens": 2 if constraint == "on" else 0, "forced_run_budget": 0.25}
        backend = get_backend("inferlab", "constrained").create(knobs, ConstrainedSpec(seed=0, profile="v3-fixed4"))
        backend.load(tiny_checkpoint("tiny"), torch.device("cpu"), torch.float32)
        backend.prepare(requests.requests([0, 1]))
        sent = requests.call([0, 1, 2])  # request 2 (the second molecule) was not prepared
        results = {r.id: r for r in backend.generate(sent)}
        assert "prepare" in results[sent[2].id].error
        outputs = [(sent[i].constraint, results[sent[i].id].token_ids) for i in (0, 1)]
        if constraint == "on":
            lengths = {i: len(ids) for i, (_, ids) in enumerate(outputs)}
            assert check_generations(outputs, backend.eos_token_ids, tokenizer, PROFILE)["valid_fraction"] == 1.0
            assert len(list(backend.generate(requests.call([0, 1, 0]), stop_after_steps=4))) == 2  # the 2 slots
        else:
            assert {i: len(ids) for i, (_, ids) in enumerate(outputs)} == lengths
            assert all(results[sent[i].id].finish_reason == "length" for i in (0, 1))
        backend.close()
