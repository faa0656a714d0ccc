"""A test-only scenario, loaded as a plugin file by the launcher tests: each `behaviour` is one way a
benchmark cell can end (a result, an exception, a hang, a crash), so isolation is tested without any
sleep or fault in production code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.scenarios import Scenario, register_scenario
from inferlab.errors import UnsupportedError

BEHAVIOURS = ("ok", "raise", "unsupported", "no-kernel", "hang", "exit", "segv", "list", "setsid-hang", "setsid-leave")


def _setsid_grandchild(cell: Cell, ctx) -> None:
    """A grandchild in a session of its own (outside the cell's process group), ignoring SIGTERM."""
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    (ctx.run_dir / f"grandchild-{cell.key}.pid").write_text(str(child.pid))
    time.sleep(1.0)  # long enough for the launcher to see it


def run(cell: Cell, ctx) -> dict:
    behaviour = cell.config["behaviour"]
    if behaviour == "ok":
        ctx.warn("a warning from the cell")
        return {"value": float(cell.config["value"]), "spread": 0.01}
    if behaviour == "raise":
        raise ValueError("boom from the test scenario")
    if behaviour == "unsupported":
        raise UnsupportedError("this build cannot do that")
    if behaviour == "no-kernel":
        raise RuntimeError("No available kernel. Aborting execution.")
    if behaviour == "hang":
        # A grandchild too: the launcher must kill the whole process group.
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (ctx.run_dir / f"grandchild-{cell.key}.pid").write_text(str(child.pid))
        print("hanging now", flush=True)
        while True:
            time.sleep(1)
    if behaviour == "list":
        return [1.0, 2.0]
    if behaviour in ("setsid-hang", "setsid-leave"):
        _setsid_grandchild(cell, ctx)
        while behaviour == "setsid-hang":
            time.sleep(1)
        return {"value": 1.0}
    if behaviour == "exit":
        print("about to exit hard", flush=True)
        os._exit(3)
    if behaviour == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    raise AssertionError(behaviour)


register_scenario(Scenario(
    name="test-behaviour",
    description="test-only: ends the way `behaviour` says",
    knobs=(Knob("behaviour", str, "ok", "how the cell ends", choices=BEHAVIOURS),
           Knob("value", float, 1.0, "the figure an ok cell reports"),
           Knob("batch_size", int, 1, "a workload knob for reports"),
           Knob("estimate", float, 1.0, "what estimate_s says (for time-limit tests)")),
    run=run,
    estimate_s=lambda cell, accel: cell.config["estimate"],
    headline_metric="value",
    uses_model=False,
    default_timeout_s=30.0,
))
