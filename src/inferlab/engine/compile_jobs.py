"""A Triton compile as data: what the JIT hands its compiler, in a form another process can compile.

The JIT compiles `compile(src, target, options, _env_vars)` with src an ASTSource (the kernel, its
signature, constants and attributes). A CompileJob carries the same, with every JITFunction (the kernel, and
any passed as a constant) by reference: module, qualified name and the JIT's cache key (a hash of its source
and what it calls). The process that compiles it imports the kernel from its module, checks the key (another
source would be another kernel: UnresolvedKernel) and compiles into Triton's disk cache; the JIT in the
parent then finds the kernel there under the same cache key (same source, target, options, environment).
Frames: an 8-byte length, then the pickle (the worker's streams).
"""

from __future__ import annotations

import importlib
import io
import pickle
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO


class UnresolvedKernel(Exception):
    """The worker cannot import this JITFunction as the parent has it (a kernel made inside a function, or
    another version of its source): the parent compiles it itself."""


@dataclass(frozen=True)
class CompileJob:
    kernel: Any  # the JITFunction (pickled by reference)
    signature: dict[str, Any]
    constants: dict[tuple, Any]  # ASTSource.constants: argument paths -> values (constexpr, dtype, JITFunction, ...)
    attrs: dict[tuple, Any]
    target: Any  # triton's GPUTarget
    options: dict[str, Any]
    env_vars: dict[str, str] | None
    cache_dir: str  # Triton's disk cache folder of the parent


def job_for(src, target, options: dict, env_vars: dict | None, cache_dir: str) -> CompileJob:
    return CompileJob(src.fn, dict(src.signature), dict(src.constants), dict(src.attrs), target, dict(options),
                      env_vars, cache_dir)  # fmt: skip


def _is_jit_function(obj: Any) -> bool:
    from triton.runtime.jit import JITFunction

    return isinstance(obj, JITFunction)


class _JobPickler(pickle.Pickler):
    def persistent_id(self, obj: Any):
        if _is_jit_function(obj):
            return ("triton-jit", obj.fn.__module__, obj.fn.__qualname__, obj.cache_key)
        return None


class _JobUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any):
        tag, module, qualname, cache_key = pid
        if tag != "triton-jit":
            raise pickle.UnpicklingError(f"unknown reference {tag!r}")
        return resolve_kernel(module, qualname, cache_key)


def resolve_kernel(module: str, qualname: str, cache_key: str):
    """The JITFunction `module:qualname` of this process, if its cache key is the parent's."""
    if "<locals>" in qualname:
        raise UnresolvedKernel(f"{module}:{qualname} is made inside a function")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise UnresolvedKernel(f"{module}:{qualname} not importable ({e})") from None
    while not _is_jit_function(obj) and hasattr(obj, "fn"):  # triton.autotune / heuristics wrap the JITFunction
        obj = obj.fn
    if not _is_jit_function(obj) or obj.cache_key != cache_key:
        raise UnresolvedKernel(f"{module}:{qualname} here is not the parent's kernel")
    return obj


def dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _JobPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    return _JobUnpickler(io.BytesIO(data)).load()


def frame(obj: Any) -> bytes:
    """`obj` pickled, behind its length (raises what pickling raises)."""
    data = dumps(obj)
    return struct.pack("<Q", len(data)) + data


def write_frame(stream: BinaryIO, obj: Any) -> None:
    stream.write(frame(obj))
    stream.flush()


def read_frame(stream: BinaryIO) -> Any:
    """The next object, or None at EOF (the other side closed). A job whose kernel does not resolve raises
    UnresolvedKernel after the whole frame is read (the stream stays in step)."""
    header = stream.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("<Q", header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return loads(data)


def compile_job(job: CompileJob) -> None:
    """Compile `job` into its Triton cache folder (a cache hit when it is there already)."""
    import triton
    from triton import knobs
    from triton.compiler import ASTSource

    knobs.cache.dir = job.cache_dir
    src = ASTSource(job.kernel, job.signature, job.constants, job.attrs)
    triton.compile(src, target=job.target, options=job.options, _env_vars=job.env_vars)
