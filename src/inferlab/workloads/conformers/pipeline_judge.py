"""A finished generation -> a conformer or an error, and the fields of its JSONL row.

Two independent readings of every output:
- strict, by the molecule's template (`ConformerTemplate.check`): every block fullmatches the profile's
  grammar and every descriptor and structure token is the template's, so the RDKit molecule is the
  input's own, block k at atom k. This decides `status` ok/error; only ok conformers go to the SDF.
- plain, by `decode.decode_generation`, which knows nothing of the input: the SMILES rebuilt from the
  text, parsed by RDKit, its canonical form compared with the input's. `graph_match` records whether it
  gives back the input's molecular graph (stereo included) with one block per atom. It can disagree with
  the strict reading only where the format is ambiguous (docs/conformers.md: a bracket atom whose text
  equals a wrapped bare atom, e.g. a radical `[O]`).

Decoding costs well under a millisecond per conformer, so it runs inline while the engine decodes the
next chunk. Not here: writing (output.py), generation (pipeline.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rdkit import Chem

from inferlab.errors import InferlabError
from inferlab.types import Result
from inferlab.workloads.conformers.decode import decode_generation
from inferlab.workloads.conformers.pipeline_prepare import PreparedMolecule
from inferlab.workloads.conformers.profiles import FormatProfile


@dataclass(frozen=True, eq=False)
class Judgement:
    mol: Chem.Mol | None  # the conformer (heavy atoms in canonical SMILES order), None on error
    error: str | None
    fields: dict[str, Any]  # the row's extra fields

    @property
    def ok(self) -> bool:
        return self.error is None


def judge(result: Result, molecule: PreparedMolecule, profile: FormatProfile) -> Judgement:
    fields: dict[str, Any] = {
        "canonical_smiles": molecule.template.canonical_smiles,
        "num_atoms": molecule.template.num_atoms,
        "prompt_tokens": result.prompt_tokens,
        "output_tokens": len(result.token_ids),
        "finish_reason": result.finish_reason,
        "graph_match": None,
    }
    if not result.ok:
        return Judgement(None, f"the engine refused the request: {result.error}", fields)
    if result.finish_reason != "eos":
        return Judgement(None, f"the generation ended by {result.finish_reason!r}, not at the program's EOS", fields)
    fields["graph_match"] = _plain_decoding_matches(result.text, molecule, profile)
    try:
        decoded = molecule.template.check(result.text, profile)
    except InferlabError as e:
        return Judgement(None, f"the output is not a valid conformer of the input: {e}", fields)
    return Judgement(decoded.mol, None, fields)


def _plain_decoding_matches(text: str, molecule: PreparedMolecule, profile: FormatProfile) -> bool:
    try:
        decoded = decode_generation(text, profile)
    except InferlabError:
        return False
    return (
        decoded.canonical_smiles == molecule.template.canonical_smiles
        and decoded.mol.GetNumAtoms() == molecule.template.num_atoms
    )
