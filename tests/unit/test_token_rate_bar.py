"""The progress bar's figures: a token rate and an ETA from the engine's token counts before any row is
written, error rows counted apart (they move neither the rate nor the ETA's work), and the bar drawn with
them (tqdm, into a string)."""

from __future__ import annotations

import io

import pytest

from inferlab.cli.token_rate_bar import BURST_DRAWN, RateFigures, TokenRateBar


def test_rate_and_eta_come_from_engine_tokens_before_any_row():
    f = RateFigures(total=80, generating_since=100.0)
    assert f.rate(101.0) is None and f.eta_s(101.0) is None and f.postfix(101.0, validity=True) == ""
    f.engine_tokens, f.rows_fed, f.tokens_bound = 500, 80, 80 * 600  # 80 rows running, each at most 600 tokens
    assert f.rate(105.0) == pytest.approx(100.0)
    assert f.eta_s(105.0) == pytest.approx((80 * 600 - 500) / 100.0)
    assert f.postfix(105.0, validity=True) == "ETA 07:55, 100 tok/s"


def test_error_rows_are_counted_apart_from_the_rate():
    f = RateFigures(total=80, generating_since=0.0, engine_tokens=1000, rows_fed=42, tokens_bound=42 * 500)
    before = (f.rate(10.0), f.eta_s(10.0))
    for _ in range(38):  # molecules too large for the model: error rows, no tokens
        f.errors += 1
    assert f.rate(10.0) == before[0] == 100.0
    assert f.eta_s(10.0) == pytest.approx((42 * 500 - 1000) / 100.0)  # 42 rows left to generate, not 80
    assert f.postfix(10.0, validity=True).endswith(", 38 error rows") and "valid" not in f.postfix(10.0, True)


def test_written_rows_scale_the_bound_of_the_rows_still_running():
    f = RateFigures(total=4, generating_since=0.0, engine_tokens=900, rows_fed=4, tokens_bound=4 * 400)
    f.ok, f.generated, f.ok_generated, f.row_tokens, f.row_bound = 2, 2, 2, 600, 800  # 75% of their bound
    # the two running rows: 75% of their 800, less the 300 they have already
    assert f.tokens_left() == pytest.approx(0.75 * 800 - 300) and f.eta_s(9.0) == pytest.approx(3.0)
    assert "valid 100.0%" in f.postfix(9.0, validity=True) and "valid" not in f.postfix(9.0, validity=False)
    text = RateFigures(total=4, generating_since=0.0, ok=1, generated=1, ok_generated=1, row_tokens=50)
    assert text.tokens_left() == pytest.approx(3 * 50)  # no bounds (inferlab generate): the rows' mean


def test_the_bar_shows_the_engine_rate_before_the_first_row():
    now = [0.0]
    stream = io.StringIO()
    bar = TokenRateBar("conf", validity=True, desc="conformers", clock=lambda: now[0], file=stream)
    bar.start(10)
    bar.phase("starting the engine")
    now[0] = 2.0
    bar.phase("generating")
    now[0] = 4.0
    bar.engine_tokens(400, 10, 10 * 100)
    text = stream.getvalue().replace("\r", "\n")
    assert "conformers: " in text.splitlines()[-1] and "200 tok/s" in text and "ETA 00:03" in text
    for _ in range(3):  # a burst inside the refresh interval is drawn whole, not only its first row
        bar.row({"status": "error", "generated": False, "output_tokens": 0})
    assert "3/10" in stream.getvalue().replace("\r", "\n").splitlines()[-1]
    assert "3 error rows" in stream.getvalue().replace("\r", "\n").splitlines()[-1]
    bar.close()


def test_a_long_burst_of_error_rows_is_drawn_at_the_refresh_rate_and_its_end_at_close():
    """A million bad lines once cost a redraw each (0.5 ms: ten minutes of a 1M-line run); a burst in one
    instant now draws a bounded number of times, and close draws its last state."""
    stream = io.StringIO()
    bar = TokenRateBar("row", clock=lambda: 5.0, file=stream)
    bar.start(10_000)
    for _ in range(10_000):
        bar.row({"status": "error", "output_tokens": 0})
    assert stream.getvalue().count("\r") <= BURST_DRAWN + 2
    bar.close()
    assert "10000/10000" in stream.getvalue().replace("\r", "\n").splitlines()[-1]
