"""A finished generation -> a conformer or an error, the fields of its JSONL row and its SDF record.

Three readings of every output, all on the CPU, in the judge pool (judge_pool.py):
- strict, by the molecule's template (`ConformerTemplate.check`): every block fullmatches the profile's
  grammar and every descriptor and structure token is the template's, so the RDKit molecule is the
  input's own, block k at atom k. This decides `status` ok/error; only ok conformers go to the SDF.
- plain, by `decode.decode_generation`, which knows nothing of the input: the SMILES rebuilt from the
  text, parsed by RDKit, its canonical form compared with the input's. `graph_match` records whether it
  gives back the input's molecular graph (stereo included) with one block per atom. It can disagree with
  the strict reading only where the format is ambiguous (docs/conformers.md: a bracket atom whose text
  equals a wrapped bare atom, e.g. a radical `[O]`).
- stereo (chemistry/stereo.py): whether the coordinates have the tetrahedral and double-bond stereo the input
  specifies (`stereo_ok` true/false, null when it specifies none). A contradicting conformer whose mirror
  image has the input's stereo is mirrored (with `stereo_mirror`: chemistry/stereo_mirror.py; the row says
  `mirrored`); one still contradicting with attempts left is marked `retry`, from its first contradicted element's
  centre (the pipeline continues it from that atom's block, keeping what was written before); otherwise it
  is written as is.

The text is decoded here from the token ids, with the checkpoint's tokenizer loaded once per judging
process, not by the engine: the engine's process then never imports transformers (generate.py).
Together they cost CPU time per conformer, all under the GIL (RDKit does not release it here), which is
why they run in worker processes (docs/decisions.md). Everything here is plain data in and out (no torch,
no engine objects), so a task pickles cheaply. Not here: writing (output.py), generation (generate.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rdkit import Chem

from inferlab.errors import InferlabError, InputError
from inferlab.models.output_text import output_text
from inferlab.models.tokenizer_loading import shared_tokenizer
from inferlab.workloads.conformers.chemistry.decode import decode_generation
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.sdf import format_record
from inferlab.workloads.conformers.chemistry.stereo import contradicted_centres, stereo_agreement
from inferlab.workloads.conformers.chemistry.stereo_mirror import mirror_image
from inferlab.workloads.conformers.chemistry.template import ConformerTemplate


@dataclass(frozen=True)
class JudgeTask:
    """One finished generation (attempt `attempt` of row `<input_id>#<conformer_index>`)."""

    input_id: str
    conformer_index: int
    attempt: int  # 0 for the first generation of the row, n for its n-th retry
    may_retry: bool  # attempts are left: a conformer contradicting the input's stereo is generated again
    stereo_mirror: bool  # a conformer of the wrong hand is written mirrored (its mirror image has the input's stereo)
    template: ConformerTemplate
    profile: str
    model_dir: str  # whose tokenizer decodes token_ids (the engine's process loads none: generate.py)
    token_ids: tuple[int, ...]  # the generation, its EOS included
    finish_reason: str
    engine_error: str | None
    prompt_tokens: int
    output_tokens: int
    pressure: dict[str, Any] = field(default_factory=dict)  # the row's constraint pressure fields (pressure.py)


@dataclass(frozen=True)
class Verdict:
    error: str | None  # why the output is not a valid conformer of the input; None when it is
    fields: dict[str, Any]  # the row's extra fields
    sdf_record: str | None  # the SDF record of a valid conformer that is final (not to be retried)
    retry: bool  # generate this row again: its geometry contradicts the input's stereo and attempts are left
    seconds: float  # CPU time of the judgement (in the worker)
    retry_from_atom: int | None = None  # a retry continues from this atom's block (the first contradicted
    # element's centre: everything written before it is kept); None: from the start

    @property
    def ok(self) -> bool:
        return self.error is None


def judge_all(tasks: list[JudgeTask]) -> list[Verdict]:
    """judge() of each task: one pool task for several conformers (judge_pool.py)."""
    return [judge(task) for task in tasks]


def judge(task: JudgeTask) -> Verdict:
    start = time.perf_counter()
    template = task.template
    fields: dict[str, Any] = {
        "canonical_smiles": template.canonical_smiles,
        "num_atoms": template.num_atoms,
        "prompt_tokens": task.prompt_tokens,
        "output_tokens": task.output_tokens,
        "finish_reason": task.finish_reason,
        "graph_match": None,
        "stereo_ok": None,
        **task.pressure,
    }

    def verdict(error: str | None, record: str | None = None, retry: bool = False,
                from_atom: int | None = None) -> Verdict:
        return Verdict(error, fields, record, retry, time.perf_counter() - start, from_atom)

    if task.engine_error is not None:
        return verdict(f"the engine refused the request: {task.engine_error}")
    if task.finish_reason != "eos":
        return verdict(f"the generation ended by {task.finish_reason!r}, not at the program's EOS")
    text = output_text(tokenizer_for(task.model_dir), task.token_ids, task.finish_reason)
    profile = get_profile(task.profile)
    fields["graph_match"] = _plain_decoding_matches(text, template, profile)
    try:
        mol = template.check(text, profile).mol
    except InferlabError as e:
        return verdict(f"the output is not a valid conformer of the input: {e}")
    generated = mol
    mol, stereo = judged_stereo(mol, task.stereo_mirror)
    fields.update(stereo)
    if fields["stereo_ok"] is False and task.may_retry:
        contradicted = contradicted_centres(generated)
        return verdict(None, retry=True, from_atom=contradicted[0] if contradicted else None)
    return verdict(None, format_record(mol, task.input_id, template.canonical_smiles, task.conformer_index,
                                       template.profile))


def tokenizer_for(model_dir: str) -> Any:
    """The folder's tokenizer, loaded once per process (JudgePool loads it at its workers' start, while the
    engine starts up)."""
    tokenizer = shared_tokenizer(model_dir)
    if tokenizer is None:
        raise InputError(f"{model_dir} has no tokenizer files; conformer outputs are decoded with the checkpoint's "
                         "tokenizer")
    return tokenizer


def _plain_decoding_matches(text: str, template: ConformerTemplate, profile) -> bool:
    try:
        decoded = decode_generation(text, profile)
    except InferlabError:
        return False
    return decoded.canonical_smiles == template.canonical_smiles and decoded.mol.GetNumAtoms() == template.num_atoms


def judged_stereo(mol: Chem.Mol, mirror: bool) -> tuple[Chem.Mol, dict[str, Any]]:
    """(the conformer to keep, its stereo fields): `mol` itself, or with `mirror` its mirror image when `mol`
    contradicts the input's stereo and the mirror image does not (`mirrored`: true then, else false)."""
    fields = stereo_fields(mol)
    if fields["stereo_ok"] is False and mirror:
        mirrored = mirror_image(mol)
        mirrored_fields = stereo_fields(mirrored)
        if mirrored_fields["stereo_ok"]:
            return mirrored, {**mirrored_fields, "mirrored": True}
    return mol, {**fields, "mirrored": False}


def stereo_fields(mol: Chem.Mol) -> dict[str, Any]:
    """The stereo fields of a row, for a molecule from `ConformerTemplate.check`: it carries the input's
    stereo (its tags come from the template's canonical SMILES) and the conformer's coordinates, numbered
    alike (block k = atom k)."""
    reference = Chem.Mol(mol)
    reference.RemoveAllConformers()
    try:
        return stereo_agreement(reference, mol).fields()
    except Exception as e:  # RDKit's perception failing on an odd geometry must not lose a valid conformer
        return {"stereo_ok": None, "stereo_error": f"{type(e).__name__}: {e}"}
