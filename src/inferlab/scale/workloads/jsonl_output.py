"""Shared by the workloads whose output is JSONL keyed by `id` (classify, generate): locating rows in a
shard output and merging the shards in input order. Not here: the conformer rows (conformers.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferlab.scale.order import UNPLACED, OrderIndex, RecordSpan, write_in_order


def jsonl_spans(path: Path, source: int, sort_key: Callable[[dict[str, Any]], tuple]) -> list[RecordSpan]:
    """One span per complete line of `path`; a line that is not a JSON object keeps its place after
    every placed row (it is copied, never dropped)."""
    spans, offset = [], 0
    with path.open("rb") as f:
        for line in f:
            length = len(line)
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    row = None
                key = sort_key(row) if isinstance(row, dict) else (UNPLACED,)
                spans.append(RecordSpan(key, source, offset, length))
            offset += length
    return spans


def merge_jsonl_by_id(shard_outputs: list[Path], destination: Path, params: dict, order: OrderIndex) -> int:
    """Rows of every shard output in input order (by id, see order.py) into `destination`."""
    spans: list[RecordSpan] = []
    for source, path in enumerate(shard_outputs):
        spans.extend(jsonl_spans(path, source, lambda row: (order.line_of(str(row.get("id"))),)))
    return write_in_order(shard_outputs, spans, destination)
