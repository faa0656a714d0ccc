"""The requests of a conformer job, as one generator handed to `Engine.stream`.

`MoleculeFeed` yields the jobs' prepared molecules in input order and keeps the preparation pool
`lookahead` molecules ahead of what was taken. `RequestFeed.requests()` turns them into the engine's
requests, each carrying its ConformerTask (task.py) as metadata: first any row to generate again (a
stereo retry, queued by the result collector), then the K conformers `<input id>#<k>` of the next
molecule; a molecule that could not be prepared, or whose prompt + program bound exceeds the engine's
rows, becomes error rows here and yields nothing.

The engine consumes the generator lazily (pulling requests as rows free up, about one batch ahead), so
there are no waves and no drains: the rows stay full until the last molecule. An engine that takes its
iterable up front gets the same requests, only sooner. A generator ends when it has nothing to give at
the moment it is asked; retries queued after that are given by the next call of `requests()` (the
pipeline calls the engine again while `has_work`), so a row is never lost, only its retry is late.

A retry's request id is `<input id>#<k>@retry<n>` (ConformerTask.request_id). A stereo retry continues
from the block of the first atom whose stereo the conformer contradicts: its prompt is the molecule's prompt
and the tokens written before that block, its constraint the program's rest (ConstraintProgram.suffix), so
what came before is kept and the contradicted centre and everything after it are drawn again (where the
model settles a hand: docs/decisions.md). Not here: what happens to the results (collect.py).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from typing import Any

from inferlab.types import Request, SamplingParams
from inferlab.workloads.conformers.pipeline.plan import MoleculeJob
from inferlab.workloads.conformers.pipeline.prepare import MoleculePreparer, PreparedMolecule
from inferlab.workloads.conformers.pipeline.task import ConformerTask

LONG_CONTEXT_PRESET = "qwen3-chem-mini"  # the smallest preset with the qwen3-chem vocabulary that fits any molecule


class MoleculeFeed:
    """The jobs' prepared molecules in the order `jobs` gives them (the pipeline's: the input's, its tail largest
    first: tail_order.py), keeping the pool `lookahead` molecules ahead. `jobs` is read as it goes (a stream of
    the input): what is held is the molecules submitted and not taken yet; a SMILES that comes back after they
    are gone is prepared again."""

    def __init__(self, jobs: Iterable[MoleculeJob], preparer: MoleculePreparer, lookahead: int) -> None:
        self.preparer, self.lookahead = preparer, lookahead
        self._jobs = iter(jobs)
        self._submitted: deque[MoleculeJob] = deque()  # not taken yet, in the jobs' order
        self._uses: Counter[str] = Counter()  # their SMILES
        self.wait_s = 0.0  # waited for the pool (molecules not prepared in time)
        self.cpu_s = 0.0  # the pool's own work on the molecules taken

    def top_up(self, beside: int = 0) -> None:
        """Submit molecules until `lookahead` (and the `beside` about to be taken) are submitted and not taken."""
        while len(self._submitted) < self.lookahead + beside:
            job = next(self._jobs, None)
            if job is None:
                return
            self.preparer.submit(job.record.smiles)
            self._uses[job.record.smiles] += 1
            self._submitted.append(job)

    def __iter__(self) -> Iterator[tuple[MoleculeJob, PreparedMolecule]]:
        while True:
            self.top_up(beside=1)
            if not self._submitted:
                return
            job = self._submitted.popleft()
            smiles = job.record.smiles
            t = time.perf_counter()
            prepared = self.preparer.result(smiles)
            self.wait_s += time.perf_counter() - t
            self.cpu_s += prepared.seconds
            self._uses[smiles] -= 1
            if self._uses[smiles] == 0:
                del self._uses[smiles]
                self.preparer.forget(smiles)
            yield job, prepared


def conformer_request(task: ConformerTask, sampling: SamplingParams) -> Request:
    """The engine's request for one attempt of one row; the task rides along as its metadata. A retry from
    inside the conformer prompts with the molecule's prompt and the kept tokens, under the program's rest."""
    return Request(id=task.request_id, prompt_ids=task.molecule.prompt_ids + task.prefix, sampling=sampling,
                   constraint=task.program, metadata=task)


def tokens_before_atom(program, token_ids: tuple[int, ...], atom: int) -> tuple[int, ...]:
    """The tokens of a whole conformer (`token_ids`, written under `program`) before atom `atom`'s block
    (atom k's block is the template's hole k: chemistry/template.py)."""
    return tuple(token_ids[: program.hole_start(token_ids, atom)])


class RequestFeed:
    def __init__(self, molecules: MoleculeFeed, max_seq_len: int, model_positions: int, sampling: SamplingParams,
                 rows: Any, preset_checkpoint: bool = False) -> None:
        self.max_seq_len = max_seq_len
        self.model_positions = model_positions  # the model's max_position_embeddings: no row may be longer
        self.preset_checkpoint = preset_checkpoint  # random weights of `inferlab model init`: another preset fits
        self.sampling = sampling
        self.rows = rows  # collect.RowWriter: error rows of molecules that cannot run
        self._molecules = iter(molecules)
        self._retries: deque[Request] = deque()
        self._exhausted = False
        self.molecules_run = 0
        self.requests_given = 0  # requests yielded so far (retries included) and their programs' bound together
        self.tokens_bound = 0

    @property
    def has_work(self) -> bool:
        """Requests are left to give: retries queued, or molecules not taken yet."""
        return bool(self._retries) or not self._exhausted

    def retry(self, task: ConformerTask, output_tokens: int, token_ids: tuple[int, ...] = (),
              from_atom: int | None = None) -> None:
        """Queue the next attempt of `task`'s row, after `task` generated `output_tokens`: from the start, or
        with `from_atom`, continuing the whole conformer `token_ids` from that atom's block (the template's
        segments: a Copy, then a Hole and a Copy per atom, so atom k's block is segment 2k + 1)."""
        if from_atom is None:
            retried = task.retried(output_tokens)
        else:
            prefix = tokens_before_atom(task.molecule.program, token_ids, from_atom)
            retried = task.retried(output_tokens, prefix, 2 * from_atom + 1)
        self._retries.append(conformer_request(retried, self.sampling))

    def requests(self) -> Iterator[Request]:
        for request in self._requests():
            self.requests_given += 1
            self.tokens_bound += request.constraint.max_new_tokens
            yield request

    def _requests(self) -> Iterator[Request]:
        while True:
            if self._retries:
                yield self._retries.popleft()
                continue
            item = next(self._molecules, None)
            if item is None:
                self._exhausted = True
                return
            job, molecule = item
            if self._runnable(job, molecule):
                self.molecules_run += 1
                for k in job.todo:
                    yield conformer_request(ConformerTask(job, molecule, k), self.sampling)

    def _runnable(self, job: MoleculeJob, molecule: PreparedMolecule) -> bool:
        if not molecule.ok:
            self.rows.error(job, molecule.error)
            return False
        if molecule.tokens_needed > self.max_seq_len:
            self.rows.error(job, self._too_long(molecule))
            return False
        return True

    def _too_long(self, molecule: PreparedMolecule) -> str:
        """Why a molecule does not fit the rows, and a fix only where one exists."""
        need = (f"the prompt ({len(molecule.prompt_ids)} tokens) and the longest conformer of this molecule "
                f"({molecule.program.max_new_tokens} tokens, {molecule.template.num_atoms} atoms) need "
                f"{molecule.tokens_needed} positions")
        if molecule.tokens_needed > self.model_positions:
            preset = (f" (a random-weight one: inferlab model init --preset {LONG_CONTEXT_PRESET} --tokenizer "
                      "PATH/qwen3-chem, 40960 positions)" if self.preset_checkpoint else "")
            return (f"{need}, more than the model's {self.model_positions} (max_position_embeddings): this molecule "
                    f"is too large for this model; a model with at least {molecule.tokens_needed} positions runs it"
                    f"{preset}")
        return (f"{need}, over max_seq_len={self.max_seq_len}; rerun with --max-seq-len {molecule.tokens_needed} "
                f"(up to the model's {self.model_positions}; memory allowing) and --retry-errors")
