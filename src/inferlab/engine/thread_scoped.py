"""A thread-local attribute set while inside a `with` block, restored on the way out (nesting-safe)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def scoped(local: threading.local, name: str, value: Any) -> Iterator[None]:
    """Inside, `local.<name>` is `value` in the calling thread; after, what it was (None when unset)."""
    before = getattr(local, name, None)
    setattr(local, name, value)
    try:
        yield
    finally:
        setattr(local, name, before)
