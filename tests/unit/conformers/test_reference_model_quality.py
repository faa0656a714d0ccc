"""A quality smoke test of the trained reference conformer model (src/inferlab/workloads/conformers/
reference_model/) on the CPU, on molecules its split held out: the smallest with a specified tetrahedral
centre, with a specified double bond, and from NCI (no stereo). One engine call generates two conformers per
molecule with the constraint and two without, with the same seeds, all scored against ETKDG references of
another seed (the evaluation's metrics):
- bond lengths: bonded heavy-atom distances of the valid conformers near the references' (the model learned
  chemistry's local geometry, not only the format);
- stereo: the specified double bond's E/Z is mostly the input's. Tetrahedral centres are not tested: the model writes
  either hand about equally often, on training molecules too (a shortfall of the model, reported in
  issue 27, not something a smoke test can hold);
- the constraint costs nothing: coverage with it is no worse than without (an invalid output is a miss).
"""

from __future__ import annotations

import numpy as np
import pytest
from rdkit import Chem

from inferlab.engine import Engine, EngineConfig, compile_program
from inferlab.errors import InferlabError
from inferlab.types import Request, SamplingParams
from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE, get_profile
from inferlab.workloads.conformers.chemistry.stereo import specified_stereo, stereo_agreement
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.demo.quality import REFERENCE_SEED
from inferlab.workloads.conformers.evaluation.metrics import best_rms_matrix, ensemble_metrics
from inferlab.workloads.conformers.evaluation.reference import ReferenceConfig, embed_reference
from inferlab.workloads.conformers.reference_model import SPLIT_FILE, reference_model_dir
from inferlab.workloads.conformers.training.scaffold_split import HELD_OUT, read_split

SEEDS = (1, 2)  # one conformer per seed and mode
REFERENCES = 2  # ETKDG conformers per molecule
MAX_ATOMS = 17

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_cpu_thread")]


def _smallest_held_out(wanted) -> str:
    """The held-out molecule of at most MAX_ATOMS heavy atoms with the fewest atoms (then the lowest id) for
    which wanted(tetrahedral centres, double bonds, source) holds."""
    rows = sorted((r for r in read_split(SPLIT_FILE) if r.split == HELD_OUT and r.num_atoms <= MAX_ATOMS),
                  key=lambda r: (r.num_atoms, r.id))
    for row in rows:
        if row.num_atoms >= 8:
            centres, bonds = specified_stereo(Chem.MolFromSmiles(row.canonical_smiles))
            if wanted(len(centres), len(bonds), row.source):
                return row.canonical_smiles
    raise AssertionError("no such held-out molecule")


@pytest.fixture(scope="module")
def scored():
    """Per molecule: its template, ETKDG references, and per mode ("constrained", "free") the valid
    conformers of its generations (None for an invalid one)."""
    molecules = [_smallest_held_out(lambda c, b, s: c > 0 and b == 0), _smallest_held_out(lambda c, b, s: b > 0 and c == 0),
                 _smallest_held_out(lambda c, b, s: s == "nci")]
    profile = get_profile(DEFAULT_PROFILE)
    templates = [build_template(s, profile) for s in molecules]
    with Engine(EngineConfig(model=reference_model_dir(), device="cpu", max_slots=4 * len(molecules))) as engine:
        requests = []
        for index, template in enumerate(templates):
            program = compile_program(template.segments, engine.tokenizer)
            prompt = tuple(template.prompt_ids(engine.tokenizer))
            for seed in SEEDS:
                sampling = SamplingParams(max_new_tokens=program.max_new_tokens, seed=seed)
                requests += [Request(id=f"{index}/constrained/{seed}", prompt_ids=prompt, sampling=sampling,
                                     constraint=program),
                             Request(id=f"{index}/free/{seed}", prompt_ids=prompt, sampling=sampling)]
        texts = {r.id: r.text for r in engine.generate(requests)}
    out = []
    for index, template in enumerate(templates):
        references = embed_reference(template.canonical_smiles, ReferenceConfig(REFERENCES, seed=REFERENCE_SEED,
                                                                                threads=1))
        made = {mode: [_valid(template, texts[f"{index}/{mode}/{seed}"], profile) for seed in SEEDS]
                for mode in ("constrained", "free")}
        out.append((template, references, made))
    return out


def _valid(template, text: str, profile) -> Chem.Mol | None:
    try:
        return template.check(text, profile).mol
    except InferlabError:
        return None


def test_bond_lengths_of_generated_conformers_are_near_etkdgs(scored):
    deviations = []
    for template, references, made in scored:
        conformers = [m for m in made["constrained"] if m is not None]
        assert len(conformers) == len(SEEDS), template.canonical_smiles  # constrained: valid by construction
        for mol in conformers:
            match = references.GetSubstructMatch(mol)  # generated atom i -> reference atom match[i]
            assert len(match) == mol.GetNumAtoms()
            for bond in mol.GetBonds():
                i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
                mine = _distance(mol.GetConformer(), i, j)
                etkdg = np.mean([_distance(c, match[i], match[j]) for c in references.GetConformers()])
                deviations.append(abs(mine - etkdg))
    assert np.median(deviations) < 0.1, np.percentile(deviations, [50, 90, 100])
    assert np.percentile(deviations, 90) < 0.3, np.percentile(deviations, [50, 90, 100])


def _distance(conformer, i: int, j: int) -> float:
    return conformer.GetAtomPosition(i).Distance(conformer.GetAtomPosition(j))


def _agreement(scored, kind: int) -> list[bool]:
    """stereo_ok of each valid constrained conformer of the molecules specifying stereo of `kind` (0:
    tetrahedral centres, 1: double bonds; each molecule specifies one kind only)."""
    verdicts = []
    for template, _, made in scored:
        reference = Chem.MolFromSmiles(template.canonical_smiles)
        if not specified_stereo(reference)[kind]:
            continue
        verdicts += [stereo_agreement(reference, mol).ok for mol in made["constrained"] if mol is not None]
    assert verdicts, f"no molecule specifies stereo of kind {kind}"
    return verdicts


def test_double_bond_stereo_of_generated_conformers_is_the_inputs(scored):
    verdicts = _agreement(scored, 1)
    assert sum(verdicts) / len(verdicts) >= 0.5, verdicts  # a model that writes the other isomer fails


def test_the_constraint_costs_no_coverage(scored):
    """COV-R and COV-P at 1.25 A, means over the molecules: with the constraint >= without (same seeds)."""
    figures = {}
    for mode in ("constrained", "free"):
        recall, precision = [], []
        for _, references, made in scored:
            refs = [Chem.Mol(references, confId=c.GetId()) for c in references.GetConformers()]
            valid = [m for m in made[mode] if m is not None]
            metrics = ensemble_metrics(best_rms_matrix(refs, valid).values, (1.25,), attempted=len(SEEDS))
            recall.append(metrics.coverage[1.25].recall)
            precision.append(0.0 if not valid else metrics.coverage[1.25].precision)
        figures[mode] = (float(np.mean(recall)), float(np.mean(precision)))
    constrained, free = figures["constrained"], figures["free"]
    assert constrained[0] >= free[0] and constrained[1] >= free[1], figures
    assert constrained[0] > 0, figures  # coverage itself, not two zeros
