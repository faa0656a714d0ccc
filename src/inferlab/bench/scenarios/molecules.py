"""The molecules the conformer scenarios run on (`constrained` generates their conformers through a backend,
`conformer-pipeline` hands the same molecules to the CLI): the first N of a molecule file (RDKit's NCI
first_5K.smi by default) that parse, pass the selection and fit the model's context, with their conformer
templates and tokenised prompts.

Selection (`MoleculeSelection`, knobs SELECTION_KNOBS): heavy atoms within [min, max] (drug-sized: 20-50), and
optionally stereo assigned where the file leaves it open: NCI's SMILES specify none, so without it a stereo
agreement figure has nothing to compare. `assign_stereo` gives each unspecified tetrahedral centre and double
bond a configuration (chemistry/stereo_assignment.py: RDKit's EnumerateStereoisomers, the first isomer,
deterministic); the molecular graphs stay the file's.

"Fits the context": prompt tokens + an upper bound of the output tokens <= the model's positions. The bound
needs no compiled constraint: every copy token holds at least one character of the template's skeleton, each
hole holds at most the hole grammar's `max_tokens` for this tokenizer, plus EOS. Loading runs in the child
process only (RDKit, tokenizers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferlab.bench.knobs import Knob
from inferlab.errors import ConfigError, InferlabError, InputError

if TYPE_CHECKING:  # the parent process validates plans without RDKit
    from inferlab.workloads.conformers.chemistry.profiles import FormatProfile
    from inferlab.workloads.conformers.chemistry.template import ConformerTemplate

SELECTION_KNOBS = (  # both conformer scenarios: the same molecules for both
    Knob("min_heavy_atoms", int, 0, "only molecules with at least this many heavy atoms (drug-sized: 20)", minimum=0),
    Knob("max_heavy_atoms", int, 0, "only molecules with at most this many heavy atoms (0 = no bound; drug-sized: 50)",
         minimum=0),
    Knob("assign_stereo", bool, False, "give unspecified stereocentres and double bonds a configuration (RDKit's first "
         "enumerated isomer), so stereo agreement is measured; NCI's SMILES specify none"),
)


def validate_selection(c: dict[str, Any]) -> None:
    if c["max_heavy_atoms"] and c["max_heavy_atoms"] < c["min_heavy_atoms"]:
        raise ConfigError(f"max_heavy_atoms={c['max_heavy_atoms']} is below min_heavy_atoms={c['min_heavy_atoms']}; "
                          "raise it, or set 0 for no upper bound")


def molecule_selection(c: dict[str, Any]) -> "MoleculeSelection":
    """The selection a cell's SELECTION_KNOBS ask for."""
    return MoleculeSelection(c["min_heavy_atoms"], c["max_heavy_atoms"], c["assign_stereo"])


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
    template: "ConformerTemplate"
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


def load_molecules(path: Path, count: int, profile: "FormatProfile", tokenizer, max_positions: int,
                   selection: MoleculeSelection = MoleculeSelection()) -> MoleculeSet:
    """The first `count` molecules of `path` that pass `selection`, can be templated and fit
    `max_positions`; InputError when the file holds fewer."""
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs
    from inferlab.workloads.conformers.chemistry.template import build_template

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
    if not selection.assign_stereo:
        return smiles
    from inferlab.workloads.conformers.chemistry.stereo_assignment import with_assigned_stereo

    return with_assigned_stereo(mol)


def write_smi(molecules: MoleculeSet, path: Path) -> Path:
    """The molecules as a .smi file (`SMILES id` per line), e.g. the input of a CLI run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{m.smiles} {m.id}\n" for m in molecules.molecules))
    return path


def model_positions(model_dir: Path) -> int:
    """The checkpoint's max_position_embeddings (its text config's): the context molecules must fit."""
    import json

    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("text_config", config)["max_position_embeddings"])


def molecule_file(knob: str) -> Path:
    """The `molecules_file` knob: '' = RDKit's NCI first_5K.smi."""
    path = Path(os.path.expanduser(knob)) if knob else nci_molecules_path()
    if not path.is_file():
        raise InputError(f"molecules_file {path} does not exist; give a .smi/.csv file or leave it empty for NCI")
    return path
