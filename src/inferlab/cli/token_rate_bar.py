"""The progress bar of the row-writing commands (conformers generate, demo, generate): one tick per row
written, and beside it the output token rate and an ETA from tokens, not from finished rows, so the bar
moves from the engine's first decode chunk (`engine_tokens`: its counts, running rows included) and a
burst of error rows (molecules too large, bad lines) neither inflates a rate nor shortens the ETA; error
rows are counted apart. Before the first tokens, the phase the run is in (starting the engine, ...)
beside the bar's name. `RateFigures` is what the bar shows, computed from counts and a clock (tested
alone); `TokenRateBar` draws it with tqdm."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
REFRESH_S = 0.2  # the engine reports every sync point; the bar is redrawn at most this often
BURST_DRAWN = 16  # error rows drawn at once within one refresh interval (a short burst is shown whole; a
# long one, a million bad lines, at the refresh rate: a draw costs far more than a row)


@dataclass
class RateFigures:
    total: int = 0  # rows this run writes
    ok: int = 0
    errors: int = 0
    generated: int = 0  # rows the engine generated (ok, or an output the checks rejected)
    ok_generated: int = 0  # the ok ones among them (validity)
    row_tokens: int = 0  # output tokens of the generated rows written
    row_bound: int = 0  # their token bound, where the workload knows it (0: unknown)
    engine_tokens: int = 0  # output tokens the engine reported so far (running rows included)
    rows_fed: int = 0  # requests handed to the engine so far, and their token bound (engine_tokens' caller)
    tokens_bound: int = 0
    generating_since: float | None = None  # when the engine started generating (the rate's clock)

    @property
    def tokens(self) -> int:
        return max(self.engine_tokens, self.row_tokens)

    def rate(self, now: float) -> float | None:
        """Output tokens per second since generation began; None before the first token."""
        if not self.tokens or self.generating_since is None or now <= self.generating_since:
            return None
        return self.tokens / (now - self.generating_since)

    def tokens_left(self) -> float | None:
        """The output tokens the unwritten rows still need. With bounds: the bound of the requests handed to
        the engine and not written yet, scaled by what the written rows used of theirs, less what the running
        rows have already, plus as much per row not handed over yet. Without: the mean of the rows written
        per row left, less the running rows' tokens. Error rows need none; rows not known to fail count."""
        running = max(0, self.engine_tokens - self.row_tokens)
        unwritten = self.total - self.ok - self.errors
        if self.rows_fed and self.tokens_bound:
            used = self.row_tokens / self.row_bound if self.row_bound else 1.0  # of its bound, a row takes
            in_flight_rows = max(0, self.rows_fed - self.generated)
            waiting = max(0, unwritten - in_flight_rows)
            per_row_bound = self.tokens_bound / self.rows_fed
            return max(0.0, used * (self.tokens_bound - self.row_bound) - running) + waiting * used * per_row_bound
        if self.generated:
            return max(0.0, unwritten * self.row_tokens / self.generated - running)
        return None

    def eta_s(self, now: float) -> float | None:
        """Seconds left at the current token rate."""
        rate, left = self.rate(now), self.tokens_left()
        return None if rate is None or left is None else left / rate

    def postfix(self, now: float, validity: bool) -> str:
        parts = []
        eta = self.eta_s(now)
        if eta is not None:
            parts.append(f"ETA {tqdm.format_interval(eta)}")
        rate = self.rate(now)
        if rate is not None:
            parts.append(f"{rate:,.0f} tok/s")
        if validity and self.generated:
            parts.append(f"valid {100.0 * self.ok_generated / self.generated:.1f}%")
        if self.errors:
            parts.append(f"{self.errors:,} error row{'s' if self.errors != 1 else ''}")
        return ", ".join(parts)


class TokenRateBar:
    """`start`, `phase`, `row`, `engine_tokens` are the workload's callbacks; `validity`: show the valid
    share of the generated rows (conformers)."""

    def __init__(self, unit: str, validity: bool = False, desc: str | None = None, clock=time.perf_counter,
                 **tqdm_options: Any) -> None:
        self.started = clock()
        self._options = tqdm_options
        self.figures = RateFigures(generating_since=self.started)
        self._unit, self._validity, self._desc, self._clock = unit, validity, desc, clock
        self._bar: tqdm | None = None
        self._drawn = 0.0
        self._forced = 0  # draws within the refresh interval that it did not wait for
        self._phase_shown = False

    def start(self, total: int, *_: Any) -> None:
        """Open the bar over `total` rows (extra arguments of a caller's callback are ignored)."""
        self.figures.total = total
        self._bar = tqdm(total=total, unit=self._unit, dynamic_ncols=True, desc=self._desc, bar_format=BAR_FORMAT,
                         **self._options)

    def phase(self, what: str) -> None:
        """Show what the run is doing until its first tokens; "generating" starts the rate's clock."""
        if what == "generating":
            self.figures.generating_since = self._clock()
        if self._bar is not None and not self.figures.tokens:
            self._phase_shown = True
            self._bar.set_description(f"{self._desc or ''} ({what})".lstrip())

    def engine_tokens(self, tokens: int, rows_fed: int = 0, tokens_bound: int = 0) -> None:
        """The engine's output tokens so far (cumulative) and, where known, the requests handed to it."""
        f = self.figures
        f.engine_tokens, f.rows_fed, f.tokens_bound = tokens, rows_fed, tokens_bound
        self._draw(force=False)

    def row(self, row: dict) -> None:
        f = self.figures
        ok = row["status"] == "ok"
        f.ok += ok
        f.errors += not ok
        if row.get("generated", ok):  # conformer rows say; a text row that failed never ran
            f.generated += 1
            f.ok_generated += ok
            f.row_tokens += row["output_tokens"]
            f.row_bound += row.get("tokens_bound", 0)
        if self._bar is not None:
            self._bar.n += 1
        self._draw(force=not ok)  # error rows come in bursts (molecules that cannot run): show a short one whole

    def _draw(self, force: bool) -> None:
        if self._bar is None:
            return
        now = self._clock()
        if now - self._drawn >= REFRESH_S:
            self._forced = 0
        elif not force or self._forced >= BURST_DRAWN:
            return
        else:
            self._forced += 1
        self._drawn = now
        if self._phase_shown and self.figures.tokens:
            self._phase_shown = False
            self._bar.set_description(self._desc, refresh=False)
        self._bar.set_postfix_str(self.figures.postfix(now, self._validity), refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._drawn = -REFRESH_S  # the last state, whatever was drawn just before
            self._draw(force=True)
            self._bar.close()
