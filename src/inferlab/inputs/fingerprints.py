"""Sets and maps of strings kept as 128-bit fingerprints: the per-line state a job cannot avoid (the ids an
input has used, the ids an output holds) at about 18 bytes a key (26 with a value), where a Python set or
dict of the strings costs 100-200 bytes a key.

A key is its BLAKE2b-128 digest. Two different strings share a digest with a probability of about
n^2 / 2^129 for n keys (1e-27 for a million), far below a disk's undetected error rate: membership is
exact in practice, and no input can be crafted to collide. New keys go to a small dict; when it holds
RECENT of them they are merged into sorted arrays (the digest's first 8 bytes as a sorted int64 column,
the other 8 beside it), where a lookup is a binary search. A bitmap of 16-64 bits per merged key (one bit
set per key) answers most lookups of a key not held without that search. Keys cannot be listed back,
only tested: a caller that must list ids re-reads their file.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

RECENT = 16_384  # keys kept in a dict before a merge into the sorted arrays (~2 MB of dict at most)
MIN_BITS_PER_KEY = 16  # the bitmap is rebuilt 4x larger below this (a lookup of a key not held then
# passes it about one time in 16 or fewer)
_HALVES = struct.Struct(">qq")


def fingerprint(key: str) -> bytes:
    """16 bytes standing for `key` (an id from a JSON escape may hold a lone surrogate: encoded as is)."""
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class FingerprintSet:
    def __init__(self, keys=()) -> None:
        self._recent: dict[bytes, int] = {}  # digest -> value (0 in a set)
        self._high = np.empty(0, np.int64)  # sorted
        self._low = np.empty(0, np.int64)  # beside _high
        self._values: np.ndarray | None = None  # beside _high, in a map
        self._bits = bytearray(1)  # bit (low & _mask) set for every merged key
        self._mask = 7
        for key in keys:
            self.add(key)

    def __len__(self) -> int:
        return len(self._high) + len(self._recent)

    def __bool__(self) -> bool:
        return bool(self._recent) or len(self._high) > 0

    def __contains__(self, key: object) -> bool:
        return bool(self) and isinstance(key, str) and self._find(fingerprint(key)) is not None

    def add(self, key: str) -> None:
        self._put(fingerprint(key), 0)

    def add_new(self, key: str) -> None:
        """add(key) for a key the caller knows is not held yet (one lookup fewer)."""
        self._insert(fingerprint(key), 0)

    def _put(self, digest: bytes, value: int) -> None:
        """Add a digest not yet held, or give a held one `value`."""
        if digest not in self._recent:
            at = self._merged_index(digest)
            if at is not None:
                if self._values is not None:
                    self._values[at] = value
                return
        self._insert(digest, value)

    def _insert(self, digest: bytes, value: int) -> None:
        self._recent[digest] = value
        if len(self._recent) >= RECENT:
            self._merge()

    def _find(self, digest: bytes) -> int | None:
        """The digest's value, or None when it is not held."""
        value = self._recent.get(digest)
        if value is not None:
            return value
        at = self._merged_index(digest)
        if at is None:
            return None
        return int(self._values[at]) if self._values is not None else 0

    def _merged_index(self, digest: bytes) -> int | None:
        high, low = _HALVES.unpack(digest)
        bit = low & self._mask
        if not self._bits[bit >> 3] >> (bit & 7) & 1:
            return None
        column = self._high
        at = int(column.searchsorted(high))
        while at < len(column) and column[at] == high:  # equal first halves: rare, compare the rest
            if self._low[at] == low:
                return at
            at += 1
        return None

    def _merge(self) -> None:
        """The recent digests into the sorted columns and the bitmap."""
        halves = np.frombuffer(b"".join(self._recent), dtype=">i8").astype(np.int64).reshape(-1, 2)
        order = np.argsort(halves[:, 0], kind="stable")
        high, low = halves[order, 0], halves[order, 1]
        at = self._high.searchsorted(high)
        self._high = np.insert(self._high, at, high)
        self._low = np.insert(self._low, at, low)
        if self._values is not None:
            values = np.fromiter(self._recent.values(), np.int64, len(self._recent))
            self._values = np.insert(self._values, at, values[order])
        self._recent = {}
        if (self._mask + 1) < MIN_BITS_PER_KEY * len(self._high):
            self._rebuild_bits(4 * MIN_BITS_PER_KEY * len(self._high))
        else:
            for bit in (low & self._mask).tolist():
                self._bits[bit >> 3] |= 1 << (bit & 7)

    def _rebuild_bits(self, at_least: int) -> None:
        size = 1 << max(3, (at_least - 1).bit_length())  # a power of two
        bits = np.zeros(size // 8, np.uint8)
        slots = self._low & (size - 1)
        np.bitwise_or.at(bits, slots >> 3, (1 << (slots & 7)).astype(np.uint8))
        self._bits, self._mask = bytearray(bits.tobytes()), size - 1


class FingerprintMap(FingerprintSet):
    """str -> int."""

    def __init__(self) -> None:
        super().__init__()
        self._values = np.empty(0, np.int64)

    def __setitem__(self, key: str, value: int) -> None:
        self._put(fingerprint(key), value)

    def set_new(self, key: str, value: int) -> None:
        """self[key] = value for a key the caller knows is not held yet."""
        self._insert(fingerprint(key), value)

    def get(self, key: str, default: int | None = None) -> int | None:
        value = self._find(fingerprint(key)) if self else None
        return default if value is None else value
