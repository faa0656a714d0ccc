"""Input units of the JSONL text workloads (classify, hidden states, generate): one unit per line, its
estimated tokens from the model's own tokenizer (one call per chunk of lines) plus the tokens the
workload will add (the new tokens of generation). A line the workload will refuse (broken JSON, a
missing text) costs one token: it only becomes an error row. Not here: running anything."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferlab.errors import InputError
from inferlab.jsonl_io import read_jsonl_records
from inferlab.scale.units import Unit, UnitPlan
from inferlab.workloads.batching import iter_chunks, tokenize_chunk
from inferlab.workloads.rows import RowText

# text_of: the line's data -> its text (str or RowText) or its token ids (list[int]); InputError if unusable.
TextOf = Callable[[dict[str, Any]], "str | RowText | list[int]"]
ERROR_ROW_TOKENS = 1.0


def read_jsonl_units(
    input_path: Path,
    tokenizer,
    text_of: TextOf,
    extra_tokens: Callable[[dict[str, Any]], float] = lambda data: 0.0,
    chunk_rows: int = 4096,
) -> UnitPlan:
    units: list[Unit] = []
    for chunk in iter_chunks(read_jsonl_records(input_path), chunk_rows):
        weights = [ERROR_ROW_TOKENS] * len(chunk)
        texts: dict[bool, list[tuple[int, str]]] = {True: [], False: []}  # add_special_tokens -> (slot, text)
        for slot, record in enumerate(chunk):
            if record.data is None:
                continue
            try:
                text = text_of(record.data)
            except InputError:
                continue
            extra = extra_tokens(record.data)
            if isinstance(text, list):
                weights[slot] = len(text) + extra
            elif isinstance(text, RowText):
                texts[text.add_special_tokens].append((slot, text.text))
                weights[slot] = extra
            else:
                texts[True].append((slot, text))
                weights[slot] = extra
        for special, items in texts.items():
            encoded = tokenize_chunk(tokenizer, [t for _, t in items], add_special_tokens=special)
            for (slot, _), ids in zip(items, encoded):
                weights[slot] += max(len(ids), 1)
        # keyed by the declared id: a repeat (an error row under its own line-<n> id) joins the first line's shard
        units.extend(Unit(record.line_no, record.key, float(w)) for record, w in zip(chunk, weights))
    return UnitPlan(units, header_lines=0, description=f"JSONL file {input_path}")


def load_tokenizer(model_dir: str):
    """The checkpoint's tokenizer, for estimating tokens on the coordinator (no weights are read)."""
    from inferlab.models.tokenizer_loading import load_hf_tokenizer

    from inferlab.workloads.hf_loading import check_model_dir

    return load_hf_tokenizer(check_model_dir(model_dir))
