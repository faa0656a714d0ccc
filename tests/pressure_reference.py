"""The constraint pressure's float64 reference for the tests (engine/constraints/pressure.py defines it):
from the logits and the constraint runtime's state, the model's T = 1 softmax mass outside what the
constraint allows at this step, computed from the GrammarSet's tables alone (not from the runtime's mask),
and the per-row accumulation the engine reports (mean, max, the token index and op of the max)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from inferlab.constraints.program import COPY, HOLE, compile_program
from inferlab.constraints.simulate import synthetic_conformer_segments
from inferlab.constraints.token_automaton import DEAD_STATE


def allowed_tokens(runtime, row: int, vocab: int) -> torch.Tensor | None:
    """[V] bool: what row `row`'s constraint allows now (None: the row is unconstrained)."""
    if not bool(runtime.active[row]):
        return None
    ptr = int(runtime.ptr[row])
    kind, arg = int(runtime.op_kind[row, ptr]), int(runtime.op_arg[row, ptr])
    allowed = torch.zeros(vocab, dtype=torch.bool)
    if kind == COPY:
        allowed[arg] = True
        return allowed
    assert kind == HOLE
    state = int(runtime.state[row])
    allowed = runtime.transitions[state].cpu()[runtime.token_class.cpu()] != DEAD_STATE
    if bool(runtime.accepting[state]):
        allowed[int(runtime.op_arg[row, min(ptr + 1, int(runtime.last_op[row]))])] = True
    return allowed


def reference_pressure(logits: torch.Tensor, runtime, rows: list[int] | None = None) -> list[float | None]:
    """Per lane (lane i = row rows[i], or row i): the mass the float64 softmax of its logits puts outside
    what its constraint allows; None for an unconstrained row."""
    probs = logits.double().softmax(dim=-1)
    out = []
    for lane in range(logits.shape[0]):
        allowed = allowed_tokens(runtime, rows[lane] if rows is not None else lane, logits.shape[1])
        out.append(None if allowed is None else float(probs[lane][~allowed].sum()))
    return out


@dataclass
class ReferenceRow:
    """What the engine accumulates for one row, in float64: every step's pressure and op pointer."""

    values: list[float] = field(default_factory=list)
    ops: list[int] = field(default_factory=list)

    def add(self, value: float, op: int) -> None:
        self.values.append(value)
        self.ops.append(op)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def max_step(self) -> int:
        return max(range(len(self.values)), key=lambda i: (self.values[i], -i))  # the first one on ties

    @property
    def max(self) -> float:
        return self.values[self.max_step]


def conformer_like_programs(tokenizer, count: int, atoms: int, seed: int = 7) -> list:
    """`count` synthetic conformer programs (constraints/simulate.py) for `tokenizer`."""
    rng = random.Random(seed)
    return [compile_program(synthetic_conformer_segments(atoms, "coord3-fixed4", rng), tokenizer) for _ in range(count)]


def pressing_logits(batch: int, vocab: int, runtime, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """Random logits that give pressures across [0, 1]: each row favours, by a random margin, either its
    allowed tokens or everything else."""
    logits = torch.randn(batch, vocab, generator=g) * 2
    for row in range(batch):
        allowed = allowed_tokens(runtime, row, vocab)
        if allowed is not None:
            logits[row] += allowed.float() * (torch.rand((), generator=g) * 24 - 12)
    return logits.to(dtype)
