"""The reference model's reduced tokenizer (committed in reference_model/) against qwen3-chem: over every
molecule of the committed split file, the prompt and a conformer text with synthetic fixed4 coordinates
(random signs, values 0-99.9999, seeded) cut into exactly qwen3-chem's ids (mapped through the id map);
constraint programs compiled with it (the compiler's own checks: copy tokens independent of the
coordinates, unambiguous block ends) force qwen3-chem's copy tokens; transformers loads it too."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from inferlab.constraints.program import compile_program
from inferlab.constraints.token_automaton import grammar_set_for
from inferlab.errors import InputError
from inferlab.models.tokenizer_loading import load_tokenizer
from inferlab.models.vocabulary_reduction import read_source_ids
from inferlab.workloads.conformers import reference_model
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.training.conformer_texts import PROFILE, probe_blocks
from inferlab.workloads.conformers.training.scaffold_split import HELD_OUT, SPLITS, read_split

FOLDER = reference_model.FOLDER


@pytest.fixture(scope="module")
def tokenizers(qwen3_chem_dir):
    return load_tokenizer(qwen3_chem_dir), load_tokenizer(FOLDER), np.asarray(read_source_ids(FOLDER))


@pytest.fixture(scope="module")
def rows():
    return read_split(FOLDER / "split.tsv")


def test_the_split_file_names_every_split(rows):
    assert {row.split for row in rows} == set(SPLITS) and sum(row.split == HELD_OUT for row in rows) > 300
    assert len({row.canonical_smiles for row in rows}) == len(rows)


@pytest.mark.slow
def test_every_shipped_molecule_cuts_exactly_as_qwen3_chem(tokenizers, rows):
    full, small, source_ids = tokenizers
    profile = get_profile(PROFILE)
    templates = [build_template(row.canonical_smiles, profile) for row in rows]
    assert all(t.canonical_smiles == row.canonical_smiles for t, row in zip(templates, rows))  # the prompts' form
    prompts = [template.prompt for template in templates]
    texts = [template.fill(probe_blocks(template.num_atoms, random.Random(f"exactness:{row.id}"), "random"))
             for row, template in zip(rows, templates)]
    for batch, special in ((prompts, True), (texts, False)):
        want = full(batch, add_special_tokens=special, return_attention_mask=False)["input_ids"]
        got = small(batch, add_special_tokens=special, return_attention_mask=False)["input_ids"]
        differ = [k for k, (w, g) in enumerate(zip(want, got)) if source_ids[g].tolist() != w]
        assert not differ, f"{len(differ)} texts cut differently, the first: {batch[differ[0]][:200]!r}"


def test_constraint_programs_compiled_with_it_force_qwen3_chems_copy_tokens(tokenizers, rows):
    full, small, source_ids = tokenizers
    kinds = [r"@", r"\+", r"/|\\", r"%\d\d|\d.*\d.*\d", r"\[\d+[A-Z]", r"Cl|Br"]  # stereo, charges, E/Z, rings...
    profile = get_profile(PROFILE)
    chosen = [build_template(next(r.canonical_smiles for r in rows if re.search(kind, r.canonical_smiles)), profile)
              for kind in kinds]
    full_set, small_set = grammar_set_for(full), grammar_set_for(small)
    for template in chosen:
        reference = compile_program(template.segments, full, full_set)
        program = compile_program(template.segments, small, small_set)
        assert source_ids[program.copy_token_ids()].tolist() == reference.copy_token_ids(), template.canonical_smiles
        assert program.max_new_tokens == reference.max_new_tokens
        assert template.prompt_ids(small) == [int(np.flatnonzero(source_ids == i)[0])
                                              for i in template.prompt_ids(full)]


def test_transformers_loads_the_folder_as_the_same_tokenizer(tokenizers):
    from transformers import AutoTokenizer

    _, small, _ = tokenizers
    auto = AutoTokenizer.from_pretrained(str(FOLDER))
    text = "[SMILES]CC(=O)O[/SMILES][CONFORMER][C]<-1.2345,0.0000,12.5000>[/CONFORMER]"
    assert auto(text)["input_ids"] == small(text)["input_ids"] and auto.eos_token_id == small.eos_token_id


def test_the_finder_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(reference_model, "FOLDER", tmp_path)
    with pytest.raises(InputError, match="model.safetensors"):
        reference_model.reference_model_dir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (tmp_path / name).write_text("{}")
    assert reference_model.reference_model_dir() == tmp_path
