"""What the host learns from the device, one decode chunk late: snapshots of the rows' progress.

After each decode chunk the runner enqueues, for rows [0, b), the tokens each row produced since its last
snapshot, its `n_out`, `finished` and `reason`, packed into one int64 tensor and copied without blocking
into a pinned host buffer behind an event. The engine launches the next chunk *before* it reads the
previous snapshot, so host work overlaps the device's. A snapshot records which request each row held
when it was taken (rows retire, refill and move while it is in flight), and is read through that record.

Row features may add per-row values behind the token window (a SnapshotTail: batch/feature.py
`snapshot_columns`): they come back in the same copy, and a retiring row's values go onto its Result
(`Snapshot.finish`, each feature's `finish`) at the read that retires it, with no copy or wait of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from inferlab.engine.rows import RowState

HEADER = 4  # start, n_out, finished, reason; then the token window


class SnapshotTail(NamedTuple):
    """The row features' columns of one snapshot: [b, k_i] int64 device tensors, and who gave k_i of them
    (an object with `finish(result, item, values)`), in the same order."""

    columns: list[torch.Tensor]
    readers: tuple[tuple[Any, int], ...]


NO_TAIL = SnapshotTail([], ())


@dataclass
class Snapshot:
    packed: torch.Tensor  # host [b, HEADER + width + tail] int64 (pinned on CUDA)
    event: Any  # torch.cuda.Event recorded after the copy, or None on CPU
    holders: list[tuple[int, Any]]  # (row, the request it held at snapshot time)
    width: int = 0  # the token window's columns
    readers: tuple[tuple[Any, int], ...] = ()  # SnapshotTail.readers: the columns after the window

    def rows(self) -> list[list[int]]:
        """Wait for the copy; rows of [start, n_out, finished, reason, tokens..., tail...]."""
        if self.event is not None:
            self.event.synchronize()
        return self.packed.tolist()

    def finish(self, result: Any, item: Any, row: list[int]) -> None:
        """A retiring row's tail values (`row`: one of rows()) onto its Result, each reader its own."""
        at = HEADER + self.width
        for reader, n in self.readers:
            reader.finish(result, item, row[at : at + n])
            at += n


@dataclass
class SnapshotBuffers:
    """Two pinned host buffers used in turn: one snapshot in flight while the other is read."""

    rows: int
    width: int  # the widest token window: decode_steps_per_sync + 1 (a prefill token + a chunk)
    device: torch.device
    tail_width: int = 0  # the most tail columns (RowFeatures.snapshot_width)
    buffers: list[torch.Tensor] = field(default_factory=list)
    turn: int = 0

    def __post_init__(self) -> None:
        pin = self.device.type == "cuda"
        cols = HEADER + self.width + self.tail_width
        self.buffers = [torch.zeros((self.rows, cols), dtype=torch.int64, pin_memory=pin) for _ in range(2)]

    def take(self, state: RowState, b: int, width: int, holders: list[tuple[int, Any]],
             tail: SnapshotTail = NO_TAIL) -> Snapshot:  # fmt: skip
        """Enqueue the snapshot of rows [0, b) after whatever the stream holds now (no host wait)."""
        assert width <= self.width and sum(n for _, n in tail.readers) <= self.tail_width
        start = state.copied[:b]  # [b] tokens already snapshotted per row
        cols = (start[:, None] + torch.arange(width, device=start.device)).clamp(max=state.out.shape[1] - 1)
        window = state.out[:b].gather(1, cols)  # [b, width]
        packed = torch.cat(
            [start[:, None], state.n_out[:b, None], state.finished[:b, None].long(), state.reason[:b, None], window,
             *tail.columns],
            dim=1,
        )  # [b, HEADER + width + tail]
        state.copied[:b].copy_(state.n_out[:b])
        # a contiguous view: a strided pinned destination would make the copy synchronous
        n = packed.shape[1]
        host = self.buffers[self.turn].view(-1)[: b * n].view(b, n)
        self.turn ^= 1
        host.copy_(packed, non_blocking=True)
        event = None
        if packed.is_cuda:
            event = torch.cuda.Event()
            event.record()
        return Snapshot(packed=host, event=event, holders=holders, width=width, readers=tail.readers)
