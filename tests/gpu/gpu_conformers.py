"""Conformer requests for the device tests: NCI molecules, their templates compiled into constraint
programs, and the check that an output is a valid conformer of its molecule (needs RDKit)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

PROFILE = "v3-fixed4"


def nci_molecules(count: int, max_atoms: int, min_atoms: int = 0) -> list[str]:
    """The first `count` molecules of RDKit's NCI first_5K set with min..max heavy atoms whose template
    builds and whose zero-filled encoding decodes to the same graph (the format's one ambiguity, a
    hypervalent [I], is left out)."""
    from rdkit import Chem, RDConfig, RDLogger

    from inferlab.errors import InferlabError
    from inferlab.workloads.conformers.chemistry.decode import decode_generation
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.smiles import canonical_smiles
    from inferlab.workloads.conformers.chemistry.template import build_template

    RDLogger.DisableLog("rdApp.*")
    profile, chosen = get_profile(PROFILE), []
    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        for line in f:
            smiles = line.split()[0]
            mol = Chem.MolFromSmiles(smiles)
            if mol is None or not min_atoms <= mol.GetNumHeavyAtoms() <= max_atoms:
                continue
            try:
                template = build_template(smiles, profile)
            except InferlabError:
                continue
            filled = template.fill(["0.0000,0.0000,0.0000"] * template.num_atoms)
            if decode_generation(filled, profile).canonical_smiles == canonical_smiles(smiles):
                chosen.append(smiles)
                if len(chosen) == count:
                    break
    return chosen


@dataclass(frozen=True)
class ConformerCase:
    request: Any  # inferlab.types.Request with the molecule's ConstraintProgram
    template: Any  # its ConformerTemplate
    smiles: str


def conformer_cases(tokenizer, molecules: list[str], per_molecule: int, samplings: list[dict]) -> list[ConformerCase]:
    """`per_molecule` requests per molecule, sharing its template compiled once; samplings cycled, seeded."""
    from inferlab.constraints.program import compile_program
    from inferlab.types import Request, SamplingParams
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template

    out = []
    for i, smiles in enumerate(molecules):
        template = build_template(smiles, get_profile(PROFILE))
        program = compile_program(template.segments, tokenizer)
        prompt = tuple(template.prompt_ids(tokenizer))
        for j in range(per_molecule):
            sampling = dict(samplings[(i * per_molecule + j) % len(samplings)], seed=7919 * i + j)
            request = Request(id=f"m{i}-{j}", prompt_ids=prompt, constraint=program, sampling=SamplingParams(**sampling))
            out.append(ConformerCase(request, template, smiles))
    return out


def conformer_problem(result, case: ConformerCase) -> str | None:
    """None when the result is a valid conformer of the case's molecule (strict template check, and the plain
    decoder gives back its graph), else what is wrong."""
    from inferlab.workloads.conformers.chemistry.decode import decode_generation
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.smiles import canonical_smiles

    if result.finish_reason != "eos":
        return f"{case.smiles}: finish_reason {result.finish_reason} ({result.error})"
    try:
        case.template.check(result.text, get_profile(PROFILE))
        decoded = decode_generation(result.text, get_profile(PROFILE))
    except Exception as e:  # the decoder's InputError names the problem
        return f"{case.smiles}: {type(e).__name__}: {e}"
    if decoded.canonical_smiles != canonical_smiles(case.smiles):
        return f"{case.smiles}: decoded {decoded.canonical_smiles}"
    return None


def invalid_outputs(results, cases: list[ConformerCase]) -> list[str]:
    """What is wrong with each invalid output (results matched to cases by request id)."""
    by_id = {r.id: r for r in results}
    return [p for case in cases if (p := conformer_problem(by_id[case.request.id], case)) is not None]
