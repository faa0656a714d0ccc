"""The device-side bookkeeping of one step, on crafted logits (no model): stops, min length, counters."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from inferlab.engine.batch.feature import RowMoves
from inferlab.engine.batch.kv_slots import KVSlots
from inferlab.engine.hooks import NoConstraints
from inferlab.engine.ops import select_ops
from inferlab.engine.rows import FINISH_EOS, FINISH_LENGTH, FINISH_STOP, NOT_FINISHED, RowState
from inferlab.engine.sampler import FILTER_NONE
from inferlab.engine.step import finish_step

TORCH_OPS = select_ops("torch", torch.device("cpu"))

VOCAB = 10
EOS, STOP = 9, 8


def _rows(n: int, max_new=5, min_new=0, stops=(EOS, STOP), n_eos=1) -> RowState:
    rows = RowState.allocate(n, max_stop=4, max_new_cap=16, device=torch.device("cpu"))
    rows.active[:] = True
    rows.max_new[:] = max_new
    rows.min_new[:] = min_new
    table = list(stops) + [stops[0]] * (4 - len(stops)) if stops else [0] * 4
    rows.stop_ids[:] = torch.tensor(table)
    rows.n_eos[:] = n_eos if stops else 0
    rows.n_stop[:] = len(stops)
    return rows


def _logits(favourite: list[int]) -> torch.Tensor:
    """Greedy picks favourite[r] for row r; the runner-up is token 0."""
    logits = torch.zeros(len(favourite), VOCAB)
    logits[:, 0] = 1.0
    logits[torch.arange(len(favourite)), torch.tensor(favourite)] = 5.0
    return logits


def _step(rows: RowState, favourite: list[int]) -> None:
    finish_step(_logits(favourite), rows, NoConstraints(), TORCH_OPS, FILTER_NONE)


def test_eos_stop_and_length_reasons():
    rows = _rows(3, max_new=2)
    _step(rows, [EOS, STOP, 3])
    assert rows.finished.tolist() == [True, True, False]
    assert rows.reason.tolist() == [FINISH_EOS, FINISH_STOP, NOT_FINISHED]
    _step(rows, [3, 3, 4])
    assert rows.finished.tolist() == [True, True, True] and rows.reason[2] == FINISH_LENGTH
    assert rows.n_out.tolist() == [1, 1, 2]  # finished rows stop counting
    assert rows.out[0, 0] == EOS and rows.out[2, :2].tolist() == [3, 4]


def test_min_new_tokens_masks_eos_and_stops_until_reached():
    rows = _rows(2, max_new=5, min_new=2)
    _step(rows, [EOS, STOP])
    assert rows.out[:, 0].tolist() == [0, 0]  # the runner-up, since EOS/STOP were masked
    _step(rows, [EOS, STOP])
    assert rows.out[:, 1].tolist() == [0, 0] and not rows.finished.any()
    _step(rows, [EOS, STOP])  # n_out == 2 == min_new: allowed now
    assert rows.finished.tolist() == [True, True] and rows.n_out.tolist() == [3, 3]


def test_ignore_eos_means_no_eos_in_the_stop_table():
    rows = _rows(1, max_new=3, stops=(STOP,), n_eos=0)
    for _ in range(3):
        _step(rows, [EOS])
    assert rows.out[0, :3].tolist() == [EOS] * 3 and rows.reason[0] == FINISH_LENGTH


def test_idle_and_finished_rows_do_not_move():
    rows = _rows(2, max_new=4)
    rows.active[1] = False
    _step(rows, [EOS, 3])
    before = (rows.n_out.clone(), rows.positions.clone(), rows.tokens.clone())
    _step(rows, [3, 3])
    assert rows.n_out.tolist() == [1, 0]
    assert torch.equal(rows.positions, before[1]) and torch.equal(rows.tokens, before[2])


def test_positions_and_next_inputs_advance_for_live_rows():
    rows = _rows(2, max_new=8)
    rows.positions[:] = torch.tensor([4, 9])  # the prompt's last position
    _step(rows, [3, 5])
    assert rows.positions.tolist() == [5, 10] and rows.tokens.tolist() == [3, 5]


def test_row_moves_keep_slots_a_permutation():
    rows = RowState.allocate(6, max_stop=2, max_new_cap=4, device=torch.device("cpu"))
    kv = KVSlots(SimpleNamespace(rows=6, device=torch.device("cpu"), max_len=4, spec=SimpleNamespace(vocab_size=9)))
    rows.active[[4, 5]] = True
    rows.n_out[[4, 5]] = torch.tensor([7, 8])
    moves = RowMoves([(5, 0), (4, 1)], torch.tensor([5, 4]), torch.tensor([0, 1]))
    rows.move_(moves.src, moves.dst)
    kv.move(moves)
    assert sorted(kv.slots.tolist()) == list(range(6))
    assert kv.slots[:2].tolist() == [5, 4] and rows.n_out[:2].tolist() == [8, 7]
    assert rows.active.tolist() == [True, True, False, False, False, False]
