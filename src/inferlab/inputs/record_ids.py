"""Row ids for the records of one input file: every record gets one, and no two records share it.

A record that declares an id keeps it; one without gets `line-<n>`. A record that repeats an id already
used (declared by an earlier line, or given to one) is refused with its own id, `line-<n>`, so its error
row never collides with the first line's rows. A generated id that is already taken gets a suffix:
`line-<n>.2`, `line-<n>.3`... Claims happen in file order, so a rerun on the same file gives every
record the same id (resume relies on it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClaimedId:
    id: str  # unique within the file
    given_id: str | None = None  # the id the line declared, when it repeated an earlier one
    first_line: int | None = None  # the line that holds `given_id`

    @property
    def repeated(self) -> bool:
        return self.given_id is not None

    def repeat_error(self) -> str:
        return (f"id {self.given_id!r} repeats line {self.first_line}; ids must be unique "
                f"(this line's rows are filed under {self.id!r})")


class RecordIds:
    def __init__(self) -> None:
        self._line_of: dict[str, int] = {}  # id -> the line it was given to

    def claim(self, declared: str | None, line_no: int) -> ClaimedId:
        """The id of the record at `line_no` that declared `declared` (None: no id)."""
        if declared is not None and declared not in self._line_of:
            self._line_of[declared] = line_no
            return ClaimedId(declared)
        generated = self._unused(f"line-{line_no}")
        self._line_of[generated] = line_no
        if declared is None:
            return ClaimedId(generated)
        return ClaimedId(generated, declared, self._line_of[declared])

    def _unused(self, candidate: str) -> str:
        unique, n = candidate, 1
        while unique in self._line_of:
            n += 1
            unique = f"{candidate}.{n}"
        return unique
