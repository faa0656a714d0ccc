"""Per-row sampling and stop state of the batch: static buffers the decode step reads and updates in place
(batch/sampling_rows.py keeps them in step with the rows' lifecycle; the row -> KV slot map is
batch/kv_slots.py's).

The graph for bucket b reads `view(b)`: slices [0, b) of these buffers, whose addresses never change. The
host writes rows only between replays (admission, compaction, reset).

Finish reasons are small integers on the device; REASON_NAMES maps them to Result.finish_reason.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from inferlab.engine.transfer import to_device

NOT_FINISHED, FINISH_EOS, FINISH_STOP, FINISH_LENGTH = 0, 1, 2, 3
REASON_NAMES = {FINISH_EOS: "eos", FINISH_STOP: "stop", FINISH_LENGTH: "length"}


@dataclass
class RowState:
    tokens: torch.Tensor  # [R] int64: each row's newest token (the next decode input)
    positions: torch.Tensor  # [R] int64: that token's position in the row's slot
    active: torch.Tensor  # [R] bool: a request occupies the row
    finished: torch.Tensor  # [R] bool: the request stopped (set on the device)
    reason: torch.Tensor  # [R] int64: FINISH_* code
    n_out: torch.Tensor  # [R] int64: tokens generated so far
    max_new: torch.Tensor  # [R] int64
    min_new: torch.Tensor  # [R] int64
    temperature: torch.Tensor  # [R] fp32 (0 = greedy)
    top_k: torch.Tensor  # [R] int64 (0 = off)
    top_p: torch.Tensor  # [R] fp32 (1 = off)
    min_p: torch.Tensor  # [R] fp32 (0 = off)
    seeds: torch.Tensor  # [R] int64 (>= 0)
    stop_ids: torch.Tensor  # [R, S] int64: EOS ids first, then request stop ids, padded by repeating entry 0
    n_eos: torch.Tensor  # [R] int64: entries [0, n_eos) of stop_ids are EOS ids
    n_stop: torch.Tensor  # [R] int64: entries [0, n_stop) are valid
    out: torch.Tensor  # [R, max_new_cap] int64: generated tokens
    copied: torch.Tensor  # [R] int64: tokens of `out` already snapshotted for the host (snapshots.py)

    @classmethod
    def allocate(cls, rows: int, max_stop: int, max_new_cap: int, device: torch.device) -> "RowState":
        def z(dtype: torch.dtype, *extra: int) -> torch.Tensor:
            return torch.zeros((rows, *extra), dtype=dtype, device=device)

        i64, f32 = torch.int64, torch.float32
        state = cls(
            tokens=z(i64),
            positions=z(i64),
            active=z(torch.bool),
            finished=z(torch.bool),
            reason=z(i64),
            n_out=z(i64),
            max_new=z(i64),
            min_new=z(i64),
            temperature=z(f32),
            top_k=z(i64),
            top_p=z(f32) + 1,
            min_p=z(f32),
            seeds=z(i64),
            stop_ids=z(i64, max_stop),
            n_eos=z(i64),
            n_stop=z(i64),
            out=z(i64, max_new_cap),
            copied=z(i64),
        )
        return state

    def tensors(self) -> list[torch.Tensor]:
        return [getattr(self, f.name) for f in fields(self)]

    def view(self, b: int) -> "RowState":
        """Rows [0, b) as views: what the graph of bucket b reads and writes."""
        return RowState(**{f.name: getattr(self, f.name)[:b] for f in fields(self)})

    def gather(self, rows: torch.Tensor) -> "RowState":
        """Copies of the given rows (prefill works on the admitted rows, which need not be contiguous)."""
        return RowState(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    def scatter_(self, rows: torch.Tensor, part: "RowState") -> None:
        """Write a gathered part back into its rows."""
        for f in fields(self):
            getattr(self, f.name)[rows] = getattr(part, f.name)

    def write_(self, rows: torch.Tensor, values: dict[str, torch.Tensor]) -> None:
        """Set some fields of some rows (admission): values[name] is a host tensor with the field's shape and
        len(rows) rows. One staged copy per dtype (transfer.py), so the host never waits for the device."""
        device = self.tokens.device
        by_dtype: dict[torch.dtype, list[tuple[str, torch.Tensor]]] = {}
        for name, value in values.items():
            by_dtype.setdefault(value.dtype, []).append((name, value.reshape(len(value), -1)))
        for group in by_dtype.values():
            staged = to_device(torch.cat([v for _, v in group], dim=1), device)  # [n, total columns]
            start = 0
            for name, value in group:
                field = getattr(self, name)
                part = staged[:, start : start + value.shape[1]]
                field[rows] = part.reshape((len(value),) + field.shape[1:]).to(field.dtype)
                start += value.shape[1]

    def stops_at(self, tokens: torch.Tensor) -> torch.Tensor:
        """[B, W] bool: where tokens [B, W] is one of its row's EOS or stop ids."""
        entry = torch.arange(self.stop_ids.shape[1], device=tokens.device)
        valid = entry[None, :] < self.n_stop[:, None]  # [B, S]
        return ((tokens[:, :, None] == self.stop_ids[:, None, :]) & valid[:, None, :]).any(dim=2)

    def book_(self, tokens: torch.Tensor, counts: torch.Tensor) -> None:
        """Append tokens[r, :counts[r]] ([B, W] int64, counts [B] with n_out + counts < max_new) to each row's
        output, fed to this step as inputs after its newest token: n_out and the position of the row's next
        input advance past them (the step's own token is then recorded after them)."""
        width = tokens.shape[1]
        column = (self.n_out[:, None] + torch.arange(width, device=tokens.device)[None, :]).clamp(
            max=self.out.shape[1] - 1)  # [B, W]
        keep = torch.arange(width, device=tokens.device)[None, :] >= counts[:, None]
        self.out.scatter_(1, column, torch.where(keep, self.out.gather(1, column), tokens))
        self.n_out.add_(counts)
        self.positions.add_(counts)

    def move_(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Move requests from rows `src` to idle rows `dst` (compaction): state copied, the sources idle."""
        for t in self.tensors():
            t[dst] = t[src]
        self.active.index_fill_(0, src, False)  # not `[src] = scalar`: that copy synchronises (SamplingRows.release)
        self.finished.index_fill_(0, src, False)
        self.positions.index_fill_(0, src, 0)
