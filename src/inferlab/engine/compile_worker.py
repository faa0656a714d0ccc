"""A Triton compile worker process: compile jobs in, Triton's disk cache filled, one answer per job out.

    python -m inferlab.engine.compile_worker        (started by compile_processes.CompileProcesses)

It is a module run with `-m`, not a multiprocessing child: spawn and forkserver run the parent's main script
again in each child, which a user's script without a `__main__` guard would turn into more engines.

Protocol, on the standard streams, in length-prefixed pickles (compile_jobs.frame): the worker first writes
("ready", seconds of its start-up); the parent then writes CompileJobs, and the worker answers each with
("ok", seconds), ("unresolved", why) or ("error", "Type: message"). Its stdout carries only these (print()
and Triton's own output go to stderr). EOF on stdin ends it.
"""

from __future__ import annotations

import os
import sys
import time


def serve(jobs_in, answers_out) -> None:
    from inferlab.engine.compile_jobs import UnresolvedKernel, compile_job, read_frame, write_frame

    while True:
        try:
            job = read_frame(jobs_in)
        except UnresolvedKernel as e:  # the frame was read whole: the next one follows
            write_frame(answers_out, ("unresolved", str(e)))
            continue
        if job is None:
            return
        started = time.perf_counter()
        try:
            compile_job(job)
            answer = ("ok", time.perf_counter() - started)
        except Exception as e:  # the compile thread compiles it again and reports what the JIT raises
            answer = ("error", f"{type(e).__name__}: {str(e)[:300]}")
        write_frame(answers_out, answer)


def main() -> None:
    started = time.perf_counter()
    answers_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # anything printed goes to stderr, not into the protocol
    import torch  # noqa: F401  (the kernels' modules import it: paid before the first job, not in it)
    import triton.compiler  # noqa: F401

    from inferlab.engine.compile_jobs import write_frame

    write_frame(answers_out, ("ready", time.perf_counter() - started))
    serve(sys.stdin.buffer, answers_out)


if __name__ == "__main__":
    main()
