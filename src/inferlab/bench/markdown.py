"""Markdown and plain-text tables, and the number formats every report shares."""

from __future__ import annotations

from typing import Any


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    def cell(text: Any) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*(str(c) for c in row)) for row in rows]
    return "\n".join(out)


def num(value: Any, digits: int = 1) -> str:
    """1234.5 -> '1,234.5'; None -> '-'."""
    if value is None or not isinstance(value, (int, float)):
        return "-"
    if 0 < abs(value) < 1:
        return sig(value, 2)
    if abs(value) >= 100 or digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def sig(value: Any, digits: int = 3) -> str:
    """Significant digits, for small quantities (ms/iter, errors)."""
    if value is None or not isinstance(value, (int, float)):
        return "-"
    if value == 0:
        return "0"
    return f"{value:.{digits}g}"


def ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}x"


def pct(value: Any) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def short(text: Any, limit: int = 90) -> str:
    s = str(text or "")
    return s if len(s) <= limit else s[: limit - 3] + "..."
