"""How long this process has run: the part of a command's wall clock before its library call (the
interpreter's start, imports, argument parsing), which the call's own timers cannot see.

Linux only (`/proc/self/stat`'s start time in clock ticks since boot against `/proc/uptime`, ~10 ms
resolution); None elsewhere.
"""

from __future__ import annotations

import os


def process_age_s() -> float | None:
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            # the command name (field 2) may hold spaces: the fields after its closing parenthesis
            fields = stat.read().rpartition(")")[2].split()
            since_boot = float(uptime.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of the whole line: starttime
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, since_boot - started)
