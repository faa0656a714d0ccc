"""Estimated tokens per unit: exact prompt token counts from the model's tokenizer (plus the tokens to be
generated), and the conformer estimate from the atom count against real tokenised conformers."""

from __future__ import annotations

import json
import os

import pytest
from rdkit import Chem, RDConfig
from rdkit.Chem import AllChem
from scale_testkit import varied_lines, write_jsonl
from transformers import AutoTokenizer

from inferlab.jsonl_io import read_jsonl_records
from inferlab.scale.params import from_params, to_params
from inferlab.scale.workloads.classify import CLASSIFY, classify_params
from inferlab.scale.workloads.conformers import conformer_tokens, read_conformer_units
from inferlab.scale.workloads.generate import GENERATE, generate_params
from inferlab.types import SamplingParams
from inferlab.workloads.classify import ClassifyOptions
from inferlab.workloads.conformers.chemistry.encode import encode_conformer
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.hf_loading import ModelLoadConfig


@pytest.fixture(scope="module")
def tiny_dir(tiny_checkpoint):
    return tiny_checkpoint("tiny")


def test_text_units_count_prompt_tokens_exactly(tmp_path, tiny_dir):
    inp = write_jsonl(tmp_path / "in.jsonl", varied_lines(12))
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    params = classify_params(ModelLoadConfig(str(tiny_dir)), ClassifyOptions())
    plan = CLASSIFY.read_units(inp, params)
    records = list(read_jsonl_records(inp))
    assert [u.line for u in plan.units] == [r.line_no for r in records]
    assert [u.key for u in plan.units] == [r.key for r in records]  # a repeated id keyed as its first line
    for unit, record in zip(plan.units, records):
        text = (record.data or {}).get("text")
        expected = len(tok(text)["input_ids"]) if text else 1.0  # unusable lines cost one token
        assert unit.weight == expected, record


def test_generate_units_add_the_new_tokens(tmp_path, tiny_dir):
    inp = write_jsonl(tmp_path / "p.jsonl", [
        {"id": "a", "prompt": "hello there"},
        {"id": "b", "prompt": "hello there", "max_new_tokens": 7},
        {"id": "c", "prompt_ids": [5, 6, 7, 8]},
        {"id": "d", "messages": [{"role": "user", "content": "hi"}]},  # no chat template: an error row
    ])
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    n = len(tok("hello there")["input_ids"])
    params = generate_params(str(tiny_dir), SamplingParams(max_new_tokens=50))
    assert [u.weight for u in GENERATE.read_units(inp, params).units] == [n + 50, n + 7, 4 + 50, 1.0]


def test_sampling_params_survive_the_json_round_trip(tiny_dir):
    sampling = SamplingParams(temperature=0.7, top_k=5, stop_token_ids=(3, 4), max_new_tokens=9)
    params = json.loads(json.dumps(generate_params(str(tiny_dir), sampling)))  # as a task file carries them
    assert params["sampling"]["stop_token_ids"] == [3, 4]
    assert from_params(SamplingParams, params["sampling"]) == sampling  # the tuple is restored
    options = ClassifyOptions(batch_size=3, max_length=77)
    assert from_params(ClassifyOptions, json.loads(json.dumps(to_params(options)))) == options  # nested backoff


def _nci(limit: int) -> list[str]:
    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        return [line.split()[0] for line, _ in zip(f, range(limit))]


def test_conformer_estimate_tracks_real_token_counts(qwen3_chem_dir):
    tok = AutoTokenizer.from_pretrained(qwen3_chem_dir)
    profile = get_profile("v3-fixed4")
    checked = 0
    for smiles in _nci(40)[::3]:
        mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
        if AllChem.EmbedMolecule(mol, randomSeed=1) != 0:
            continue
        encoded = encode_conformer(Chem.RemoveHs(mol), profile)
        prompt = len(tok(profile.prompt_template.format(smiles=encoded.canonical_smiles))["input_ids"])
        generated = len(tok(encoded.generation_text(profile), add_special_tokens=False)["input_ids"]) + 1  # EOS
        atoms = Chem.MolFromSmiles(smiles).GetNumAtoms()
        assert conformer_tokens(atoms) == pytest.approx(prompt + generated, rel=0.08), smiles
        checked += 1
    assert checked >= 10


def test_conformer_units(tmp_path):
    inp = tmp_path / "m.smi"
    inp.write_text("CCO ethanol\n\nc1ccccc1 benzene\nnot_smiles bad\nCCN ethanol\n")
    plan = read_conformer_units(inp, {"num_conformers": 4})
    assert [(u.line, u.key, u.rows) for u in plan.units] == [(1, "ethanol", 4), (3, "benzene", 4), (4, "bad", 4),
                                                             (5, "ethanol", 4)]  # the repeat: 4 error rows
    assert plan.units[0].weight == 4 * conformer_tokens(3) and plan.units[1].weight == 4 * conformer_tokens(6)
    assert plan.units[2].weight == 1.0 and plan.header_lines == 0
