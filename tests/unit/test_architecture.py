"""The package's shape: the import-linter contracts of pyproject.toml (layers import downward only; nothing
outside the engine imports its submodules; the conformer workload's pipeline and evaluation build on its
chemistry, never on each other) and no import cycle between two modules of src/inferlab.

Imports inside functions and under TYPE_CHECKING count: a lazy import still ties its module to the other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grimp

import inferlab.engine

REPO = Path(__file__).resolve().parents[2]


def test_the_import_linter_contracts_hold():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # the inferlab this suite imports
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    done = subprocess.run([sys.executable, "-c", code, str(REPO / "pyproject.toml"), "--no-cache"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of modules (each module imports the others, directly or not)."""
    seen: set[str] = set()
    cycles = []
    for module in sorted(graph.modules):
        if module in seen:
            continue
        group = graph.find_upstream_modules(module) & graph.find_downstream_modules(module)
        if group:
            members = sorted(group | {module})
            seen.update(members)
            cycles.append(members)
    return cycles


def _describe(graph: grimp.ImportGraph, members: list[str]) -> str:
    edges = [f"  {a} -> {b}" for a in members for b in members if graph.direct_import_exists(importer=a, imported=b)]
    return "\n".join([f"cycle of {len(members)} modules:", *edges])


def test_no_import_cycle_between_modules():
    graph = grimp.build_graph("inferlab", cache_dir=None)
    cycles = import_cycles(graph)
    assert not cycles, "\n".join(_describe(graph, members) for members in cycles)


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from cyclic import b\n")
    (package / "b.py").write_text("import cyclic.c\n")
    (package / "c.py").write_text("from cyclic.a import f\n")
    (package / "d.py").write_text("import cyclic.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyclic", cache_dir=None)
    assert import_cycles(graph) == [["cyclic.a", "cyclic.b", "cyclic.c"]]


def test_every_public_name_of_the_engine_resolves_and_is_documented():
    documented = (REPO / "docs" / "engine.md").read_text().split("## Public names", 1)[1].split("\n## ", 1)[0]
    for name in inferlab.engine.__all__:
        assert getattr(inferlab.engine, name) is not None
        assert f"`{name}`" in documented, f"docs/engine.md 'Public names' does not list {name}"
    assert set(inferlab.engine.__all__) <= set(dir(inferlab.engine))
