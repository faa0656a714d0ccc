"""The `constrained` scenario's inputs, the same for every backend (and for the `conformer-pipeline`
scenario, which hands the same molecules to the CLI): molecules (the first N of a molecule file, RDKit's
NCI first_5K.smi by default, that parse, pass the selection and fit the model's context), their conformer
templates and tokenised prompts, the requests (K conformers per molecule, molecule after molecule), the
measured prefix of them, and the batches.

Selection (`MoleculeSelection`): heavy atoms within [min, max] (drug-sized: 20-50), and optionally
stereo assigned where the file leaves it open: NCI's SMILES specify none, so without it a stereo
agreement figure has nothing to compare. `assign_stereo` gives each unspecified tetrahedral centre and
double bond a configuration (RDKit's EnumerateStereoisomers, the first isomer, deterministic); the
molecular graphs stay the file's.

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
from inferlab.workloads.conformers.chemistry.profiles import FormatProfile
from inferlab.workloads.conformers.chemistry.template import ConformerTemplate, build_template


def nci_molecules_path() -> Path:
    """RDKit's NCI first_5K.smi (shipped with RDKit)."""
    from rdkit import RDConfig

    return Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"


@dataclass(frozen=True)
class MoleculeSelection:
    min_heavy_atoms: int = 0
    max_heavy_atoms: int = 0  # 0: no upper bound
    assign_stereo: bool = False  # give unspecified stereocentres and double bonds a configuration

    def describe(self) -> str:
        atoms = f"{self.min_heavy_atoms}-{self.max_heavy_atoms or 'any'} heavy atoms"
        return atoms + (", stereo assigned where unspecified" if self.assign_stereo else "")


@dataclass(frozen=True)
class Molecule:
    id: str  # the file's id for the line
    smiles: str  # as read (with stereo assigned when the selection asks)
    template: ConformerTemplate
    prompt_ids: tuple[int, ...]
    max_output_tokens: int  # upper bound of the generated tokens, EOS included


@dataclass(frozen=True)
class MoleculeSet:
    molecules: tuple[Molecule, ...]
    source: str
    skipped_unreadable: int  # lines that did not parse or cannot be templated (e.g. dative bonds)
    skipped_too_long: int  # parsed, but prompt + output bound exceed the model's positions
    skipped_by_size: int = 0  # parsed, but outside the selection's heavy-atom range
    selection: MoleculeSelection = MoleculeSelection()


def load_molecules(path: Path, count: int, profile: FormatProfile, tokenizer, max_positions: int,
                   selection: MoleculeSelection = MoleculeSelection()) -> MoleculeSet:
    """The first `count` molecules of `path` that pass `selection`, can be templated and fit
    `max_positions`; InputError when the file holds fewer."""
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs

    grammar = profile.hole_grammar
    hole_tokens = grammar_set_for(tokenizer, (grammar,)).grammars[grammar].max_tokens
    inputs = read_molecule_inputs(path)
    molecules: list[Molecule] = []
    unreadable = too_long = by_size = 0
    for record in inputs.records:
        if len(molecules) == count:
            break
        if not record.ok or record.smiles is None:
            unreadable += 1
            continue
        smiles = _selected(record.smiles, selection)
        if smiles is None:
            by_size += 1
            continue
        try:
            template = build_template(smiles, profile)
        except InferlabError:
            unreadable += 1
            continue
        prompt_ids = tuple(template.prompt_ids(tokenizer))
        bound = len(template.skeleton) + template.num_atoms * hole_tokens + 1
        if len(prompt_ids) + bound > max_positions:
            too_long += 1
            continue
        molecules.append(Molecule(record.id, smiles, template, prompt_ids, bound))
    if len(molecules) < count:
        raise InputError(f"only {len(molecules)} molecules of {path} pass the selection ({selection.describe()}), "
                         f"can be templated and fit the model's {max_positions} positions ({unreadable} unreadable, "
                         f"{by_size} outside the size range, {too_long} too long); lower num_molecules to at most "
                         f"{len(molecules)}")
    return MoleculeSet(tuple(molecules), str(path), unreadable, too_long, by_size, selection)


def _selected(smiles: str, selection: MoleculeSelection) -> str | None:
    """`smiles` (stereo assigned if asked) when its heavy atoms are in range, else None. Unparsable SMILES
    pass through: the template says why they cannot be used."""
    from rdkit import Chem, rdBase

    if not selection.min_heavy_atoms and not selection.max_heavy_atoms and not selection.assign_stereo:
        return smiles
    blocker = rdBase.BlockLogs()
    mol = Chem.MolFromSmiles(smiles)
    del blocker
    if mol is None:
        return smiles
    heavy = mol.GetNumHeavyAtoms()
    if heavy < selection.min_heavy_atoms or (selection.max_heavy_atoms and heavy > selection.max_heavy_atoms):
        return None
    return with_assigned_stereo(mol) if selection.assign_stereo else smiles


def with_assigned_stereo(mol) -> str:
    """SMILES of `mol` with every unspecified stereocentre and stereo double bond given a configuration:
    the first isomer RDKit's EnumerateStereoisomers gives (deterministic). Unchanged when there is none."""
    from rdkit import Chem
    from rdkit.Chem.EnumerateStereoisomers import EnumerateStereoisomers, StereoEnumerationOptions

    options = StereoEnumerationOptions(onlyUnassigned=True, maxIsomers=1, unique=True)
    return Chem.MolToSmiles(next(iter(EnumerateStereoisomers(mol, options=options)), mol))


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


def write_smi(molecules: MoleculeSet, path: Path) -> Path:
    """The molecules as a .smi file (`SMILES id` per line), e.g. the input of a CLI run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{m.smiles} {m.id}\n" for m in molecules.molecules))
    return path


def molecule_file(knob: str) -> Path:
    """The `molecules_file` knob: '' = RDKit's NCI first_5K.smi."""
    path = Path(os.path.expanduser(knob)) if knob else nci_molecules_path()
    if not path.is_file():
        raise InputError(f"molecules_file {path} does not exist; give a .smi/.csv file or leave it empty for NCI")
    return path
