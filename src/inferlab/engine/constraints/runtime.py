"""The device side of constrained decoding: per-row program buffers and automaton state, and the in-graph
functions the engine's step calls, in this order:

    logits = runtime.mask_logits(logits)   # before temperature / top-k / top-p / min-p
    sampled = sampler(logits)
    tokens = runtime.emit(sampled, active, finished)  # choose (forced copy tokens replace the sampled
                                           # ones), then advance (pointer and automaton state) of live rows

With `pressure` (pressure.PressureBuffers: the constraint pressure's row feature passes it) the mask or the
fused race also measures how much probability the constraint takes away, and emit accumulates it.

Each is pure tensor work over static buffers sliced to the bucket's first B rows: no host sync, no
data-dependent shapes, cost O(B x V) for the mask and O(B) for the rest, so the engine captures them in
its CUDA graphs. `rows` is None in the decode step (rows 0..B-1) or the admitted row ids in prefill. The
host-side calls run between decode chunks: `check` (intake), `assign_rows` (admission, one staged copy),
`move_rows` (compaction), `release_rows` (retirement).

Two implementations, chosen at construction (`mask_impl`, "auto" = Triton on CUDA):
- "triton" (step_kernels.py, imported only for it: importing Triton costs ~0.5 s a CPU run never uses): two
  launches per step, the mask kernel reading only the token classes [V] and a [S, C] allowed-by-class table
  (rows not in a hole cost nothing);
- "torch": the CPU path and the reference the kernels are tested on (`choose` and `advance` stay public for
  inferlab/constraints/simulate.py). Its mask gathers one bool row per state from `forbidden [S + 1, V]`
  (row S forbids nothing), which costs about as much as the fill itself, less than deriving the mask from
  the class table or unpacking a bit-packed table.
"""

from __future__ import annotations

import os
from typing import Sequence

import torch

from inferlab.constraints.program import COPY, HOLE, ConstraintProgram
from inferlab.constraints.token_automaton import DEAD_STATE, GrammarSet
from inferlab.engine.constraints.pressure import PressureBuffers, accumulate, lane_pressure
from inferlab.engine.transfer import tensor_on, to_device
from inferlab.errors import CapacityError, ConfigError, InputError, UnsupportedError

MASK_IMPLS = ("auto", "torch", "triton")
RACE_BLOCK = 4096  # token ids per program of the constrained race: the chunks of `chunk_allowed` (step_kernels.py)


def _step_kernels():
    """The Triton implementation's module (the import of Triton with it), where it runs."""
    from inferlab.engine.constraints import step_kernels

    return step_kernels


def chunks_with_moves(transitions: torch.Tensor, token_class: torch.Tensor, block: int = RACE_BLOCK) -> torch.Tensor:
    """[S, ceil(V / block)] int8: 1 where state s has a move for some token of vocabulary chunk c (the
    constrained race skips the other chunks of a hole row without reading their token classes)."""
    states, vocab = transitions.shape[0], token_class.shape[0]
    chunks = -(-vocab // block)
    out = torch.zeros(states, chunks, dtype=torch.int8)
    for c in range(chunks):  # [S, block] at a time: the whole [S, V] table would be ~13 MB for Qwen
        moves = transitions[:, token_class[c * block : (c + 1) * block]] != DEAD_STATE
        out[:, c] = moves.any(dim=1).to(torch.int8)
    return out


class ConstraintRuntime:
    def __init__(
        self,
        grammar_set: GrammarSet,
        max_rows: int,
        max_program_len: int,
        vocab_size: int,
        device,
        mask_impl: str = "auto",
    ) -> None:
        if max_rows < 1 or max_program_len < 1:
            raise ConfigError(f"max_rows={max_rows} and max_program_len={max_program_len} must be >= 1")
        if vocab_size < grammar_set.tokenizer_vocab_size:
            raise ConfigError(
                f"vocab_size={vocab_size} is smaller than the tokenizer's {grammar_set.tokenizer_vocab_size} ids; "
                "pass the model's (padded) vocabulary size"
            )
        if mask_impl not in MASK_IMPLS:
            raise ConfigError(f"mask_impl={mask_impl!r}; choose one of {', '.join(MASK_IMPLS)}")
        if mask_impl == "auto":
            mask_impl = "triton" if torch.device(device).type == "cuda" and _step_kernels().triton_available() else "torch"
        if mask_impl == "triton" and not _step_kernels().triton_available():
            raise UnsupportedError("mask_impl='triton' needs the triton package; install it or use 'torch'")
        self.mask_impl = mask_impl
        self.grammar_set_key = grammar_set.key
        self.vocab_size = vocab_size
        self.max_rows = max_rows
        self.max_program_len = max_program_len
        self.device = torch.device(device)
        num_states = grammar_set.num_states

        token_class = torch.zeros(vocab_size, dtype=torch.int64)  # padded ids: class 0, dead everywhere
        token_class[: grammar_set.tokenizer_vocab_size] = torch.from_numpy(grammar_set.token_class)
        transitions = torch.from_numpy(grammar_set.transitions)  # the GrammarSet's tables are numpy

        self.transitions = transitions.to(device)  # [S, C] int64
        self.token_class = token_class.to(device)  # [V] int64
        self.accepting = torch.from_numpy(grammar_set.accepting).to(device)  # [S] bool
        if mask_impl == "torch":
            forbidden_in_state = (transitions == DEAD_STATE)[:, token_class]  # [S, V], no [S, V] int64
            nothing_forbidden = torch.zeros(1, vocab_size, dtype=torch.bool)
            self.forbidden = torch.cat([forbidden_in_state, nothing_forbidden]).to(device)  # [S + 1, V] bool
            self.free_row = num_states  # index of the row of `forbidden` that forbids nothing
        else:
            self.token_class_i32 = self.token_class.to(torch.int32)  # [V] int32
            self.allowed_by_class = (self.transitions != DEAD_STATE).to(torch.int8)  # [S, C] int8
            self.race_block = RACE_BLOCK
            self.chunk_allowed = chunks_with_moves(transitions, token_class, self.race_block).to(device)

        self.ops = torch.zeros(2, max_rows, max_program_len, dtype=torch.int64, device=device)
        self.op_kind = self.ops[0]  # [R, Lmax] COPY / HOLE (view)
        self.op_arg = self.ops[1]  # [R, Lmax] token id (COPY) or start state (HOLE) (view)
        self.last_op = torch.zeros(max_rows, dtype=torch.int64, device=device)  # [R] index of the row's EOS op
        self.ptr = torch.zeros(max_rows, dtype=torch.int64, device=device)  # [R] current op
        self.state = torch.zeros(max_rows, dtype=torch.int64, device=device)  # [R] automaton state in a hole
        self.active = torch.zeros(max_rows, dtype=torch.bool, device=device)  # [R] row is constrained
        self.forced = torch.zeros(max_rows, dtype=torch.int8, device=device)  # [R] per lane: written by the mask kernel

    # ---- host side, between decode chunks (outside the graph) ---------------------------------------
    def check(self, program: ConstraintProgram) -> None:
        """Raise (InputError / CapacityError, naming the fix) if `program` cannot run on this runtime."""
        if program.grammar_set_key != self.grammar_set_key:
            raise InputError(
                "the constraint program was compiled against another tokenizer or grammar set; compile it with "
                "the engine's tokenizer (compile_program(segments, engine.tokenizer))"
            )
        if program.length > self.max_program_len:
            raise CapacityError(
                f"the constraint program has {program.length} ops but rows hold at most {self.max_program_len}; "
                f"raise max_program_len to >= {program.length}"
            )

    def assign(self, row: int, program: ConstraintProgram | None) -> None:
        """Load `program` into `row` (None = unconstrained) and reset its pointer and state."""
        self.assign_rows([row], [program])

    def assign_rows(self, rows: Sequence[int], programs: Sequence[ConstraintProgram | None]) -> None:
        """assign() for many rows at once: one staged host->device copy of their ops and state (admission)."""
        for row in rows:
            if not 0 <= row < self.max_rows:
                raise InputError(f"row {row} is outside 0..{self.max_rows - 1}")
        for program in programs:
            if program is not None:
                self.check(program)
        width = max([p.length for p in programs if p is not None], default=1)
        ops = torch.zeros(2, len(rows), width, dtype=torch.int64)  # [2, n, width] unused tail: COPY 0, never read
        scalars = torch.zeros(4, len(rows), dtype=torch.int64)  # last_op, ptr (0), state, active
        for i, program in enumerate(programs):
            if program is not None:
                ops[:, i, : program.length] = torch.from_numpy(program.ops)
                scalars[:, i] = torch.tensor([program.length - 1, 0, program.initial_state, 1])
        index = tensor_on(list(rows), torch.int64, self.device)
        staged_ops, staged = to_device(ops, self.device), to_device(scalars, self.device)
        self.ops[:, index, :width] = staged_ops
        self.last_op[index], self.ptr[index], self.state[index] = staged[0], staged[1], staged[2]
        self.active[index] = staged[3].bool()

    def move_rows(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Compaction moved requests from rows `src` to rows `dst` ([m] int64 device tensors)."""
        self.ops[:, dst] = self.ops[:, src]
        for t in (self.last_op, self.ptr, self.state, self.active):
            t[dst] = t[src]
        self.active.index_fill_(0, src, False)  # not `[src] = False`: a scalar by index synchronises

    def release_rows(self, rows: torch.Tensor) -> None:
        """The rows' requests retired ([n] int64 device tensor): they are unconstrained until reassigned."""
        self.active.index_fill_(0, rows, False)  # not `[rows] = False`: a scalar by index synchronises

    # ---- in-graph, per step ----------------------------------------------------------------------------
    # `rows` is None in the decode step (rows 0..B-1 of the bucket, as views) or an int64 tensor of row ids
    # (prefill: the admitted rows, gathered and written back by index).
    def _current(self, batch: int, rows: torch.Tensor | None):
        """Current op kind and arg, the next op's arg (the exit token of a hole), active and state, [B] each."""
        at = slice(0, batch) if rows is None else rows
        ptr = self.ptr[at]
        nxt = torch.minimum(ptr + 1, self.last_op[at])
        return self._op(self.op_kind, at, ptr), self._op(self.op_arg, at, ptr), self._op(self.op_arg, at, nxt), at

    @staticmethod
    def _op(table: torch.Tensor, at, column: torch.Tensor) -> torch.Tensor:
        """table[row, column[row]] for the rows `at` (a slice: gather on the view; ids: advanced indexing)."""
        if isinstance(at, slice):
            return table[at].gather(1, column[:, None])[:, 0]
        return table[at, column]

    def mask_logits(self, logits: torch.Tensor, rows: torch.Tensor | None = None,
                    pressure: PressureBuffers | None = None) -> torch.Tensor:
        """Set to -inf, in place, every token the current hole state forbids (the exit token is allowed in
        accepting states). Copy rows and unconstrained rows are untouched. logits: [B, V] fp32 or bf16.
        With `pressure`, each lane's pressure (pressure.py) goes to pressure.now first."""
        if self.mask_impl == "triton":
            return _step_kernels().mask_step(self, logits, rows, pressure)
        kind, arg, next_arg, at = self._current(logits.shape[0], rows)
        state = self.state[at]  # [B]
        in_hole = self.active[at] & (kind == HOLE)  # [B]
        exit_open = in_hole & self.accepting[state]  # [B] the next op's token may end the hole now
        forbidden = self.forbidden.index_select(0, torch.where(in_hole, state, self.free_row))  # [B, V] bool
        exit_token = torch.where(in_hole, next_arg, 0)[:, None]  # [B, 1]; a token id in hole rows
        forbidden.scatter_(1, exit_token, forbidden.gather(1, exit_token) & ~exit_open[:, None])
        if pressure is not None:  # from the logits before the mask
            copy = self.active[at] & (kind == COPY)
            pressure.now[: logits.shape[0]] = lane_pressure(logits.float(), forbidden, copy, torch.where(copy, arg, 0))
        return logits.masked_fill_(forbidden, float("-inf"))

    def forced_rows(self, batch: int, rows: torch.Tensor | None = None) -> torch.Tensor:
        """[B]: the lanes whose row is in a copy op (its token is forced: the sampler skips its draw).
        Triton: what this step's mask kernel wrote (int8); torch: computed (bool)."""
        if self.mask_impl == "triton":
            return self.forced[:batch]
        kind, _, _, at = self._current(batch, rows)
        return self.active[at] & (kind == COPY)

    def fused_race(self, filter_level: int, pressure: PressureBuffers | None = None):
        """The Triton race with the mask in registers (step_kernels.constrained_race) at filter level none,
        where the engine's Triton kernels run (CUDA, or TRITON_INTERPRET=1); None otherwise, and on the torch
        path (mask_logits + the sampler stay the reference). With `pressure`, the race also measures it."""
        from inferlab.engine.sampler import FILTER_NONE

        native = self.device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"
        if self.mask_impl != "triton" or filter_level != FILTER_NONE or not native:
            return None
        race = _step_kernels().constrained_race
        return lambda logits, temperature, seeds, index, rows: race(self, logits, temperature, seeds, index, rows,
                                                                    pressure)

    def emit(
        self,
        sampled: torch.Tensor,  # [B] int64
        row_active: torch.Tensor,  # [B] bool: the engine's rows (a request holds the row)
        row_finished: torch.Tensor,  # [B] bool: the request already finished (before this token)
        rows: torch.Tensor | None = None,
        pressure: PressureBuffers | None = None,
    ) -> torch.Tensor:  # [B] tokens
        """choose, then advance the rows still live (row_active & ~row_finished): the engine's step. With
        `pressure`, this step's pressure.now is first added to the live constrained rows' accumulators."""
        if self.mask_impl == "triton":
            return _step_kernels().emit_step(self, sampled, row_active, row_finished, rows, pressure)
        tokens = self.choose(sampled, rows)
        live = row_active & ~row_finished
        if pressure is not None:
            at = slice(0, sampled.shape[0]) if rows is None else rows
            accumulate(pressure, self.active[at] & live, self.ptr[at], at)
        self.advance(tokens, live, rows)
        return tokens

    def forced_run(self, batch: int, width: int, live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The copy ops that come next in rows [0, batch), before the program's last op (its EOS, which ends
        the row: the step's own choose emits it): their tokens [batch, width] int64 (any id past a row's run)
        and the run's length [batch] (0 for a row in a hole, unconstrained, or not `live`). Decode step only."""
        ptr, last_op = self.ptr[:batch], self.last_op[:batch]
        column = ptr[:, None] + torch.arange(width, device=ptr.device)[None, :]  # [batch, width]
        inside = column < last_op[:, None]
        column = column.minimum(last_op[:, None])
        copy = (self.op_kind[:batch].gather(1, column) == COPY) & inside & (self.active[:batch] & live)[:, None]
        run = copy.long().cumprod(dim=1).sum(dim=1)  # the leading copies
        return self.op_arg[:batch].gather(1, column), run

    def skip(self, batch: int, counts: torch.Tensor) -> None:
        """Rows [0, batch) consumed `counts` [batch] of the copy ops forced_run gave them (taken into the
        step as inputs): the pointer moves past them; a row that lands on a hole takes its start state."""
        ptr = self.ptr[:batch]
        moved = counts > 0
        new_ptr = ptr + counts
        kind = self.op_kind[:batch].gather(1, new_ptr[:, None])[:, 0]
        arg = self.op_arg[:batch].gather(1, new_ptr[:, None])[:, 0]
        entered = torch.where(kind == HOLE, arg, DEAD_STATE)
        self.state[:batch] = torch.where(moved, entered, self.state[:batch])
        self.ptr[:batch] = new_ptr

    def choose(self, sampled: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The tokens to emit: the copy token where a row is in a copy op, else the sample. sampled: [B]."""
        kind, arg, _, at = self._current(sampled.shape[0], rows)
        return torch.where(self.active[at] & (kind == COPY), arg, sampled)  # [B]

    def advance(self, tokens: torch.Tensor, live: torch.Tensor | None = None, rows: torch.Tensor | None = None) -> None:
        """Consume the emitted tokens [B] of the rows that are `live` (None: all): a copy moves to the next op;
        in a hole the exit token (only reachable in an accepting state) moves past the next op, any other
        token steps the automaton. A row entering a hole takes its start state. The last op (EOS) is sticky."""
        kind, _, next_arg, at = self._current(tokens.shape[0], rows)
        ptr, state, last_op = self.ptr[at], self.state[at], self.last_op[at]  # [B]
        in_hole = kind == HOLE
        exiting = in_hole & (tokens == next_arg) & self.accepting[state]
        step = torch.where(in_hole, torch.where(exiting, 2, 0), 1)  # [B] ops consumed
        new_ptr = torch.minimum(ptr + step, last_op)  # [B]
        new_kind, new_arg = self._op(self.op_kind, at, new_ptr), self._op(self.op_arg, at, new_ptr)
        entered = torch.where(new_kind == HOLE, new_arg, DEAD_STATE)  # [B] start state or 0 in a copy
        stepped = self.transitions[state, self.token_class[tokens]]  # [B] automaton step inside the hole
        new_state = torch.where(step > 0, entered, stepped)
        moving = self.active[at] if live is None else self.active[at] & live
        self.ptr[at] = torch.where(moving, new_ptr, ptr)
        self.state[at] = torch.where(moving, new_state, state)
