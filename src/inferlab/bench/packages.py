"""Parent-side availability checks for optional packages (flash-attn, torchao...): whether a module can
be found, without importing it (the parent never imports torch). A module that is found may still fail
to import in the cell (built for another torch); the cell then reports `unavailable` itself."""

from __future__ import annotations

import importlib.util


def missing_package(module: str, needed_for: str, install_hint: str) -> str | None:
    """None when `module` can be found; otherwise the reason a cell needing it cannot run."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return None
    return f"{needed_for} needs the {module} package, which is not installed here ({install_hint})"
