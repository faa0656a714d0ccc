"""A stereo retry from inside the conformer (pipeline/feed.py): a program's suffix is the program compiled from
its remaining segments; a wrong-handed conformer is judged for a retry from its contradicted centre, whose
tokens before that atom's block are the kept prefix; the retry's request (prompt + prefix, the suffix) runs on
the engine with the reference model and gives a whole conformer of the molecule."""

from __future__ import annotations

import numpy as np
import pytest
from rdkit import Chem

from inferlab.constraints.program import compile_program
from inferlab.constraints.token_automaton import grammar_set_for
from inferlab.engine import Engine, EngineConfig
from inferlab.errors import InputError
from inferlab.models.tokenizer_loading import load_tokenizer
from inferlab.types import SamplingParams
from inferlab.workloads.conformers.chemistry.encode import encode_conformers
from inferlab.workloads.conformers.chemistry.etkdg import embed_etkdg
from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE, get_profile
from inferlab.workloads.conformers.chemistry.stereo import contradicted_centres, specified_stereo
from inferlab.workloads.conformers.chemistry.stereo_mirror import mirror_image
from inferlab.workloads.conformers.pipeline.feed import RequestFeed, tokens_before_atom
from inferlab.workloads.conformers.pipeline.judge import JudgeTask, judge
from inferlab.workloads.conformers.pipeline.plan import ConformerIndices, MoleculeJob
from inferlab.workloads.conformers.pipeline.prepare import _PreparerState, prepare_with
from inferlab.workloads.conformers.pipeline.task import ConformerTask
from inferlab.workloads.conformers.chemistry.inputs import MoleculeInput
from inferlab.workloads.conformers.reference_model import reference_model_dir

PROFILE = get_profile(DEFAULT_PROFILE)
ALANINOL, RING = "C[C@H](N)CO", "C[C@@H]1CCC[C@H](O)C1"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(reference_model_dir())


@pytest.fixture(scope="module")
def prepared(tokenizer):
    state = _PreparerState(tokenizer, grammar_set_for(tokenizer), DEFAULT_PROFILE)
    return {smiles: prepare_with(state, smiles) for smiles in (ALANINOL, RING)}


def test_a_suffix_is_the_program_compiled_from_its_segments(prepared, tokenizer):
    for molecule in prepared.values():
        program, segments = molecule.program, molecule.template.segments
        for segment in range(1, len(segments) - 1):
            suffix, compiled = program.suffix(segment), compile_program(segments[segment:], tokenizer)
            assert np.array_equal(suffix.ops, compiled.ops), segment
            assert (suffix.min_new_tokens, suffix.max_new_tokens) == (compiled.min_new_tokens, compiled.max_new_tokens)
            assert suffix.segments == compiled.segments and suffix.grammar_set_key == program.grammar_set_key
        for outside in (0, len(segments) - 1):
            with pytest.raises(InputError, match="suffix"):
                program.suffix(outside)


def _conformer_tokens(molecule, tokenizer, mirrored: bool) -> tuple[int, ...]:
    """An ETKDG conformer of the molecule written in the flagship format (the input's tags), its coordinates
    mirrored (every centre of the other hand) or not, as the engine's token ids (EOS last)."""
    mol = embed_etkdg(Chem.MolFromSmiles(molecule.template.canonical_smiles), 1, seed=3)
    mol = Chem.RemoveHs(mol)
    text = encode_conformers(mirror_image(mol) if mirrored else mol, PROFILE)[0].generation_text(PROFILE)
    return tuple(tokenizer(text, add_special_tokens=False).input_ids) + (tokenizer.eos_token_id,)


def _judged(molecule, token_ids: tuple[int, ...]):
    return judge(JudgeTask(input_id="m", conformer_index=0, attempt=0, may_retry=True, stereo_mirror=False,
                           template=molecule.template, profile=DEFAULT_PROFILE, model_dir=str(reference_model_dir()),
                           token_ids=token_ids, finish_reason="eos", engine_error=None, prompt_tokens=0,
                           output_tokens=len(token_ids)))


@pytest.mark.parametrize("smiles", [ALANINOL, RING])
def test_a_wrong_handed_conformer_is_retried_from_its_first_contradicted_centre(smiles, prepared, tokenizer):
    molecule = prepared[smiles]
    centres, _ = specified_stereo(Chem.MolFromSmiles(molecule.template.canonical_smiles))
    right = _judged(molecule, _conformer_tokens(molecule, tokenizer, mirrored=False))
    assert right.ok and not right.retry and right.fields["stereo_ok"] is True
    wrong_ids = _conformer_tokens(molecule, tokenizer, mirrored=True)
    wrong = _judged(molecule, wrong_ids)
    assert wrong.retry and wrong.retry_from_atom == min(centres)  # every centre inverted: the first is cut at
    text = tokenizer.decode(list(wrong_ids[:-1]))
    assert contradicted_centres(molecule.template.check(text, PROFILE).mol) == sorted(centres)
    prefix = tokens_before_atom(molecule.program, wrong_ids, wrong.retry_from_atom)
    kept = tokenizer.decode(list(prefix))
    assert text.startswith(kept) and kept.endswith("<")  # up to the centre's block, its coordinates not kept
    assert kept.count("<") == wrong.retry_from_atom + 1


def test_the_retry_request_continues_the_conformer_on_the_engine(prepared, tokenizer):
    molecule = prepared[RING]
    wrong_ids = _conformer_tokens(molecule, tokenizer, mirrored=True)
    atom = _judged(molecule, wrong_ids).retry_from_atom
    feed = RequestFeed(iter(()), max_seq_len=1024, model_positions=2048, sampling=SamplingParams(top_p=1.0), rows=None)
    job = MoleculeJob(MoleculeInput(1, "ring", RING), ConformerIndices(1))
    feed.retry(ConformerTask(job, molecule, 0), len(wrong_ids), wrong_ids, atom)
    request = next(feed.requests())
    task = request.metadata
    assert task.attempt == 1 and task.from_segment == 2 * atom + 1 and request.id == "ring#0@retry1"
    assert tuple(request.prompt_ids) == molecule.prompt_ids + task.prefix and task.prefix == wrong_ids[:len(task.prefix)]
    assert request.constraint.max_new_tokens < molecule.program.max_new_tokens
    with Engine(EngineConfig(model=str(reference_model_dir()), device="cpu", max_slots=2, max_seq_len=1024)) as engine:
        [result] = engine.generate([request])
    assert result.finish_reason == "eos"
    whole = task.prefix + tuple(result.token_ids)
    molecule.template.check(tokenizer.decode(list(whole[:-1])), PROFILE)  # a whole conformer of the molecule


def test_a_retrys_pressure_peak_is_placed_in_the_whole_conformer(prepared, tokenizer):
    """A retry generates under the program's suffix after the kept tokens: its pressure's peak (an op of the
    suffix, a token of the retry's output) names the same block of the whole conformer as a first attempt's
    peak at that op and token would."""
    from inferlab.types import ConstraintPressure
    from inferlab.workloads.conformers.pipeline.pressure import row_pressure, whole_conformer_pressure

    molecule = prepared[RING]
    token_ids = _conformer_tokens(molecule, tokenizer, mirrored=True)
    atom = 2
    prefix = tokens_before_atom(molecule.program, token_ids, atom)
    job = MoleculeJob(MoleculeInput(1, "ring", RING), ConformerIndices(1))
    retry = ConformerTask(job, molecule, 0).retried(len(token_ids), prefix, 2 * atom + 1)
    first_op = molecule.program.first_op(retry.from_segment)
    # the peak at the retry's first token: the first coordinate token of atom 2's block
    peak = ConstraintPressure(mean=0.1, max=0.9, max_step=0, max_op=0, steps=len(token_ids) - len(prefix))
    placed = whole_conformer_pressure(peak, retry)
    assert (placed.max_op, placed.max_step, placed.mean) == (first_op, len(prefix), 0.1)
    row = row_pressure(placed, molecule, token_ids)
    assert row.in_block and row.where == molecule.template.describe_segment(2 * atom + 1)
    assert whole_conformer_pressure(peak, ConformerTask(job, molecule, 0)) is peak  # a first attempt: as it is
