"""The engine's side of constrained decoding: its ConstraintRuntime, built when the first constrained
request arrives, and the intake check of each request's program.

Building it costs the GrammarSet of the engine's tokenizer (grammar_set_for caches it per tokenizer, so
workloads compiling programs with engine.tokenizer share it), or waiting for the one the caller gave
(Engine(config, grammar_set=...): a GrammarSet or a Future), plus the per-row device state. The constrained
graph variants are captured when first needed, so the first constrained request may arrive while rows are
live; an engine that never sees a constraint pays none of it. A failure to build (no tokenizer, a vocabulary
smaller than the tokenizer, ...) is kept and returned as the reason for every constrained request.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from inferlab.errors import CapacityError, InferlabError, InputError

log = logging.getLogger(__name__)


@dataclass(eq=False)
class EngineConstraints:
    tokenizer: Any
    grammar_set: Any  # a GrammarSet, a Future of one, or None: built from the tokenizer
    vocab_size: int  # the model's (padded) vocabulary
    rows: int
    max_program_len: int
    device: torch.device
    mask_impl: str  # "triton" or "torch", as the engine's kernels
    attach: Callable[[Any], None]  # runner.attach_constraints: installs the runtime
    runtime: Any = field(default=None, init=False)
    failure: str | None = field(default=None, init=False)
    setup_s: float = field(default=0.0, init=False)  # grammar set + runtime, paid once

    def check(self, program: Any) -> str | None:
        """None when the engine can run `program`, else the reason (for the request's error Result)."""
        from inferlab.constraints.program import ConstraintProgram

        if not isinstance(program, ConstraintProgram):
            return (
                f"Request.constraint must be a ConstraintProgram (compile_program(segments, engine.tokenizer)), "
                f"not {type(program).__name__}"
            )
        runtime = self._ensure_runtime()
        if runtime is None:
            return self.failure
        try:
            runtime.check(program)
        except InferlabError as e:
            return str(e)
        return None

    def close(self) -> None:
        """Drop the runtime (its device tables and per-row state), the tokenizer and the runner's hook
        (Engine.close); a later check refuses with the reason."""
        self.runtime = self.tokenizer = self.grammar_set = self.attach = None
        self.failure = "the engine is closed"

    def _ensure_runtime(self):
        if self.runtime is not None or self.failure is not None:
            return self.runtime
        from inferlab.constraints.token_automaton import grammar_set_for
        from inferlab.engine.constraints.runtime import ConstraintRuntime

        t0 = time.perf_counter()
        try:
            grammar_set = self.grammar_set
            if isinstance(grammar_set, Future):
                grammar_set = grammar_set.result()  # an error building it is the caller's: it propagates
            if grammar_set is None:
                if self.tokenizer is None:
                    raise InputError("constraints are compiled against a tokenizer, and this engine has none (the "
                                     "model folder has no tokenizer files, or load_tokenizer=False without a "
                                     "grammar_set)")
                grammar_set = grammar_set_for(self.tokenizer)
            runtime = ConstraintRuntime(
                grammar_set, self.rows, self.max_program_len, self.vocab_size, self.device, self.mask_impl
            )
            self.attach(runtime)
        except torch.cuda.OutOfMemoryError as e:
            self.failure = str(CapacityError(f"no device memory left for the constraint runtime ({e})"))
            return None
        except InferlabError as e:
            self.failure = str(e)
            log.warning("constrained requests will be refused: %s", e)
            return None
        self.runtime = runtime
        self.setup_s = time.perf_counter() - t0
        log.info("constraint runtime ready in %.2f s (%s mask)", self.setup_s, runtime.mask_impl)
        return runtime
