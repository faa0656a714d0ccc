"""The engine's side of steering and collection: the named vector sets, each request's intake check, and
the device tables made (or grown) when a request first needs them.

An engine that never sees a steered or collecting request allocates and captures nothing for them. The
first steered request allocates the steering table (rows x max_steered_layers vectors); the first
collecting request allocates collection buffers for its layers (and, for pool "all", its token cap); a
later request that needs more layers or a larger cap grows them (contents kept) and the collecting graphs
are dropped, to be captured again when next needed. A failure to allocate makes that request an error
Result naming the fix; the engine goes on.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from inferlab.engine.collection import ActivationBuffers, CollectPlan, resolve_collect
from inferlab.engine.steering import SteerEntry, SteeringTable, resolve_steering
from inferlab.engine.steering_vectors import SteeringVectors
from inferlab.engine.residual_hooks import HookTables
from inferlab.errors import ConfigError
from inferlab.models.config import ModelSpec
from inferlab.types import Request, SamplingParams

log = logging.getLogger(__name__)

Checked = tuple[list[SteerEntry], CollectPlan | None]


def wants_steering_or_collection(request: Request) -> bool:
    """Whether the request asks for steering or collection at all (an empty steering list is none)."""
    steering = request.steering
    no_steering = steering is None or (isinstance(steering, (tuple, list)) and len(steering) == 0)
    return not no_steering or request.collect is not None


@dataclass(eq=False)
class EngineResidualHooks:
    spec: ModelSpec
    dtype: torch.dtype
    device: torch.device
    rows: int
    max_steered_layers: int
    hook_tables: HookTables
    drop_graphs: Callable[[Callable[[Any], bool]], None]  # runner.drop_graphs(predicate on a Variant)
    named: dict[str, SteeringVectors] = field(default_factory=dict, init=False)  # entry name -> its registered set
    setup_s: float = field(default=0.0, init=False)  # table allocation and growth (graph captures: timed there)

    def add_vectors(self, vectors: SteeringVectors) -> None:
        """Register a named set; its entry names join the engine's namespace."""
        if not isinstance(vectors, SteeringVectors):
            raise ConfigError(f"add_steering_vectors takes a SteeringVectors (SteeringVectors.load(path)), "
                              f"not {type(vectors).__name__}")
        if vectors.hidden_size != self.spec.hidden_size:
            raise ConfigError(f"the steering vectors of {vectors.source} have {vectors.hidden_size} values; this "
                              f"model's hidden size is {self.spec.hidden_size}: use vectors made for this model")
        for name in vectors.names:
            known = self.named.get(name)
            if known is not None and not torch.equal(known.entry(name), vectors.entry(name)):
                raise ConfigError(f"a different steering vector named {name!r} is already registered (from "
                                  f"{known.source}); rename one of them")
        for name in vectors.names:
            self.named.setdefault(name, vectors)

    def check(self, request: Request, sampling: SamplingParams) -> Checked | str:
        """The request's checked steering entries and collection, or why they cannot run."""
        steering = request.steering if request.steering is not None else ()
        entries = resolve_steering(steering, self.named, self.spec.num_layers, self.spec.hidden_size, self.dtype,
                                   self.max_steered_layers)
        if isinstance(entries, str):
            return entries
        plan = None
        if request.collect is not None:
            plan = resolve_collect(request.collect, self.spec.num_layers, sampling.max_new_tokens)
            if isinstance(plan, str):
                return plan
        problem = self._ensure_tables(bool(entries), plan)
        return problem if problem is not None else (entries, plan)

    def _ensure_tables(self, steered: bool, plan: CollectPlan | None) -> str | None:
        tables = self.hook_tables
        t0 = time.perf_counter()
        try:
            if steered and tables.steering is None:
                tables.steering = SteeringTable(self.rows, self.spec.num_layers, self.rows * self.max_steered_layers,
                                              self.spec.hidden_size, self.dtype, self.device)
                log.info("steering table: %d vectors", self.rows * self.max_steered_layers)
            if plan is not None and (tables.collection is None or not tables.collection.covers(plan)):
                self._grow_collection(plan)
        except torch.cuda.OutOfMemoryError as e:
            return (f"no device memory left for the steering table or collection buffers ({e}); collect fewer "
                    "layers or tokens, or start the engine with a lower gpu_memory_fraction or max_slots")
        finally:
            self.setup_s += time.perf_counter() - t0
        return None

    def _grow_collection(self, plan: CollectPlan) -> None:
        tables = self.hook_tables
        if tables.collection is None:
            tables.collection = ActivationBuffers(self.rows, plan.layers, plan.max_tokens, self.spec.hidden_size,
                                                self.dtype, self.device)
        else:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # nothing in flight may still write the old buffers
            tables.collection = tables.collection.grown(plan)
            self.drop_graphs(lambda variant: variant.collecting)  # they captured the old buffers' addresses
        c = tables.collection
        log.info("collection buffers: layers %s, 'all' cap %d, %.1f MB", c.layers, c.cap, c.nbytes / 1e6)
