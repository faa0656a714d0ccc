"""Plugin files: Python files that register extra scenarios or backends (register_scenario /
register_backend) for one run, e.g. a test-only scenario. The plan loads them in the parent before
validating, and the launcher passes them to every child, which loads them before running its cell."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from inferlab.errors import ConfigError


def load_plugin_files(paths: list[str] | tuple[str, ...]) -> None:
    """Import each file once per process (module name derived from its absolute path)."""
    for raw in paths:
        path = Path(raw).resolve()
        if not path.is_file():
            raise ConfigError(f"plugin file {raw} does not exist; give the path of a .py file that registers scenarios")
        name = "inferlab_plugin_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
