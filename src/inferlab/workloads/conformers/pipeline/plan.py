"""What a conformer run still has to do, and how long its rows may get.

`plan_molecules` reads the input records once, with what earlier runs wrote (resume), and keeps only what
the run needs before its first row: counts (molecules, rows to write and written, usable molecules with
work left) and the LENGTH_SAMPLE usable molecules with the most atoms (`length_sample`). The run then reads
the records again, as streams, through `molecule_jobs`: each record with the conformer indices it still
lacks (ConformerIndices: never listed, so K may be any size), in input order; nothing per input line is
held. The engine's row length comes from that sample: `auto_max_seq_len` takes an upper bound of their
prompt + output tokens that needs no tokenizer (every token holds at least one character, so a text never
has more tokens than characters: ~10% above the exact bound for drug-sized molecules); engine_sizing.py
takes their exact bound (prompt tokens + the compiled program's bound) when it buys rows. Both go through
`row_length` (a margin for molecules outside the sample, then the attention's block). A molecule whose
exact bound still exceeds the length becomes error rows naming --max-seq-len.

Not here: preparing molecules (prepare.py), running them (generate.py).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

from inferlab.constraints.fills import sample_fills
from inferlab.constraints.grammar import compile_grammar
from inferlab.constraints.grammars import GRAMMARS
from inferlab.errors import InferlabError
from inferlab.workloads.conformers.chemistry.inputs import MoleculeInput
from inferlab.workloads.conformers.chemistry.profiles import FormatProfile
from inferlab.workloads.conformers.chemistry.template import build_template

SPECIAL_TOKENS_ALLOWANCE = 4  # BOS and other special tokens a tokenizer may add to the prompt
LENGTH_SAMPLE = 16  # molecules (most atoms first) whose bound sets the automatic max_seq_len
# the sample's bound is a bound of the sample only: a molecule with as many atoms outside it (a longer prompt,
# more copy tokens) may need a little more; 5% is ~2-3 atoms' worth for drug-sized molecules
LENGTH_MARGIN = 1.05
LENGTH_STEP = 64  # the decode attention's tiles: 64 positions (bf16; the FP8 cache's are 32)


@dataclass(frozen=True)
class ConformerIndices:
    """The conformer indices 0..count-1 not written yet, in order, without a list of them: a molecule's
    requests stream from its first conformer whatever K is."""

    count: int  # K
    done: frozenset[int] = frozenset()  # indices < count written by earlier runs

    def __iter__(self) -> Iterator[int]:
        return (k for k in range(self.count) if k not in self.done)

    def __len__(self) -> int:
        return self.count - len(self.done)


@dataclass(frozen=True)
class MoleculeJob:
    record: MoleculeInput
    todo: ConformerIndices  # conformer indices not written yet


class DoneRows(Protocol):
    """What earlier runs wrote (pipeline/output.py's ConformerResultWriter)."""

    def is_done(self, input_id: str, conformer_index: int) -> bool: ...

    def done_count(self, input_id: str) -> int: ...  # rows among its conformers 0..K-1


class NothingDone:
    def is_done(self, input_id: str, conformer_index: int) -> bool:
        return False

    def done_count(self, input_id: str) -> int:
        return 0


@dataclass
class MoleculePlan:
    molecules_total: int = 0
    unusable: int = 0  # records that only become error rows
    usable_todo: int = 0  # usable molecules with work left (the jobs the engine gets)
    rows_todo: int = 0
    usable_rows_todo: int = 0  # the rows of the usable molecules: the engine's requests (retries aside)
    rows_done: int = 0  # rows written by earlier runs
    largest: list[MoleculeJob] = field(default_factory=list)  # the usable jobs with the most atoms (a few)


def plan_molecules(records: Iterable[MoleculeInput], done: DoneRows, num_conformers: int) -> MoleculePlan:
    plan = MoleculePlan()
    largest: list[tuple[tuple[int, int, int], MoleculeInput]] = []  # a min-heap of LENGTH_SAMPLE
    for position, record in enumerate(records):
        plan.molecules_total += 1
        plan.unusable += not record.ok
        written = done.done_count(record.id)
        plan.rows_done += written
        if written == num_conformers:
            continue
        plan.rows_todo += num_conformers - written
        if record.ok:
            plan.usable_todo += 1
            plan.usable_rows_todo += num_conformers - written
            key = (record.num_atoms or 0, len(record.smiles), -position)  # the first of equals stays
            (heapq.heappush if len(largest) < LENGTH_SAMPLE else heapq.heappushpop)(largest, (key, record))
    plan.largest = [MoleculeJob(record, conformer_todo(record.id, num_conformers, done))
                    for _, record in sorted(largest, reverse=True)]
    return plan


def molecule_jobs(records: Iterable[MoleculeInput], done: DoneRows, num_conformers: int) -> Iterator[MoleculeJob]:
    """Every record with conformers left to write, usable or not, in input order."""
    for record in records:
        todo = conformer_todo(record.id, num_conformers, done)
        if len(todo):
            yield MoleculeJob(record, todo)


def conformer_todo(input_id: str, num_conformers: int, done: DoneRows) -> ConformerIndices:
    """The molecule's conformers not written yet; its written ones found by looking from index 0 until all
    of them are (done_count), so the cost is that of the rows already written, not of K."""
    left = done.done_count(input_id)
    found = set()
    k = 0
    while left and k < num_conformers:
        if done.is_done(input_id, k):
            found.add(k)
            left -= 1
        k += 1
    return ConformerIndices(num_conformers, frozenset(found))


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


def length_sample(jobs: Sequence[MoleculeJob]) -> list[MoleculeJob]:
    """The LENGTH_SAMPLE jobs with the most atoms (then the longest SMILES): whose bounds size the rows."""
    return heapq.nlargest(LENGTH_SAMPLE, jobs, key=lambda job: (job.record.num_atoms or 0, len(job.record.smiles)))


def row_length(bounds: Iterable[int], model_max: int | None) -> int | None:
    """The row length for the sample's token bounds: the largest + LENGTH_MARGIN, rounded up to LENGTH_STEP,
    at most the model's positions (None without a bound)."""
    largest = max(bounds, default=None)
    if largest is None:
        return None
    length = math.ceil(largest * LENGTH_MARGIN / LENGTH_STEP) * LENGTH_STEP
    return min(length, model_max) if model_max else length


def auto_max_seq_len(jobs: Sequence[MoleculeJob], profile: FormatProfile, model_max: int | None) -> int | None:
    """A row length for the engine that fits the largest molecules of `jobs` by the character bound (None when
    there are none)."""
    bounds = (token_bound_from_text(job.record.smiles, profile) for job in length_sample(jobs))
    return row_length((b for b in bounds if b is not None), model_max)
