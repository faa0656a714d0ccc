"""The progress bar of the row-writing commands: one tick per finished row, the output token rate since
the command started as its postfix (tqdm prints rate and ETA of the rows)."""

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

    def start(self, total: int, *_: Any) -> None:
        """Open the bar over `total` rows (extra arguments of a caller's callback are ignored)."""
        self._bar = tqdm(total=total, unit=self._unit, dynamic_ncols=True, **self._options)

    def row(self, row: dict) -> None:
        self.tokens += row["output_tokens"]
        rate = self.tokens / max(time.perf_counter() - self.started, 1e-9)
        self._bar.set_postfix_str(f"{rate:,.0f} tok/s", refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
