"""How large one line of a molecule file and one molecule may be (--max-line-chars, --max-atoms): a line or
a SMILES over its bound is an error row, refused before it is parsed. Kept apart from inputs.py so the
settings can be built without importing RDKit."""

from __future__ import annotations

from dataclasses import dataclass

from inferlab.errors import ConfigError
from inferlab.inputs.lines import DEFAULT_MAX_LINE_CHARS, check_max_line_chars

# Atoms a molecule may have unless told otherwise: ten times a large drug and longer than any conformer a
# small LM's context holds (~25 tokens per atom), far below the ~20,000 atoms at which RDKit's
# canonicalisation overflows its stack and kills the process.
DEFAULT_MAX_ATOMS = 1000


@dataclass(frozen=True)
class InputBounds:
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS
    max_atoms: int = DEFAULT_MAX_ATOMS

    def __post_init__(self) -> None:
        check_max_line_chars(self.max_line_chars)
        if isinstance(self.max_atoms, bool) or not isinstance(self.max_atoms, int) or self.max_atoms < 1:
            raise ConfigError(f"max_atoms={self.max_atoms!r} must be an integer >= 1")
