"""The progress bar of the row-writing commands: one tick per finished row, the output token rate since
the command started as its postfix (tqdm prints rate and ETA of the rows); before the first row, the
phase the run is in (starting the engine, ...) beside the bar's name."""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm


class TokenRateBar:
    def __init__(self, unit: str, **tqdm_options: Any) -> None:
        self.started = time.perf_counter()
        self.tokens = 0
        self._unit = unit
        self._options = tqdm_options
        self._bar: tqdm | None = None
        self._desc = tqdm_options.pop("desc", None)

    def start(self, total: int, *_: Any) -> None:
        """Open the bar over `total` rows (extra arguments of a caller's callback are ignored)."""
        self._bar = tqdm(total=total, unit=self._unit, dynamic_ncols=True, desc=self._desc, **self._options)

    def phase(self, what: str) -> None:
        """Show what the run is doing until its first row finishes."""
        if self._bar is not None and self._bar.n == 0:
            self._bar.set_description(f"{self._desc or ''} ({what})".lstrip())

    def row(self, row: dict) -> None:
        self.tokens += row["output_tokens"]
        rate = self.tokens / max(time.perf_counter() - self.started, 1e-9)
        self._bar.set_postfix_str(f"{rate:,.0f} tok/s", refresh=False)
        if self._bar.n == 0:
            self._bar.set_description(self._desc, refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
