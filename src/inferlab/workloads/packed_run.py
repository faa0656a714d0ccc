"""How the engine's workloads (classify, hidden states) keep the device busy: input lines are read and
tokenised by a background thread a few chunks ahead, batches are packed by a token budget (no padding),
and results are written by another background thread, so between two batches the calling thread only
hands results over, packs the next batch and launches it.

Owns: the packing plan (consecutive rows of a chunk, in input order, while the batch's tokens stay within
the budget, its rows within `max_rows`, and its expected device time within `max_batch_latency_ms`; a row
over the budget runs alone), the reader thread (PrefetchedChunks) and the writer thread (BackgroundWriter).
Does not own: what a batch computes (the engine), validation of rows (rows.py), OOM back-off (oom.py).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from inferlab.errors import ConfigError
from inferlab.jsonl_io import InputRecord
from inferlab.workloads.oom import BackoffPolicy, BackoffRunner, BackoffStats
from inferlab.workloads.rows import RowPreparer, TextRow, error_record


@dataclass(frozen=True)
class PackedOptions:
    max_rows: int | None = None  # rows of one batch (None: the token budget alone decides)
    max_batch_latency_ms: float | None = None  # cap a batch's expected device time: smaller batches, lower p95
    chunk_rows: int = 256  # input lines tokenised in one call by the reader thread

    def __post_init__(self) -> None:
        if self.max_rows is not None and self.max_rows < 1:
            raise ConfigError(f"max rows per batch {self.max_rows} must be >= 1")
        if self.max_batch_latency_ms is not None and self.max_batch_latency_ms <= 0:
            raise ConfigError(f"--max-batch-latency-ms {self.max_batch_latency_ms} must be > 0")
        if self.chunk_rows < 1:
            raise ConfigError(f"chunk_rows={self.chunk_rows} must be >= 1")


def plan_packed_batches(rows: Iterable[TextRow], max_tokens: int, options: PackedOptions,
                        predict_s: Callable[[Sequence[int]], float | None]) -> Iterator[list[TextRow]]:
    """Batches of consecutive rows (module docstring). `predict_s(lengths)`: the engine's expected device time
    of a batch (None before it timed one); read as each batch is cut, so the cap follows the measured rate."""
    limit_s = None if options.max_batch_latency_ms is None else options.max_batch_latency_ms / 1000.0
    current: list[TextRow] = []
    tokens = 0
    for row in rows:
        n = len(row.token_ids)
        if current:
            full = tokens + n > max_tokens or (options.max_rows is not None and len(current) >= options.max_rows)
            if not full and limit_s is not None:
                expected = predict_s([len(r.token_ids) for r in current] + [n])
                full = expected is not None and expected > limit_s
            if full:
                yield current
                current, tokens = [], 0
        current.append(row)
        tokens += n
    if current:
        yield current


def packed_cost(rows: list[TextRow]) -> int:
    """Memory cost of a packed batch (the OOM back-off's unit): its tokens."""
    return sum(len(r.token_ids) for r in rows)


_DONE = object()


class PrefetchedChunks:
    """(rows, error records) per chunk of input lines, prepared by a background thread up to `depth` chunks
    ahead; rows carry their token ids as int64 numpy arrays (packing then concatenates without touching Python
    ints). An exception in the thread is raised where the chunks are read. Use as a context manager."""

    def __init__(self, preparer: RowPreparer, records: Iterable[InputRecord], chunk_rows: int, depth: int = 4) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(preparer, records, chunk_rows), daemon=True,
                                        name="inferlab-rows")
        self._thread.start()

    def _produce(self, preparer: RowPreparer, records: Iterable[InputRecord], chunk_rows: int) -> None:
        try:
            for rows, errors in preparer.chunks(records, chunk_rows):
                for row in rows:
                    row.token_ids = np.asarray(row.token_ids, dtype=np.int64)
                if not self._put((rows, errors)):
                    return
            self._put(_DONE)
        except BaseException as e:  # noqa: BLE001 - handed to the reading thread
            self._put(e)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[tuple[list[TextRow], list[dict]]]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> "PrefetchedChunks":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class BackgroundWriter:
    """Runs `submit`ted callables in order on one background thread (the only thread that touches the output
    files). An exception there stops it and is raised by the next `submit` or by `close`."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=64)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._consume, daemon=True, name="inferlab-writer")
        self._thread.start()

    def _consume(self) -> None:
        while True:
            task = self._queue.get()
            if task is _DONE:
                return
            if self._error is None:
                try:
                    task()
                except BaseException as e:  # noqa: BLE001 - raised in the submitting thread
                    self._error = e

    def submit(self, task: Callable[[], None]) -> None:
        self._raise()
        self._queue.put(task)

    def close(self) -> None:
        """Wait for every submitted task; raise the first error."""
        if self._thread.is_alive():
            self._queue.put(_DONE)
            self._thread.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def __enter__(self) -> "BackgroundWriter":
        return self

    def __exit__(self, exc_type, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:  # the run already failed: finish writing what was done, keep the first error
            self._queue.put(_DONE)
            self._thread.join()


def run_packed(
    chunks: Iterable[tuple[list[TextRow], list[dict]]],
    writer: BackgroundWriter,
    max_tokens: int,
    options: PackedOptions,
    predict_s: Callable[[Sequence[int]], float | None],
    run_rows: Callable[[list[TextRow]], Sequence[Any]],
    on_results: Callable[[list[TextRow], Sequence[Any], float], None],
    on_error: Callable[[dict], None],
    backoff: BackoffPolicy,
    on_chunk_end: Callable[[], None] | None = None,
) -> BackoffStats:
    """The calling thread's loop: per chunk, its error records and then its packed batches, each run by
    `run_rows` (one result per row) under the OOM back-off. `on_results(rows, results, seconds)` (seconds: the
    batch's start to its results on the host), `on_error(record)` and `on_chunk_end()` run on the writer."""
    runner: BackoffRunner[TextRow, Any] = BackoffRunner(
        run_batch=run_rows,
        cost=packed_cost,
        on_done=lambda rows, results, seconds: writer.submit(partial(on_results, rows, results, seconds)),
        on_oom_row=lambda row, message: writer.submit(
            partial(on_error, error_record(row.id, message, tokens=len(row.token_ids)))),
        policy=backoff,
    )
    for rows, errors in chunks:
        for record in errors:
            writer.submit(partial(on_error, record))
        runner.run(plan_packed_batches(rows, max_tokens, options, predict_s))
        if on_chunk_end is not None:
            writer.submit(on_chunk_end)
    return runner.stats
