"""The backend protocol: what runs a model for a workload or a lab cell, whatever the model runs on (the engine,
transformers, a peer such as vLLM). A backend is made with its own settings, then:

  load(model_dir, device, dtype)        the model, and whatever the backend builds around it (an engine, graphs)
  add_steering_vectors(vectors)         named vectors that requests' Steer entries refer to (supports.steering)
  prepare(requests)                     host work for requests to come (constraints compiled), before any call
  generate(requests, stop_after_steps)  Results as they finish; each Request may carry a constraint, steering
                                        and collection, served where `supports` says so
  encode_batches(token_ids), encode(rows)  prefill only (classify, hidden states: supports.encode)
  close()                               gives the device back

A request a backend cannot serve (a constraint, steering or collection it does not support, a prompt it cannot
take) becomes an error Result, never an exception: one bad row never ends a job. The caller owns the rest:
which requests go together, timing and device syncs, counting tokens, writing rows. A backend may run a
generate call before returning or as its iterator is consumed (the engine's stream); a caller that times a
call consumes the iterator inside its clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from inferlab.errors import UnsupportedError
from inferlab.types import Request, Result


@dataclass(frozen=True)
class Supports:
    """What a backend serves beyond plain generation."""

    constraint: bool = False  # Request.constraint (each backend names the kind it takes)
    steering: bool = False  # Request.steering
    collect: bool = False  # Request.collect -> Result.activations
    encode: bool = False  # encode_batches / encode


class Backend:
    """The protocol, with the defaults of a backend that generates only. `name` is what rows call it."""

    name = ""
    supports = Supports()
    eos_token_ids: frozenset[int] = frozenset()  # set by load: a row's output ends at the first one (kept)
    kernels_visible = True  # False when the model runs in another process: a kernel profile here sees nothing

    def load(self, model_dir: str | Path, device: Any = None, dtype: Any = None) -> None:
        """device: a torch.device or its name ("auto", "cpu", "cuda:1"); dtype: a torch.dtype or its name
        ("auto", "bfloat16"); None: the backend's own settings decide."""
        raise NotImplementedError

    def add_steering_vectors(self, vectors: Any) -> None:
        """Register a SteeringVectors set: requests name its entries, Steer(layer, "name", scale)."""
        raise UnsupportedError(f"backend {self.name} does not steer; use one whose supports.steering is set")

    def prepare(self, requests: list[Request]) -> None:
        """Host work for every request that will be generated (e.g. each distinct constraint compiled)."""
        return None

    def generate(self, requests: Iterable[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        """One Result per request, in any order. `requests` is read once, in order, and may be a generator
        (the text workload's reads its input as the backend pulls). stop_after_steps: end after that many
        decode steps, every shape that matters unchanged (warm-up and profiling calls); a backend that cannot
        shorten a call (a constraint's length is its program's) runs it in full."""
        return iter([error_result(r, f"backend {self.name} does not generate") for r in requests])

    def encode_batches(self, token_ids: list[list[int]]) -> list[list[int]]:
        """The rows cut into this backend's batches: lists of row positions, every row once."""
        raise UnsupportedError(f"backend {self.name} does not encode; use one whose supports.encode is set")

    def encode(self, rows: list[list[int]]) -> Any:
        """One batch of token id lists, results on the host: classify [rows, labels] fp32 logits; hidden states
        {layer: [rows, hidden] fp32}."""
        raise UnsupportedError(f"backend {self.name} does not encode; use one whose supports.encode is set")

    def extra_metrics(self) -> dict[str, Any]:
        """What the backend knows of its own run (the engine's stats, whether a compiled forward ran); a
        `warnings` list, if present, holds findings for the reader."""
        return {}

    def close(self) -> None:
        return None

    def unsupported(self, request: Request) -> str | None:
        """What `request` asks that this backend does not serve, or None."""
        s = self.supports
        if request.constraint is not None and not s.constraint:
            return f"constrained requests do not run on backend {self.name}; use the inferlab engine"
        if request.steering and not s.steering:
            return f"steered requests do not run on backend {self.name}; use the inferlab engine or hf"
        if request.collect is not None and not s.collect:
            return f"requests that collect hidden states do not run on backend {self.name}; use inferlab or hf"
        return None

    def split_supported(self, requests: Iterable[Request]) -> tuple[list[Request], list[Result]]:
        """(the requests this backend serves, an error Result for each of the others)."""
        served, refused = [], []
        for request in requests:
            problem = self.unsupported(request)
            if problem is None:
                served.append(request)
            else:
                refused.append(error_result(request, problem))
        return served, refused


def error_result(request: Request, message: str, prompt_tokens: int = 0) -> Result:
    return Result(request.id, [], None, "error", prompt_tokens, error=message, metadata=request.metadata)


def finished_result(request: Request, token_ids: list[int], eos_token_ids: frozenset[int]) -> Result:
    """A batch backend's output row as a Result: cut after its first EOS (what follows is padding), text left
    to the caller."""
    prompt_tokens = len(request.prompt_ids or ())
    if not eos_token_ids.isdisjoint(token_ids):
        end = next(i for i, token in enumerate(token_ids) if token in eos_token_ids) + 1
        return Result(request.id, token_ids[:end], None, "eos", prompt_tokens, metadata=request.metadata)
    return Result(request.id, token_ids, None, "length", prompt_tokens, metadata=request.metadata)


def dtype_name(dtype: Any) -> str:
    """A torch.dtype or a name -> the name ("bfloat16", "auto")."""
    return str(dtype).removeprefix("torch.")
