"""What a conformer run still has to do, and how long its rows may get.

`plan_molecules` turns the input records and the rows already written (resume) into molecule jobs: each
record with the conformer indices it still lacks, unusable records apart (they only become error rows).
`auto_max_seq_len` sizes the engine's rows before any program is compiled: for the molecules with the
most atoms it takes an upper bound of prompt + output tokens that needs no tokenizer (every token holds
at least one character, so a text never has more tokens than characters), and the engine's memory plan
then fits as many slots as that length allows. A molecule whose exact bound (known once its program is
compiled) still exceeds the length becomes error rows naming --max-seq-len.

Not here: preparing molecules (pipeline_prepare.py), running them (pipeline.py).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from inferlab.constraints.fills import sample_fills
from inferlab.constraints.grammar import compile_grammar
from inferlab.constraints.grammars import GRAMMARS
from inferlab.errors import InferlabError
from inferlab.workloads.conformers.inputs import MoleculeInput, MoleculeInputs
from inferlab.workloads.conformers.profiles import FormatProfile
from inferlab.workloads.conformers.template import build_template

SPECIAL_TOKENS_ALLOWANCE = 4  # BOS and other special tokens a tokenizer may add to the prompt
LENGTH_SAMPLE = 16  # molecules (most atoms first) whose bound sets the automatic max_seq_len
LENGTH_MARGIN = 1.05
LENGTH_STEP = 64


@dataclass(frozen=True)
class MoleculeJob:
    record: MoleculeInput
    todo: tuple[int, ...]  # conformer indices not written yet


@dataclass(frozen=True)
class MoleculePlan:
    jobs: list[MoleculeJob]  # usable molecules with work left, in input order
    unusable: list[MoleculeJob]  # records that only become error rows
    rows_done: int  # rows written by earlier runs
    molecules_total: int


def plan_molecules(inputs: MoleculeInputs, is_done: Callable[[str, int], bool], num_conformers: int) -> MoleculePlan:
    jobs, unusable, done = [], [], 0
    for record in inputs.records:
        todo = tuple(k for k in range(num_conformers) if not is_done(record.id, k))
        done += num_conformers - len(todo)
        if todo:
            (jobs if record.ok else unusable).append(MoleculeJob(record, todo))
    return MoleculePlan(jobs, unusable, done, len(inputs.records))


@lru_cache(maxsize=None)
def max_block_chars(grammar: str) -> int:
    """Characters of the longest string a hole grammar accepts (29 for both coordinate grammars)."""
    return max(len(fill) for fill in sample_fills(compile_grammar(GRAMMARS[grammar])))


def token_bound_from_text(smiles: str, profile: FormatProfile) -> int | None:
    """An upper bound of prompt + output tokens of one conformer, from characters alone; None when the
    molecule has no template (its preparation will report why)."""
    try:
        template = build_template(smiles, profile)
    except InferlabError:
        return None
    prompt = len(template.prompt) + SPECIAL_TOKENS_ALLOWANCE
    output = len(template.skeleton) + template.num_atoms * max_block_chars(profile.hole_grammar) + 1  # + EOS
    return prompt + output


def auto_max_seq_len(jobs: Sequence[MoleculeJob], profile: FormatProfile, model_max: int | None) -> int | None:
    """A row length for the engine that fits the largest molecules of `jobs` (None when there are none)."""
    largest = heapq.nlargest(LENGTH_SAMPLE, jobs, key=lambda job: (job.record.num_atoms or 0, len(job.record.smiles)))
    bounds = [b for b in (token_bound_from_text(job.record.smiles, profile) for job in largest) if b is not None]
    if not bounds:
        return None
    length = math.ceil(max(bounds) * LENGTH_MARGIN / LENGTH_STEP) * LENGTH_STEP
    return min(length, model_max) if model_max else length
