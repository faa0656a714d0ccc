"""Named hole grammars, written in the regex subset that grammar.py compiles (literals, [..] classes,
( | ), ?, *, +, {m,n}). Names are the contract between workloads and the compiler.

Coordinates follow ../shared/docs/CONFORMERS.md: Angstrom values truncated toward zero, |value| < 1000,
no leading zeros, never `-0.0000` (fixed4) or `-0` (stripped); three values joined by commas, no spaces.
"""

from __future__ import annotations

_INT = "(0|[1-9][0-9]{0,2})"
_NONZERO_INT = "[1-9][0-9]{0,2}"
# fixed4: exactly four decimals; a negative value must not be all zeros.
_NEG_SMALL_FIXED4 = "0\\.([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
FIXED4_VALUE = f"({_INT}\\.[0-9]{{4}}|-({_NONZERO_INT}\\.[0-9]{{4}}|{_NEG_SMALL_FIXED4}))"
# stripped: trailing zeros and a trailing '.' removed, so decimals (if any) end in a non-zero digit.
STRIPPED_VALUE = f"(0|-?{_NONZERO_INT}|-?{_INT}\\.[0-9]{{0,3}}[1-9])"

GRAMMARS: dict[str, str] = {
    "coord3-fixed4": f"{FIXED4_VALUE},{FIXED4_VALUE},{FIXED4_VALUE}",
    "coord3-stripped": f"{STRIPPED_VALUE},{STRIPPED_VALUE},{STRIPPED_VALUE}",
}
