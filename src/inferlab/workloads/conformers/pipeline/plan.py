"""What a conformer run still has to do, and how long its rows may get.

`plan_molecules` turns the input records and the rows already written (resume) into molecule jobs: each
record with the conformer indices it still lacks (ConformerIndices: never listed, so K may be any size),
unusable records apart (they only become error rows); `row_ids()` are the rows to write, in input order.
The engine's row length comes from the molecules with the most atoms (`length_sample`): `auto_max_seq_len`
takes an upper bound of their prompt + output tokens that needs no tokenizer (every token holds at least one
character, so a text never has more tokens than characters: ~10% above the exact bound for drug-sized
molecules); engine_sizing.py takes their exact bound (prompt tokens + the compiled program's bound) when it
buys rows. Both go through `row_length` (a margin for molecules outside the sample, then the attention's
block). A molecule whose exact bound still exceeds the length becomes error rows naming --max-seq-len.

Not here: preparing molecules (prepare.py), running them (generate.py).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from inferlab.constraints.fills import sample_fills
from inferlab.constraints.grammar import compile_grammar
from inferlab.constraints.grammars import GRAMMARS
from inferlab.errors import InferlabError
from inferlab.workloads.conformers.chemistry.inputs import MoleculeInput, MoleculeInputs
from inferlab.workloads.conformers.chemistry.profiles import FormatProfile
from inferlab.workloads.conformers.chemistry.sdf import row_id
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


@dataclass(frozen=True)
class MoleculePlan:
    jobs: list[MoleculeJob]  # usable molecules with work left, in input order
    unusable: list[MoleculeJob]  # records that only become error rows
    rows_done: int  # rows written by earlier runs
    molecules_total: int
    in_order: list[MoleculeJob]  # jobs and unusable records together, in input order

    @property
    def rows_todo(self) -> int:
        return sum(len(job.todo) for job in self.in_order)

    def row_ids(self) -> Iterator[str]:
        """Every row to write, in input order (the molecule's conformers by index)."""
        return (row_id(job.record.id, k) for job in self.in_order for k in job.todo)


def done_indices(row_ids: Iterable[str]) -> dict[str, set[int]]:
    """Input id -> the conformer indices of the rows written (row ids are `<input id>#<k>`)."""
    done: dict[str, set[int]] = {}
    for written in row_ids:
        input_id, sep, k = written.rpartition("#")
        if sep and k.isdigit():
            done.setdefault(input_id, set()).add(int(k))
    return done


def plan_molecules(inputs: MoleculeInputs, done_rows: Iterable[str], num_conformers: int) -> MoleculePlan:
    """`done_rows`: the ids of the rows written by earlier runs."""
    written = done_indices(done_rows)
    jobs, unusable, in_order, done = [], [], [], 0
    for record in inputs.records:
        todo = ConformerIndices(num_conformers,
                                frozenset(k for k in written.get(record.id, ()) if k < num_conformers))
        done += len(todo.done)
        if len(todo):
            (jobs if record.ok else unusable).append(MoleculeJob(record, todo))
            in_order.append((jobs if record.ok else unusable)[-1])
    return MoleculePlan(jobs, unusable, done, len(inputs.records), in_order)


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
