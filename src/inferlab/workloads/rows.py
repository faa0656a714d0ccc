"""Input lines -> tokenised rows or error records, one chunk at a time.

Owns: per-row validation shared by the transformers-backed workloads (missing or empty text, too many
tokens: an error record or, when asked, truncation, said in the row; broken JSON and repeated ids arrive
as error records from jsonl_io), skipping ids finished by an earlier run, and remembering input order.
Tokenises a whole chunk in one call (batching.tokenize_chunk). Does not own: how a workload turns a
record into text (it passes `text_of`), batching or running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Container, Iterable, Iterator

from inferlab.errors import ConfigError, InputError
from inferlab.jsonl_io import InputRecord
from inferlab.workloads.batching import BatchLimits, iter_chunks, padded_tokens, plan_batches, tokenize_chunk


@dataclass
class TextRow:
    """One valid input row, tokenised."""

    position: int  # 0-based input order among all lines read
    id: str
    token_ids: list[int]  # after truncation, if any
    original_tokens: int  # before truncation

    @property
    def truncated(self) -> bool:
        return len(self.token_ids) < self.original_tokens


@dataclass(frozen=True)
class LengthPolicy:
    """Rows over `max_tokens` become error records, or with `truncate` keep their first `max_tokens`
    tokens. `limit_hint` finishes the error message with what the user can change."""

    max_tokens: int
    truncate: bool = False
    limit_hint: str = ""

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError(f"maximum length {self.max_tokens} must be >= 1")


@dataclass(frozen=True)
class RowText:
    """What `text_of` may return instead of a plain string: text that must be tokenised without the
    tokenizer's special tokens (a rendered chat template already holds them)."""

    text: str
    add_special_tokens: bool = True


def error_record(row_id: str, message: str, **extra: Any) -> dict[str, Any]:
    """The error row every workload writes: the run goes on, the row is marked done."""
    return {"id": row_id, "status": "error", "error": message, **extra}


def text_field_getter(field_name: str) -> Callable[[dict[str, Any]], str]:
    """text_of for workloads that read one text field; raises InputError for a missing or empty one."""

    def text_of(data: dict[str, Any]) -> str:
        value = data.get(field_name)
        if value is None:
            texts = [k for k, v in data.items() if k != "id" and isinstance(v, str)]
            fix = f"--text-field {texts[0]}" if len(texts) == 1 else "--text-field NAME"
            raise InputError(f"field {field_name!r} is missing; name the field that holds the text with {fix}")
        if not isinstance(value, str):
            raise InputError(f"field {field_name!r} is a {type(value).__name__}, not a string")
        if not value.strip():
            raise InputError(f"field {field_name!r} is empty")
        return value

    return text_of


class RowPreparer:
    """Validates and tokenises input records chunk by chunk; keeps the ids in input order."""

    def __init__(
        self,
        tokenizer,
        text_of: Callable[[dict[str, Any]], str | RowText],
        length: LengthPolicy,
        skip_ids: Container[str] = frozenset(),  # ids of rows finished by an earlier run
        add_special_tokens: bool = True,
        on_skip: Callable[[int], None] | None = None,  # told of each row finished by an earlier run
    ) -> None:
        self._tokenizer = tokenizer
        self._on_skip = on_skip
        self._text_of = text_of
        self._length = length
        self._skip_ids = skip_ids
        self._add_special_tokens = add_special_tokens
        self._position: dict[str, int] = {}  # id -> 0-based input position
        self.ids_in_order: list[str] = []  # every id read (done, valid or error), for restoring order
        self.skipped = 0  # rows finished by an earlier run

    def chunks(self, records: Iterable[InputRecord], chunk_rows: int) -> Iterator[tuple[list[TextRow], list[dict]]]:
        """Yield (valid rows, error records) per chunk of `chunk_rows` input lines."""
        for chunk in iter_chunks(records, chunk_rows):
            yield self.prepare(chunk)

    def prepare(self, records: list[InputRecord]) -> tuple[list[TextRow], list[dict]]:
        errors: list[dict] = []
        pending: list[tuple[InputRecord, str | RowText]] = []
        for rec in records:
            row_id = rec.id  # unique (read_jsonl_records: a repeated id is an error record under its own id)
            self._position[row_id] = len(self.ids_in_order)
            self.ids_in_order.append(row_id)
            if row_id in self._skip_ids:
                self.skipped += 1
                if self._on_skip:
                    self._on_skip(1)
                continue
            if rec.error is not None:
                errors.append(error_record(row_id, rec.error, line=rec.line_no))
                continue
            try:
                pending.append((rec, self._text_of(rec.data)))
            except InputError as e:
                errors.append(error_record(row_id, f"line {rec.line_no}: {e}", line=rec.line_no))
        token_ids = self._tokenize(pending)
        rows: list[TextRow] = []
        for (rec, _), ids in zip(pending, token_ids):
            row = self._length_checked(rec, ids, errors)
            if row is not None:
                rows.append(row)
        return rows, errors

    def _tokenize(self, pending: list[tuple[InputRecord, str | RowText]]) -> list[list[int]]:
        """One tokenizer call per special-tokens setting in this chunk; results in `pending` order."""
        texts = [t if isinstance(t, RowText) else RowText(t, self._add_special_tokens) for _, t in pending]
        out: list[list[int]] = [[] for _ in texts]
        for flag in (True, False):
            positions = [i for i, t in enumerate(texts) if t.add_special_tokens is flag]
            encoded = tokenize_chunk(self._tokenizer, [texts[i].text for i in positions], add_special_tokens=flag)
            for i, ids in zip(positions, encoded):
                out[i] = ids
        return out

    def _length_checked(self, rec: InputRecord, ids: list[int], errors: list[dict]) -> TextRow | None:
        n = len(ids)
        limit = self._length.max_tokens
        if n == 0:
            errors.append(error_record(rec.id, f"line {rec.line_no}: the text tokenises to no tokens", line=rec.line_no))
            return None
        if n > limit and not self._length.truncate:
            hint = f"; {self._length.limit_hint}" if self._length.limit_hint else ""
            message = f"line {rec.line_no}: {n} tokens, over the maximum of {limit}{hint}"
            errors.append(error_record(rec.id, message, line=rec.line_no, tokens=n))
            return None
        return TextRow(self._position[rec.id], rec.id, ids[:limit], n)


def plan_row_batches(rows: list[TextRow], limits: BatchLimits, extra_tokens: int = 0) -> list[list[TextRow]]:
    """Length-sorted, dynamically padded batches of rows (see batching.plan_batches); `extra_tokens` per
    row count against the token budget too (the new tokens of generation)."""
    lengths = [len(r.token_ids) + extra_tokens for r in rows]
    return [[rows[i] for i in batch] for batch in plan_batches(lengths, limits)]


def padded_cost(rows: list[TextRow]) -> int:
    """Memory cost of a forward over `rows`: rows x longest row, in tokens."""
    return padded_tokens([len(r.token_ids) for r in rows])
