"""Constrained decoding as a row feature: the ConstraintRuntime (constraints/runtime.py: each row's program
and automaton state), built when the first constrained request arrives, and the intake check of each
request's program.

Building it costs the GrammarSet of the engine's tokenizer (grammar_set_for caches it per tokenizer, so
workloads compiling programs with engine.tokenizer share it), or waiting for the one the caller gave
(Engine(config, grammar_set=...): a GrammarSet or a Future), plus the per-row device state. An engine given a
GrammarSet expects constrained requests: it starts the build in a thread at start-up (`start_runtime_build`,
beside the weights' load: host tables and small copies), and the first constrained request waits for it
(`setup_s`, what the generation pays; `build_s`, the build itself). The constrained
graph variants are captured when first needed, so the first constrained request may arrive while rows are
live; an engine that never sees a constraint pays none of it. A failure to build (no tokenizer, a vocabulary
smaller than the tokenizer, ...) is kept and returned as the reason for every constrained request.

A constrained request is sized by its program: the program's exact output bound replaces max_new_tokens,
min_new_tokens is 0 and the stop table holds only the program's EOS (stop_token_ids are refused: a stop
inside the template would cut it); temperature, top-k, top-p, min-p and the seed apply. The check runs
first, before the prompt's length is checked against that bound.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import Future
from typing import Any

import torch

from inferlab.engine.batch.feature import RowFeature, RowMoves, RowSet
from inferlab.engine.batch.setup import BatchSetup
from inferlab.engine.hooks import ConstraintHooks
from inferlab.errors import CapacityError, InferlabError, InputError

log = logging.getLogger(__name__)


class ConstrainedRows(RowFeature):
    bit = "constrained"

    def __init__(self, setup: BatchSetup) -> None:
        self.grammar_set = setup.grammar_set  # a GrammarSet, a Future of one, or None: built from the tokenizer
        self.vocab_size = setup.spec.vocab_size  # the model's (padded) vocabulary
        self.rows = setup.rows
        self.max_program_len = setup.max_len  # programs are at most as long as their output (holes apart)
        self.device = setup.device
        self.mask_impl = mask_impl_for(setup.ops)
        self.runtime_job = setup.runtime_job  # a Future of build_runtime's answer, started at start-up, or None
        self.runtime = None  # a ConstraintRuntime once a constrained request arrived
        self.failure: str | None = None
        self.setup_s = 0.0  # what the first constrained request waited for the runtime, paid once
        self.build_s = 0.0  # the runtime's build (at start-up in a thread, or then)
        self.grammar_wait_s = 0.0  # of it: waiting for the caller's GrammarSet (a Future)

    def check(self, item, tokenizer: Any) -> str | None:
        program = item.constraint
        if program is None:
            return None
        problem = self._problem(program, tokenizer)
        if problem is not None:
            return f"constraint refused: {problem}"
        s = item.sampling
        if s.stop_token_ids:
            return (f"stop_token_ids {list(s.stop_token_ids)} do not apply to a constrained request (its program "
                    "ends it with EOS, and a stop inside the template would cut it); drop them")
        item.sampling = dataclasses.replace(s, max_new_tokens=program.max_new_tokens, min_new_tokens=0,
                                            ignore_eos=False)
        item.eos_ids = (program.eos_token_id,)  # the stop table: the program's EOS, nothing else
        return None

    def wanted_by(self, items) -> bool:
        return any(item.constraint is not None for item in items)

    def admit(self, rows, items) -> None:
        if self.runtime is not None:
            self.runtime.assign_rows(list(rows), [item.constraint for item in items])
        else:
            assert all(item.constraint is None for item in items), "constrained request without a runtime"

    def release(self, rows: RowSet) -> None:
        if self.runtime is not None:
            self.runtime.release_rows(rows.index)

    def move(self, moves: RowMoves) -> None:
        if self.runtime is not None:
            self.runtime.move_rows(moves.src, moves.dst)

    def saved(self) -> list[torch.Tensor]:
        return [self.runtime.ptr, self.runtime.state] if self.runtime is not None else []

    def logits_hooks(self, hooks: ConstraintHooks, variant) -> ConstraintHooks:
        return self.runtime if variant.constrained else hooks

    def close(self) -> None:
        """Drop the runtime (its device tables and per-row state); a later check refuses with the reason."""
        if self.runtime_job is not None:  # a build still running would hold its tensors past the close
            self.runtime_job.exception()
        self.runtime = self.grammar_set = self.runtime_job = None
        self.failure = "the engine is closed"

    def _problem(self, program: Any, tokenizer: Any) -> str | None:
        """None when the engine can run `program`, else the reason."""
        from inferlab.constraints.program import ConstraintProgram

        if not isinstance(program, ConstraintProgram):
            return (
                f"Request.constraint must be a ConstraintProgram (compile_program(segments, engine.tokenizer)), "
                f"not {type(program).__name__}"
            )
        runtime = self._ensure_runtime(tokenizer)
        if runtime is None:
            return self.failure
        try:
            runtime.check(program)
        except InferlabError as e:
            return str(e)
        return None

    def _ensure_runtime(self, tokenizer: Any):
        if self.runtime is not None or self.failure is not None:
            return self.runtime
        from inferlab.constraints.token_automaton import grammar_set_for

        t0 = time.perf_counter()
        try:
            if self.runtime_job is not None:
                runtime, self.build_s, self.grammar_wait_s = self.runtime_job.result()
            else:
                grammar_set = self.grammar_set
                if grammar_set is None:
                    if tokenizer is None:
                        raise InputError("constraints are compiled against a tokenizer, and this engine has none (the "
                                         "model folder has no tokenizer files, or load_tokenizer=False without a "
                                         "grammar_set)")
                    grammar_set = grammar_set_for(tokenizer)
                runtime, self.build_s, self.grammar_wait_s = build_runtime(
                    grammar_set, self.rows, self.max_program_len, self.vocab_size, self.device, self.mask_impl)
        except torch.cuda.OutOfMemoryError as e:
            self.failure = str(CapacityError(f"no device memory left for the constraint runtime ({e})"))
            return None
        except InferlabError as e:
            self.failure = str(e)
            log.warning("constrained requests will be refused: %s", e)
            return None
        finally:
            self.runtime_job = None
        self.runtime = runtime
        self.setup_s = time.perf_counter() - t0
        log.info("constraint runtime ready (%s mask): built in %.2f s (%.2f s of it waiting for the GrammarSet), "
                 "waited for %.2f s", runtime.mask_impl, self.build_s, self.grammar_wait_s, self.setup_s)
        return runtime


def mask_impl_for(ops: Any) -> str:
    """The constraint mask's implementation for the engine's kernels (runtime.MASK_IMPLS)."""
    return "triton" if ops.name == "triton" else "torch"


def build_runtime(grammar_set: Any, rows: int, max_program_len: int, vocab_size: int, device: torch.device,
                  mask_impl: str) -> tuple[Any, float, float]:
    """(the ConstraintRuntime, the seconds its build took, of them waiting for `grammar_set` when a Future)."""
    from inferlab.engine.constraints.runtime import ConstraintRuntime

    t0 = time.perf_counter()
    if isinstance(grammar_set, Future):
        grammar_set = grammar_set.result()  # an error building it is the caller's: it propagates
    waited = time.perf_counter() - t0
    runtime = ConstraintRuntime(grammar_set, rows, max_program_len, vocab_size, device, mask_impl)
    return runtime, time.perf_counter() - t0, waited


def start_runtime_build(grammar_set: Any, rows: int, max_program_len: int, vocab_size: int, device: torch.device,
                        ops: Any) -> Future:
    """build_runtime in a daemon thread (its errors come back from the Future's result)."""
    job: Future = Future()

    def build() -> None:
        if device.type == "cuda":
            torch.cuda.set_device(device)  # the current device is per thread (Triton's launches read it)
        try:
            job.set_result(build_runtime(grammar_set, rows, max_program_len, vocab_size, device, mask_impl_for(ops)))
        except BaseException as e:  # noqa: BLE001 - handed to the first constrained request, which reports it
            job.set_exception(e)

    threading.Thread(target=build, name="inferlab-constraint-runtime", daemon=True).start()
    return job
