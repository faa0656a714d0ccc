"""One attempt at one row of a conformer job: the object the request generator (feed.py) hangs on each
engine Request as its `metadata`, and the result collector (collect.py) reads back from the Result.

The engine hands a request's metadata back on its Result untouched, so the task travels with its
request and the collector needs no lookup table keyed by request id. A stereo retry is the same row's
next attempt (`retried`). Plain frozen data that pickles (the prepared molecule's program included), as
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

    @property
    def row_id(self) -> str:
        return row_id(self.job.record.id, self.k)

    @property
    def request_id(self) -> str:
        """`<input id>#<k>`, or `<input id>#<k>@retry<n>`: the engine derives the attempt's seed from it
        (and the run's seed), so a rerun draws the same attempts."""
        return self.row_id if self.attempt == 0 else f"{self.row_id}@retry{self.attempt}"

    def retried(self, output_tokens: int) -> ConformerTask:
        """The row's next attempt, after this one generated `output_tokens`."""
        return replace(self, attempt=self.attempt + 1, earlier_tokens=self.earlier_tokens + output_tokens)
