"""Counting finished rows from the shard outputs while workers write them (the combined progress view),
without re-reading whole files: each counter remembers how far it read. A file that shrank or was
replaced (a resumed writer dropping a torn line, a workload reordering its output at the end) is
counted again from the start. Only complete lines count."""

from __future__ import annotations

import os
from pathlib import Path

_BLOCK = 1 << 20


class LineCounter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._inode: int | None = None
        self._offset = 0
        self._lines = 0

    def count(self) -> int:
        """Complete non-blank lines in the file now (0 while it does not exist)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._inode, self._offset, self._lines = None, 0, 0
            return 0
        if st.st_ino != self._inode or st.st_size < self._offset:
            self._inode, self._offset, self._lines = st.st_ino, 0, 0
        if st.st_size > self._offset:
            position, carry = self._offset, b""  # carry starts at `position` in the file
            with self.path.open("rb") as f:
                f.seek(position)
                while block := f.read(_BLOCK):
                    data = carry + block
                    end = data.rfind(b"\n") + 1  # only complete lines count
                    self._lines += sum(1 for line in data[:end].split(b"\n") if line.strip())
                    position += end
                    carry = data[end:]
            self._offset = position
        return self._lines


class ProgressCounter:
    """Rows done over all shards."""

    def __init__(self, paths: list[Path]) -> None:
        self._counters = [LineCounter(p) for p in paths]

    def per_shard(self) -> list[int]:
        return [c.count() for c in self._counters]

    def total(self) -> int:
        return sum(self.per_shard())
