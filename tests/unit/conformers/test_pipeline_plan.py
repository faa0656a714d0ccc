"""The pipeline's planning: the tokenizer-free length bound holds against the compiled programs of real
molecules (qwen3-chem and the built-in Llama-3-style tokenizer, every profile), the automatic row length
covers the largest molecules, and resume planning leaves out exactly the rows already written."""

from __future__ import annotations

import itertools
import time

import pytest
from conformer_molecules import nci_smiles

from inferlab.constraints.program import compile_program
from inferlab.constraints.token_automaton import grammar_set_for
from inferlab.errors import InferlabError
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
from inferlab.models.tokenizer_loading import load_tokenizer
from inferlab.workloads.conformers.chemistry.inputs import MoleculeFile
from inferlab.workloads.conformers.pipeline.plan import (
    LENGTH_SAMPLE,
    NothingDone,
    auto_max_seq_len,
    max_block_chars,
    molecule_jobs,
    plan_molecules,
    token_bound_from_text,
)
from inferlab.workloads.conformers.chemistry.profiles import PROFILES, get_profile
from inferlab.workloads.conformers.chemistry.template import build_template


@pytest.fixture(scope="module", params=["qwen3-chem", "builtin"])
def tokenizer(request, qwen3_chem_dir):
    return load_tokenizer(qwen3_chem_dir) if request.param == "qwen3-chem" else build_builtin_tokenizer()


def test_block_chars_of_both_grammars():
    assert max_block_chars("coord3-fixed4") == len("-999.9999,-999.9999,-999.9999")
    assert max_block_chars("coord3-stripped") == len("-999.9999,-999.9999,-999.9999")


@pytest.mark.parametrize("profile_name", list(PROFILES))
def test_the_text_bound_holds_for_compiled_programs(tokenizer, profile_name):
    profile = get_profile(profile_name)
    grammar_set = grammar_set_for(tokenizer)
    checked = 0
    for smiles in nci_smiles(60)[::4]:
        try:
            template = build_template(smiles, profile)
            program = compile_program(template.segments, tokenizer, grammar_set)
        except InferlabError:
            continue  # a molecule the tokenizer cannot constrain (reported by the pipeline as an error row)
        exact = len(template.prompt_ids(tokenizer)) + program.max_new_tokens
        bound = token_bound_from_text(smiles, profile)
        assert exact <= bound <= 2 * exact, (smiles, exact, bound)
        checked += 1
    assert checked >= 8


class Written:
    """Rows of earlier runs, as pipeline/output.py's ConformerResultWriter answers for them."""

    def __init__(self, row_ids: set[str], num_conformers: int) -> None:
        self.rows, self.k = row_ids, num_conformers

    def is_done(self, input_id: str, conformer_index: int) -> bool:
        return f"{input_id}#{conformer_index}" in self.rows

    def done_count(self, input_id: str) -> int:
        return sum(1 for r in self.rows if r.rpartition("#")[0] == input_id and int(r.rpartition("#")[2]) < self.k)


def test_plan_and_automatic_length(tmp_path):
    path = tmp_path / "in.smi"
    path.write_text("CCO a\nC1CC bad\nCCCCCCCCCC decane\nc1ccccc1 b\n")
    molecules = MoleculeFile.open(path)
    done = Written({"a#0", "a#1", "b#1", "bad#0", "b#7"}, 2)  # b#7: beyond K, not this run's
    plan = plan_molecules(molecules.records(), done, 2)
    assert (plan.rows_done, plan.molecules_total, plan.rows_todo, plan.unusable, plan.usable_todo) == (4, 4, 4, 1, 2)
    assert [j.record.id for j in plan.largest] == ["decane", "b"]  # most atoms first
    jobs = list(molecule_jobs(molecules.records(), done, 2))
    assert [(j.record.id, j.record.ok, tuple(j.todo)) for j in jobs] == [
        ("bad", False, (1,)), ("decane", True, (0, 1)), ("b", True, (0,))]  # input order, unusable ones included

    profile = get_profile("v3-fixed4")
    length = auto_max_seq_len(plan.largest, profile, model_max=None)
    assert length % 64 == 0 and length >= token_bound_from_text("CCCCCCCCCC", profile)
    assert auto_max_seq_len(plan.largest, profile, model_max=256) == 256
    assert auto_max_seq_len([], profile, model_max=None) is None


def test_the_largest_molecules_are_kept_without_listing_the_input(tmp_path):
    path = tmp_path / "in.smi"
    sizes = [(i * 7919) % 40 + 1 for i in range(300)]
    path.write_text("".join(f"{'C' * n} m{i}\n" for i, n in enumerate(sizes)))
    plan = plan_molecules(MoleculeFile.open(path).records(), NothingDone(), 1)
    assert [j.record.num_atoms for j in plan.largest] == sorted(sizes, reverse=True)[:LENGTH_SAMPLE]


def test_a_huge_k_is_planned_without_listing_its_conformers(tmp_path):
    path = tmp_path / "in.smi"
    path.write_text("CCO a\nc1ccccc1 b\n")
    started = time.perf_counter()
    done = Written({"a#0", "a#5"}, 100_000_000)
    plan = plan_molecules(MoleculeFile.open(path).records(), done, 100_000_000)
    first_job = next(molecule_jobs(MoleculeFile.open(path).records(), done, 100_000_000))
    assert time.perf_counter() - started < 1.0
    assert plan.rows_todo == 2 * 100_000_000 - 2
    assert list(itertools.islice(first_job.todo, 3)) == [1, 2, 3] and len(first_job.todo) == 100_000_000 - 2
