"""The end of an Engine's life: what close() releases, what a closed engine answers, and the allocator calls
that hand freed memory back to the device.

An Engine owns its device memory through a tree without reference cycles (engine -> runner -> weights, KV
cache, the row features (rows, constraint runtime, steering and collection tables), graphs; engine ->
snapshot buffers), so dropping the
last reference frees it at once. `Engine.close()` frees it even while references to the engine remain, then
empties PyTorch's caches so the next engine's budget sees the memory. After close the RELEASED attributes
raise EngineClosedError; config, spec, plan, stats, device and dtype stay readable.
"""

from __future__ import annotations

import torch

from inferlab.errors import EngineClosedError

RELEASED = ("runner", "tokenizer", "_snapshots")  # Engine attributes close() drops


def closed_error(what: str) -> EngineClosedError:
    return EngineClosedError(
        f"{what} on a closed Engine: close() (or the end of its `with Engine(...)` block) released its weights, "
        "KV cache and graphs; make a new Engine(EngineConfig(...)) to generate again, or make the calls "
        "inside the `with` block"
    )


def release_cached_memory(device: torch.device) -> None:
    """Return the memory PyTorch's allocators cache to the device (CUDA) and the OS (pinned host buffers).
    Other live engines are unaffected: only unused cached blocks are released."""
    if device.type != "cuda":
        return
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    host_empty_cache = getattr(torch._C, "_host_emptyCache", None)  # pinned staging and snapshot buffers
    if host_empty_cache is not None:
        host_empty_cache()
