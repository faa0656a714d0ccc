"""Error rows grouped by reason, for a closing summary that says why rows failed without opening the JSONL.

A reason is an error message with what differs from row to row blanked: numbers become N and quoted
values '...', so "need 675 positions, more than the model's 512" and "need 640 positions, ..." are one
reason. Each group keeps its count and its first row's id and whole message (messages name their fix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def error_reason(message: str) -> str:
    """The message with its row-specific values blanked: the key rows are grouped by."""
    return _NUMBER.sub("N", _QUOTED.sub("'...'", message))


@dataclass
class ErrorGroup:
    count: int
    example_id: str
    example: str  # the first row's whole message

    def as_dict(self, reason: str) -> dict[str, object]:
        return {"reason": reason, "count": self.count, "example_id": self.example_id, "example": self.example}


class ErrorGroups:
    def __init__(self) -> None:
        self._groups: dict[str, ErrorGroup] = {}

    def add(self, row_id: str, message: str | None) -> None:
        message = message or "(no message)"
        group = self._groups.setdefault(error_reason(message), ErrorGroup(0, row_id, message))
        group.count += 1

    def __len__(self) -> int:
        return sum(g.count for g in self._groups.values())

    def largest_first(self) -> list[tuple[str, ErrorGroup]]:
        return sorted(self._groups.items(), key=lambda item: -item[1].count)

    def as_list(self) -> list[dict[str, object]]:
        return [group.as_dict(reason) for reason, group in self.largest_first()]
