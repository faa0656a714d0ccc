"""One attempt at one row of a conformer job: the object the request generator (feed.py) hangs on each
engine Request as its `metadata`, and the result collector (collect.py) reads back from the Result.

The engine hands a request's metadata back on its Result untouched, so the task travels with its
request and the collector needs no lookup table keyed by request id. A stereo retry is the same row's
next attempt (`retried`), from the conformer's start or continuing from inside it (`prefix`, `from_segment`). Plain frozen data that pickles (the prepared molecule's program included), as
everything that may cross a process does. Not here: what the judges receive (judge.JudgeTask, the
parts of a task and its result that reading an output needs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from inferlab.workloads.conformers.chemistry.sdf import row_id
from inferlab.workloads.conformers.pipeline.plan import MoleculeJob
from inferlab.workloads.conformers.pipeline.prepare import PreparedMolecule


@dataclass(frozen=True)
class ConformerTask:
    job: MoleculeJob  # the input record (its id and SMILES) and the conformer indices still to write
    molecule: PreparedMolecule  # its template, prompt ids and ConstraintProgram
    k: int  # the conformer index: the row is `<input id>#<k>`
    attempt: int = 0  # 0 for the row's first generation, n for its n-th stereo retry
    earlier_tokens: int = 0  # output tokens of the row's earlier attempts (all count as generated work)
    # a retry from inside the conformer: the tokens an earlier attempt wrote before the segment it continues
    # from (they join the prompt), and that segment of the molecule's program (0: the whole conformer)
    prefix: tuple[int, ...] = ()
    from_segment: int = 0

    @property
    def row_id(self) -> str:
        return row_id(self.job.record.id, self.k)

    @property
    def request_id(self) -> str:
        """`<input id>#<k>`, or `<input id>#<k>@retry<n>`: the engine derives the attempt's seed from it
        (and the run's seed), so a rerun draws the same attempts."""
        return self.row_id if self.attempt == 0 else f"{self.row_id}@retry{self.attempt}"

    def retried(self, output_tokens: int, prefix: tuple[int, ...] = (), from_segment: int = 0) -> ConformerTask:
        """The row's next attempt, after this one generated `output_tokens`: from the conformer's start, or
        continuing after `prefix` (the whole conformer's tokens before segment `from_segment`)."""
        return replace(self, attempt=self.attempt + 1, earlier_tokens=self.earlier_tokens + output_tokens,
                       prefix=prefix, from_segment=from_segment)

    @property
    def program(self):
        """The ConstraintProgram this attempt generates under: the molecule's, or its suffix for a retry
        from inside the conformer."""
        program = self.molecule.program
        return program if self.from_segment == 0 else program.suffix(self.from_segment)
