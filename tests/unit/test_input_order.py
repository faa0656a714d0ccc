"""InputOrder: rows written in input order whatever order they finish in, nothing held longer than
needed, everything held written by flush(), and keys taken lazily (a generator of any length)."""

from __future__ import annotations

import itertools
import random

from inferlab.input_order import InputOrder


def test_rows_come_out_in_key_order_from_any_finishing_order():
    keys = [f"r{i}" for i in range(50)]
    finishing = keys[:]
    random.Random(3).shuffle(finishing)
    written: list[str] = []
    order = InputOrder(keys, written.append)
    for key in finishing:
        order.put(key, key)
        assert written == keys[:len(written)]  # always a prefix of the input order
    assert written == keys and order.held == 0


def test_a_row_is_written_as_soon_as_those_before_it_are():
    written: list[str] = []
    order = InputOrder(["a", "b", "c"], written.append)
    order.put("b", "B")
    assert written == [] and order.held == 1
    order.put("a", "A")
    assert written == ["A", "B"] and order.held == 0
    order.put("c", "C")
    assert written == ["A", "B", "C"]


def test_flush_writes_what_finished_in_order_and_skips_what_did_not():
    written: list[str] = []
    order = InputOrder(["a", "b", "c", "d", "e"], written.append)
    for key in ("e", "c", "d"):
        order.put(key, key)
    order.flush()
    assert written == ["c", "d", "e"] and order.held == 0


def test_keys_are_taken_lazily():
    written: list[int] = []
    order = InputOrder(itertools.count(), written.append)  # endless: never listed
    for k in (2, 1, 0):
        order.put(k, k)
    order.put(1000, 1000)
    order.flush()
    assert written == [0, 1, 2, 1000]


def test_an_unexpected_key_is_written_by_flush_not_lost():
    written: list[str] = []
    order = InputOrder(["a"], written.append)
    order.put("x", "x")
    order.put("a", "a")
    order.flush()
    assert written == ["a", "x"]
