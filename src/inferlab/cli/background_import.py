"""A module imported in a background thread while the command does its other start-up work.

Importing torch takes seconds (its shared libraries; docs/decisions.md, "The preparing processes import no
torch"), and a conformer run's checks, the reading of its input and the start of its pools need none of it. The main thread's own `import` of the
module later waits for this one (the import system's per-module lock) and gets the module; an import that
failed here is tried again there, where its error is raised and reported as usual.
"""

from __future__ import annotations

import importlib
import threading


def import_in_background(module: str) -> threading.Thread:
    def load() -> None:
        try:
            importlib.import_module(module)
        except BaseException:  # noqa: BLE001 - the main thread's import raises it again, where it is reported
            pass

    thread = threading.Thread(target=load, name=f"inferlab-import-{module}", daemon=True)
    thread.start()
    return thread
