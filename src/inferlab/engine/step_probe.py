"""DecodeStepProbe: the engine's decode step run on its own, at a fixed batch and context, for measuring it.

    with Engine(config) as engine, DecodeStepProbe(engine, rows=16, context=330, sampling=s, seed=0) as probe:
        probe.step()                                   # a graph replay (eager on an engine without graphs)
        with probe.labelled(lambda family: a_range(family)):
            probe.eager_step()                         # every operation inside its family's range

Rows [0, rows) get one prompt of `context - 1` random ids (seeded; row i samples with seed
`seed * 100_003 + i`), prefilled together, so each row's step attends over `context` positions. With
`constraints` (ConstraintPrograms compiled with the engine's tokenizer), row i is constrained by
constraints[i % len]: the step is the constrained variant, each row at its program's op after the prefill's
token (a program that starts with a hole keeps its row in it), and its pressure measured when the engine
measures it (EngineConfig.constraint_pressure). A step runs
over the smallest decode bucket holding the rows, as the engine's own steps do. The rows' state is frozen
until close() (the runner's preserved_rows): every step reads and writes the same positions, and no row
advances or finishes. On an engine with forced runs (EngineConfig.forced_run_tokens) a constrained step is
the packed step over `packed_positions` positions (forced_runs.py); a step books only live rows' runs, so the
frozen rows book none (`booked_per_step()` counts them): the packed step's fixed cost. The probe borrows the
engine's rows: use it on an engine that runs no generate/stream meanwhile, and close it before the engine.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, ContextManager, Sequence

import torch

from inferlab.engine.cpu_threads import torch_threads
from inferlab.engine.graphs import bucket_for
from inferlab.engine.intake import Prepared
from inferlab.engine.lifetime import closed_error
from inferlab.engine.op_labels import LABELS, RangeFactory, labelled_ops
from inferlab.errors import ConfigError, EngineClosedError
from inferlab.types import Request, SamplingParams, Timings

if TYPE_CHECKING:
    from inferlab.engine.engine import Engine

ROW_SEED_STRIDE = 100_003  # row i's sampling seed: seed * stride + i


class DecodeStepProbe:
    """The engine's decode step at `rows` rows over `context` positions, for timing and profiling (module
    docstring)."""

    FAMILIES = LABELS  # the family names `labelled` passes to its range factory

    def __init__(self, engine: Engine, rows: int, context: int, sampling: SamplingParams, seed: int = 0,
                 constraints: Sequence[Any] = ()) -> None:
        plan = engine.plan
        if not 1 <= rows <= plan.slots:
            raise ConfigError(f"rows={rows} must be in [1, {plan.slots}] (the engine's slots); make the Engine "
                              f"with max_slots >= {rows}")  # fmt: skip
        if not 2 <= context < plan.max_seq_len:
            raise ConfigError(f"context={context} must be in [2, {plan.max_seq_len - 1}] (a prompt of context - 1 "
                              f"tokens, the step's position and the one after it within max_seq_len="
                              f"{plan.max_seq_len}); make the Engine with max_seq_len > {context}")  # fmt: skip
        self._engine = engine
        self._runner = engine.runner  # EngineClosedError on a closed engine
        self.rows, self.context = rows, context
        self.bucket = bucket_for(rows, self._runner.sizes)  # the rows a step runs over (the rest stay inactive)
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(0, engine.spec.vocab_size, (context - 1,), generator=g).tolist()
        items = [Prepared(i, Request(id=f"probe{i}", prompt_ids=(0,)), prompt, sampling, seed * ROW_SEED_STRIDE + i,
                          [], 0, Timings(), constraints[i % len(constraints)] if constraints else None)
                 for i in range(rows)]  # fmt: skip
        features = self._runner.features
        for item in items if constraints else ():  # the constraint's intake alone (the prompt is the probe's)
            problem = features.constraints.check(item, engine.tokenizer) or features.pressure.check(item, None)
            if problem is not None:
                raise ConfigError(f"the probe's constraint: {problem}")
        self.filter_level = items[0].filter_level  # sampler.FILTER_*: the decode variant the rows need
        self._batch = self._runner.batch_of(range(rows), items)  # one lane: the rows share the prompt
        self._variant = self._batch.variant
        # T, the positions each step's forward runs over where the engine packs forced runs into it, else None
        packs = self._runner.packs(self._variant)
        self.packed_positions = self._runner.forced_runs.positions(self.bucket) if packs else None
        self.cuda_graphs = self._runner.graphs is not None
        self._threads = engine.config.cpu_threads if engine.device.type == "cpu" else None  # as the engine's steps
        self.stop_ids_width = self._runner.rows.stop_ids.shape[1]  # each row's stop table (EngineConfig.max_stop_ids)
        self._frozen = ExitStack()  # what close() undoes: the rows' release, then their frozen state
        self._closed = False
        self._set_up()

    @torch.inference_mode()
    def _set_up(self) -> None:
        runner = self._runner
        runner.admit(self._batch)
        self._frozen.callback(runner.release, range(self.rows))
        try:
            runner.prefill(self._batch)
            if self.cuda_graphs:
                runner.ensure_graph(self.bucket, self._variant)
            self._frozen.enter_context(runner.preserved_rows())
        except BaseException:
            self._frozen.close()
            raise

    @torch.inference_mode()
    def step(self) -> None:
        """One decode step over the rows: the captured graph's replay, or an eager step without graphs."""
        self._check_open()
        if self.cuda_graphs:
            self._runner.graphs.replay(self.bucket, self._variant)
        else:
            with torch_threads(self._threads):
                self._runner.decode_step(self.bucket, self._variant, None)

    @torch.inference_mode()
    def eager_step(self) -> None:
        """One eager decode step over the rows (the step the graph captured; inside `labelled`, labelled)."""
        self._check_open()
        with torch_threads(self._threads):
            self._runner.decode_step(self.bucket, self._variant, None)

    @torch.inference_mode()
    def booked_per_step(self) -> int:
        """The forced tokens one eager step books into the rows, counted where booking puts them (each moves its
        row's n_out on; a frozen row's own token does not): what the step's profile includes of the booking."""
        n_out = self._runner.rows.n_out[: self.bucket]
        before = int(n_out.sum())
        self.eager_step()
        return int(n_out.sum()) - before

    def labelled(self, range_for: RangeFactory) -> ContextManager[None]:
        """While inside, every operation of an eager step runs inside `range_for(family)` (a context manager;
        families: FAMILIES): engine/op_labels.py."""
        self._check_open()
        return labelled_ops(self._runner, range_for)

    def close(self) -> None:
        """The rows' state put back and the rows released (idempotent; nothing to do once the engine is closed)."""
        self._closed = True
        if self._engine.closed:
            self._frozen.pop_all()  # the engine released the rows with everything else
            return
        with torch.inference_mode():
            self._frozen.close()

    def __enter__(self) -> "DecodeStepProbe":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._engine.closed:
            raise closed_error("DecodeStepProbe")
        if self._closed:
            raise EngineClosedError("DecodeStepProbe used after its close() (the end of its `with` block) released "
                                    "its rows; make a new DecodeStepProbe")  # fmt: skip
