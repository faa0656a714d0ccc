"""Row ids for the records of one input file: every record gets one, and no two records share it.

A record that declares an id keeps it; one without gets `line-<n>`. A record that repeats an id already
used (declared by an earlier line, or given to one) is refused with its own id, `line-<n>`, so its error
row never collides with the first line's rows. A generated id that is already taken gets a suffix:
`line-<n>.2`, `line-<n>.3`... Claims happen in file order, so a rerun on the same file gives every
record the same id (resume relies on it).

Memory: the ids used are kept as fingerprints (fingerprints.py, ~26 bytes an id), since telling a repeat
needs every earlier id. A job reads its input in several passes; only the first needs them: it also notes
the lines whose claim is not the plain one (a repeat, a generated id with a suffix, in line order), and
`known()` keeps those notes alone (the fingerprints can go), from which each later pass over the same file
gets the same claims (`KnownClaims.replay()`) at no cost per line.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from inferlab.inputs.fingerprints import FingerprintMap


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
        self._line_of = FingerprintMap()  # id -> the line it was given to
        # the claims that are not plain, in line order: (line, suffix (1: none), first line of a repeat (0: none))
        self._exceptions = array("q")

    def claim(self, declared: str | None, line_no: int) -> ClaimedId:
        """The id of the record at `line_no` that declared `declared` (None: no id)."""
        if declared is not None:
            first_line = self._line_of.get(declared)
            if first_line is None:
                self._line_of.set_new(declared, line_no)
                return ClaimedId(declared)
        generated, suffix = self._unused(line_no)
        self._line_of.set_new(generated, line_no)
        if declared is None:
            if suffix > 1:
                self._exceptions.extend((line_no, suffix, 0))
            return ClaimedId(generated)
        self._exceptions.extend((line_no, suffix, first_line))
        return ClaimedId(generated, declared, first_line)

    def known(self) -> "KnownClaims":
        """This pass's claims, for later passes over the same file (call it once this pass has read the
        whole file: later claims are not in it)."""
        return KnownClaims(self._exceptions)

    def _unused(self, line_no: int) -> tuple[str, int]:
        candidate = generated_id(line_no, 1)
        suffix = 1
        while candidate in self._line_of:
            suffix += 1
            candidate = generated_id(line_no, suffix)
        return candidate, suffix


class KnownClaims:
    """The claims of a pass that read a whole file, kept as its notes of the claims that are not plain."""

    def __init__(self, exceptions: array) -> None:
        self._exceptions = exceptions

    def replay(self) -> "ReplayedIds":
        """The same claims for one more pass over the file."""
        return ReplayedIds(self._exceptions)


class ReplayedIds:
    """RecordIds' claims again, for a pass that reads the same file's lines in order (it may skip some)."""

    def __init__(self, exceptions: array) -> None:
        self._exceptions = exceptions
        self._at = 0  # the next exception's index (x 3)

    def claim(self, declared: str | None, line_no: int) -> ClaimedId:
        notes, at = self._exceptions, self._at
        while at < len(notes) and notes[at] < line_no:
            at += 3
        self._at = at
        if at < len(notes) and notes[at] == line_no:
            suffix, first_line = notes[at + 1], notes[at + 2]
            generated = generated_id(line_no, suffix)
            return ClaimedId(generated, declared, first_line) if first_line else ClaimedId(generated)
        return ClaimedId(declared if declared is not None else generated_id(line_no, 1))


IdClaims = RecordIds | ReplayedIds


def generated_id(line_no: int, suffix: int) -> str:
    return f"line-{line_no}" if suffix == 1 else f"line-{line_no}.{suffix}"
