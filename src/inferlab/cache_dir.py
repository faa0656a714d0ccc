"""Where inferlab keeps what it measured or built once and reuses (the engine's start-up cache, tokenizer
snapshots): `$INFERLAB_CACHE_DIR`, else `$XDG_CACHE_HOME/inferlab`, else `~/.cache/inferlab`."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "INFERLAB_CACHE_DIR"


def default_cache_dir() -> Path:
    """$INFERLAB_CACHE_DIR, else $XDG_CACHE_HOME/inferlab, else ~/.cache/inferlab."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "inferlab"
