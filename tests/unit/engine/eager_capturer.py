"""graphs.Capturer without CUDA, for the CUDA-graph path's tests on CPU: `capture` runs the step once inside
`around_warmup` (as the real capture's warm-up run does, whose outputs stand) and returns a 'graph' whose
replay runs the step again, eagerly. `count` says how many graphs were captured."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace


class EagerCapturer:
    def __init__(self) -> None:
        self.count, self.capture_s, self.warmup_s = 0, 0.0, 0.0

    def capture(self, fn, around_warmup=None):
        with around_warmup() if around_warmup is not None else nullcontext():
            fn()
        self.count += 1
        return SimpleNamespace(replay=fn, reset=lambda: None)

    def close(self) -> None:
        pass
