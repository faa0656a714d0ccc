"""What happens to a batch of logits, all on the device and never read back: masks, sampling, stop checks
and bookkeeping. `finish_step` serves prefill (the gathered admitted rows) and the decode step (rows [0, b),
inside the CUDA graph):
    constraint mask -> EOS/stop masked while n_out < min_new -> sample (rows the constraint forces are
    skipped) -> constraint emit -> token written to out[row, n_out] -> finished flag, reason, next input.
Constraint hooks with a fused race (hooks.py) replace the mask and the sampler. Idle and finished rows go
through the same arithmetic but change nothing that is read.
"""

from __future__ import annotations

import torch

from inferlab.engine.hooks import ConstraintHooks
from inferlab.engine.rows import FINISH_EOS, FINISH_LENGTH, FINISH_STOP, RowState
from inferlab.engine.sampler import sample


def mask_stops_before_min(logits: torch.Tensor, rows: RowState) -> torch.Tensor:
    """-inf on each row's EOS and stop ids while it has fewer than min_new tokens (logits [B, V], in place)."""
    need = (rows.n_out < rows.min_new) & (rows.n_stop > 0)  # [B]
    current = logits.gather(1, rows.stop_ids)  # [B, S]; pad entries repeat entry 0, so duplicates agree
    logits.scatter_(1, rows.stop_ids, torch.where(need[:, None], float("-inf"), current))
    return logits


def record_tokens(tokens: torch.Tensor, rows: RowState) -> torch.Tensor:
    """Book one new token per live row (tokens [B] int64); returns `live` [B] bool (before this token)."""
    live = rows.active & ~rows.finished
    column = rows.n_out.clamp(max=rows.out.shape[1] - 1)  # a finished row's column is past its last token
    rows.out.scatter_(1, column[:, None], tokens[:, None])
    entry = torch.arange(rows.stop_ids.shape[1], device=tokens.device)[None, :]  # [1, S]
    match = tokens[:, None] == rows.stop_ids  # [B, S]
    is_eos = (match & (entry < rows.n_eos[:, None])).any(dim=1)
    is_stop = (match & (entry >= rows.n_eos[:, None]) & (entry < rows.n_stop[:, None])).any(dim=1)
    n_new = rows.n_out + live.long()
    done = live & (is_eos | is_stop | (n_new >= rows.max_new))
    reason = torch.where(is_eos, FINISH_EOS, torch.where(is_stop, FINISH_STOP, FINISH_LENGTH))
    rows.reason.copy_(torch.where(done, reason, rows.reason))
    rows.finished.logical_or_(done)
    rows.n_out.copy_(n_new)
    rows.positions.add_(live.long())  # the new token's position, its K/V written by the next step
    rows.tokens.copy_(torch.where(live, tokens, rows.tokens))
    return live


def finish_step(
    logits: torch.Tensor,  # [B, V] the LM head's output (model dtype)
    rows: RowState,  # B rows: views (decode) or gathered copies (prefill)
    hooks: ConstraintHooks,
    ops,  # engine.ops.Ops: torch functions above or their Triton kernels
    filter_level: int,  # sampler.FILTER_*: at least what the rows need
    row_ids: torch.Tensor | None = None,  # None in decode (rows [0, B)); admitted row ids in prefill
) -> None:
    logits = ops.sampling_logits(logits)  # fp32 (torch ops) or as is (Triton)
    race = hooks.fused_race(filter_level)
    if race is None:
        logits = hooks.mask_logits(logits, row_ids)
    logits = ops.mask_stops(logits, rows)
    # the token index n_out keys the noise: a request's draws are reproducible whatever its row
    if race is not None:
        sampled = race(logits, rows.temperature, rows.seeds, rows.n_out, row_ids)
    else:
        skip = hooks.forced_rows(logits.shape[0], row_ids)
        sampled = sample(logits, rows.temperature, rows.top_k, rows.top_p, rows.min_p, rows.seeds, rows.n_out, ops,
                         filter_level, skip)
    tokens = hooks.emit(sampled, rows.active, rows.finished, row_ids)  # live = active & ~finished, as record's
    ops.record(tokens, rows)
