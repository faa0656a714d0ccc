"""Per-molecule preparation of the conformer pipeline, in a process pool: SMILES -> canonical form and
template (chemistry/template.py) -> prompt token ids and the compiled ConstraintProgram (inferlab.constraints).

Compiling takes CPU time per molecule (the tokenizer runs over 44 sample fills per hole; figures in
docs/decisions.md), so `workers` processes prepare molecules ahead of the engine while it decodes
(and while it starts up). Each worker loads the checkpoint's tokenizer and builds its GrammarSet once (the
GrammarSet key is a fingerprint of the vocabulary, so programs compiled there pass the engine's check);
one worker's GrammarSet is also the engine's (`grammar_set()`), so the engine's process loads no tokenizer.
`workers=0` prepares in the calling process (tests, tiny jobs). Results come back as futures; a molecule
that cannot be prepared (bad SMILES, a dative bond, a tokenization the compiler refuses) is a
PreparedMolecule with `error`, never an exception.

The workers never import torch: programs and the GrammarSet are numpy arrays (inferlab.constraints), which
pickle by value (torch would send every tensor through its own shared-memory file descriptor, and thousands of
live programs would exhaust the process's limit), and a worker's start-up is its tokenizer and GrammarSet
alone. The pipeline starts these processes before its own process imports torch (seconds, slower with every
process importing it beside: docs/decisions.md, "The preparing processes import no torch"), so their start-up
overlaps it.

Not here: which molecules to prepare and in what order (generate.py), the requests.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.child_processes import spawn_pool
from inferlab.errors import InferlabError
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.template import ConformerTemplate, build_template
from inferlab.workloads.conformers.pipeline.pressure import segments_read_otherwise
from inferlab.workloads.conformers.pipeline.worker_pool import OptionalWorkerPool

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class PreparedMolecule:
    smiles: str  # as given (the cache key)
    template: ConformerTemplate | None
    prompt_ids: tuple[int, ...]
    program: Any  # ConstraintProgram, or None with `error`
    error: str | None
    seconds: float  # template + tokenisation + compilation, in the worker
    # per template segment: the other descriptor style writes it otherwise (pressure.segments_read_otherwise)
    read_otherwise: tuple[bool, ...]

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tokens_needed(self) -> int:
        """KV positions one conformer may use: the prompt plus the program's exact output bound."""
        return len(self.prompt_ids) + self.program.max_new_tokens


@dataclass
class _PreparerState:
    """What one preparing process holds for its whole life: the tokenizer, its GrammarSet, the profile."""

    tokenizer: Any
    grammar_set: Any
    profile_name: str


_STATE: _PreparerState | None = None  # one per worker process, set by its initializer (not configuration)


def _load_state(model_dir: str, profile_name: str) -> _PreparerState:
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.errors import InputError
    from inferlab.models.tokenizer_loading import shared_tokenizer

    tokenizer = shared_tokenizer(model_dir)
    if tokenizer is None:
        raise InputError(f"{model_dir} has no tokenizer files; conformer prompts and constraints need the tokenizer: "
                         "copy the checkpoint's tokenizer files into it (for a random model: inferlab model init "
                         "--tokenizer DIR)")
    return _PreparerState(tokenizer, grammar_set_for(tokenizer), profile_name)


def _init_worker(model_dir: str, profile_name: str) -> None:
    global _STATE
    _STATE = _load_state(model_dir, profile_name)


def prepare_with(state: _PreparerState, smiles: str) -> PreparedMolecule:
    """Template, prompt ids and program of one molecule (errors become PreparedMolecule.error)."""
    from inferlab.constraints.program import compile_program

    start = time.perf_counter()
    try:
        template = build_template(smiles, get_profile(state.profile_name))
        prompt_ids = tuple(template.prompt_ids(state.tokenizer))
        program = compile_program(template.segments, state.tokenizer, state.grammar_set)
    except InferlabError as e:
        return PreparedMolecule(smiles, None, (), None, str(e), time.perf_counter() - start, ())
    read_otherwise = segments_read_otherwise(smiles, template, state.profile_name)
    return PreparedMolecule(smiles, template, prompt_ids, program, None, time.perf_counter() - start, read_otherwise)


def _prepare_in_worker(smiles: str) -> PreparedMolecule:
    assert _STATE is not None, "the pool initializer did not run"
    return prepare_with(_STATE, smiles)


def _grammar_set_in_worker() -> Any:
    assert _STATE is not None, "the pool initializer did not run"
    return _STATE.grammar_set


class MoleculePreparer(OptionalWorkerPool):
    """Prepares molecules (by SMILES) in `workers` processes, or inline with workers=0; each distinct SMILES
    once while it is held (`submit` twice returns the same future until `forget`)."""

    def __init__(self, model_dir: str | Path, profile_name: str, workers: int) -> None:
        self.model_dir = str(model_dir)
        self.profile_name = profile_name
        self.workers = workers
        self._futures: dict[str, Future] = {}
        self._inline: _PreparerState | None = None
        if workers > 0:
            # spawn, not fork: the parent may hold CUDA state and tokenizer threads that a fork would copy;
            # the processes end with this one, however it ends (child_processes.py)
            self._pool = spawn_pool(workers, _init_worker, (self.model_dir, profile_name))

    @property
    def inline(self) -> bool:
        """Molecules are prepared in this process, each at its `submit`."""
        return self._pool is None

    def submit(self, smiles: str) -> Future:
        future = self._futures.get(smiles)
        if future is None:
            future = self._start(smiles)
            self._futures[smiles] = future
        return future

    def forget(self, smiles: str) -> None:
        """Drop a molecule no later row needs (bounds memory by the lookahead)."""
        self._futures.pop(smiles, None)

    def result(self, smiles: str) -> PreparedMolecule:
        """The prepared molecule (waits for it)."""
        return self.submit(smiles).result()

    def grammar_set(self) -> Future:
        """A Future of the GrammarSet the programs are compiled against (one worker's, every worker's being
        equal): the engine's constraint runtime takes it, so the engine's process needs no tokenizer. Ask
        before submitting molecules: a pool task, it would otherwise queue behind them."""
        if self._pool is not None:
            return self._pool.submit(_grammar_set_in_worker)
        if self._inline is None:
            self._inline = _load_state(self.model_dir, self.profile_name)
        done: Future = Future()
        done.set_result(self._inline.grammar_set)
        return done

    def _start(self, smiles: str) -> Future:
        if self._pool is not None:
            return self._pool.submit(_prepare_in_worker, smiles)
        if self._inline is None:
            self._inline = _load_state(self.model_dir, self.profile_name)
        future: Future = Future()
        future.set_result(prepare_with(self._inline, smiles))
        return future
