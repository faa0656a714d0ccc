"""The engine's first start-up steps in a background thread while the command does its other start-up work.

Importing the engine (torch with it) takes seconds (its shared libraries; docs/decisions.md, "The preparing
processes import no torch"), and so does a GPU's CUDA context; a conformer run's checks, the reading of its
input and the start of its pools need neither. `start_engine_in_background` imports the module that holds
`Engine` (the package `inferlab.engine` imports its names lazily: importing it alone loads no torch) and then
creates the device's context, which is process-wide: the engine's own start finds it made. The main thread's
own `import` of a module later waits for the thread's (the import system's per-module lock) and gets the
module; an import or a context that failed here is tried again there, where its error is raised and reported
as usual.
"""

from __future__ import annotations

import importlib
import threading
from typing import Callable

ENGINE_MODULE = "inferlab.engine.engine"  # where Engine is defined: what `from inferlab.engine import Engine` loads


def import_in_background(module: str, then: Callable[[], object] | None = None) -> threading.Thread:
    """Import `module` in a daemon thread, then call `then` (if given); failures stay silent there."""

    def load() -> None:
        try:
            importlib.import_module(module)
            if then is not None:
                then()
        except BaseException:  # noqa: BLE001 - the main thread's import (or start) raises it again, where it is reported
            pass

    thread = threading.Thread(target=load, name=f"inferlab-import-{module}", daemon=True)
    thread.start()
    return thread


def start_engine_in_background(device_name: str) -> threading.Thread:
    """The engine's module imported, then the CUDA context of `device_name` (the engine's --device) created."""

    def create_context() -> None:
        from inferlab.engine import resolve_device

        device = resolve_device(device_name)
        if device.type == "cuda":
            import torch

            torch.empty(1, device=device)  # the primary context: process-wide, whichever thread makes it

    return import_in_background(ENGINE_MODULE, create_context)
