"""The `constrained` scenario's inputs, the same for every backend: molecules (the first N of a molecule
file, RDKit's NCI first_5K.smi by default, that parse and fit the model's context), their conformer
templates and tokenised prompts, the requests (K conformers per molecule, molecule after molecule), the
measured prefix of them, and the batches.

"Drug-sized": an optional range of heavy atoms (HeavyAtomRange; the conformer-pipeline and engine-vs-peers
presets keep NCI molecules of 20-50), applied before the context check.
"Fits the context": prompt tokens + an upper bound of the output tokens <= the model's positions. The
bound needs no compiled constraint: every copy token holds at least one character of the template's
skeleton, each hole holds at most the hole grammar's `max_tokens` for this tokenizer, plus EOS.
Child process only (RDKit, tokenizers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inferlab.bench.backends.constrained_base import ConformerRequest
from inferlab.errors import InferlabError, InputError
from inferlab.workloads.conformers.profiles import FormatProfile
from inferlab.workloads.conformers.template import ConformerTemplate, build_template


def nci_molecules_path() -> Path:
    """RDKit's NCI first_5K.smi (shipped with RDKit)."""
    from rdkit import RDConfig

    return Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"


@dataclass(frozen=True)
class Molecule:
    smiles: str
    template: ConformerTemplate
    prompt_ids: tuple[int, ...]
    max_output_tokens: int  # upper bound of the generated tokens, EOS included


@dataclass(frozen=True)
class HeavyAtomRange:
    """Which molecules to keep by heavy-atom count (RDKit's GetNumHeavyAtoms); 0 = no bound."""

    minimum: int = 0
    maximum: int = 0

    def admits(self, heavy_atoms: int) -> bool:
        return heavy_atoms >= self.minimum and (not self.maximum or heavy_atoms <= self.maximum)

    def __str__(self) -> str:
        return f"{self.minimum}-{self.maximum or 'any'} heavy atoms"


@dataclass(frozen=True)
class MoleculeSet:
    molecules: tuple[Molecule, ...]
    source: str
    skipped_unreadable: int  # lines that did not parse or cannot be templated (e.g. dative bonds)
    skipped_too_long: int  # parsed, but prompt + output bound exceed the model's positions
    skipped_size: int = 0  # outside the heavy-atom range


def load_molecules(path: Path, count: int, profile: FormatProfile, tokenizer, max_positions: int,
                   heavy_atoms: HeavyAtomRange = HeavyAtomRange()) -> MoleculeSet:
    """The first `count` molecules of `path` within `heavy_atoms` that can be templated and fit
    `max_positions`; InputError when the file holds fewer."""
    from rdkit import Chem

    from inferlab.engine.constraints.token_automaton import grammar_set_for
    from inferlab.workloads.conformers.inputs import read_molecule_inputs

    grammar = profile.hole_grammar
    hole_tokens = grammar_set_for(tokenizer, (grammar,)).grammars[grammar].max_tokens
    inputs = read_molecule_inputs(path)
    molecules: list[Molecule] = []
    unreadable = too_long = wrong_size = 0
    for record in inputs.records:
        if len(molecules) == count:
            break
        if not record.ok or record.smiles is None:
            unreadable += 1
            continue
        if heavy_atoms != HeavyAtomRange():
            mol = Chem.MolFromSmiles(record.smiles)
            if mol is None:
                unreadable += 1
                continue
            if not heavy_atoms.admits(mol.GetNumHeavyAtoms()):
                wrong_size += 1
                continue
        try:
            template = build_template(record.smiles, profile)
        except InferlabError:
            unreadable += 1
            continue
        prompt_ids = tuple(template.prompt_ids(tokenizer))
        bound = len(template.skeleton) + template.num_atoms * hole_tokens + 1
        if len(prompt_ids) + bound > max_positions:
            too_long += 1
            continue
        molecules.append(Molecule(record.smiles, template, prompt_ids, bound))
    if len(molecules) < count:
        raise InputError(f"only {len(molecules)} molecules of {path} can be templated and fit the model's "
                         f"{max_positions} positions ({unreadable} unreadable, {too_long} too long, {wrong_size} "
                         f"outside {heavy_atoms}); lower num_molecules to at most {len(molecules)}")
    return MoleculeSet(tuple(molecules), str(path), unreadable, too_long, wrong_size)


def build_requests(molecules: MoleculeSet, num_conformers: int) -> list[ConformerRequest]:
    """K requests per molecule, each molecule's K adjacent (as the seeds batched them)."""
    requests = []
    for m_index, m in enumerate(molecules.molecules):
        for k in range(num_conformers):
            requests.append(ConformerRequest(len(requests), m_index, k, m.smiles, m.template, m.prompt_ids))
    return requests


def plan_batches(requests: list[ConformerRequest], bounds: list[int], batch_size: int,
                 sort_by_length: bool) -> list[list[ConformerRequest]]:
    """Consecutive batches of `batch_size`; with sort_by_length, longest output bound first (the seeds'
    PR #11: rows of a batch end close together, and the hungriest batch runs first).
    bounds[m] is molecule m's output bound (Molecule.max_output_tokens)."""
    order = list(range(len(requests)))
    if sort_by_length:
        order.sort(key=lambda i: -bounds[requests[i].molecule_index])
    return [[requests[i] for i in order[s:s + batch_size]] for s in range(0, len(order), batch_size)]


def molecule_file(knob: str) -> Path:
    """The `molecules_file` knob: '' = RDKit's NCI first_5K.smi."""
    path = Path(os.path.expanduser(knob)) if knob else nci_molecules_path()
    if not path.is_file():
        raise InputError(f"molecules_file {path} does not exist; give a .smi/.csv file or leave it empty for NCI")
    return path
