"""Seed 004's claims about classifying long texts with a Qwen2 classifier (A100, bitsandbytes INT8), held
against our rows of the seed-classify setting: the qwen2-cls preset, texts of 131-5,557 tokens, the
seeds' consecutive (unbucketed) batches, float16. Our int8 is torchao's weight-only int8, not
bitsandbytes' LLM.int8: the claims are about "int8 weights", and the verdict says what our int8 did.
The seeds' numbers are claims, quoted; the measured figures are this run's rows. Owns these claims, and the
acceptance of a backend's labels beside transformers' (label_findings: every classify row checked against
transformers, judged on the rows whose label the precision decides, scenarios/label_agreement.py).
"""

from __future__ import annotations

from typing import Any, Callable

from inferlab.bench.findings import Finding
from inferlab.bench.markdown import num, ratio, sig
from inferlab.bench.results import headline

SEED_CLASSIFIER = "qwen2-cls"
SEED_TEXTS = {"min_tokens": 131, "max_tokens": 5557, "bucket_by_length": False, "dtype": "float16"}


def _rows(rows: list[dict[str, Any]], **want: Any) -> list[dict[str, Any]]:
    want = {**SEED_TEXTS, **want}
    return [r for r in rows if r.get("scenario") == "classify" and r.get("model") == SEED_CLASSIFIER
            and all(r.get("config", {}).get(k) == v for k, v in want.items())]


def _figure(rows: list[dict[str, Any]]) -> tuple[float | None, str]:
    if not rows:
        return None, "no row"
    value = headline(rows[0])
    if value is None:
        return None, f"{rows[0].get('status')}: {str(rows[0].get('message', ''))[:60]}"
    return value, f"{num(value)} samples/s"


def _ratio(rows: list[dict[str, Any]], claim: str, top: dict[str, Any], bottom: dict[str, Any], names: tuple[str, str],
           criterion: str, holds: Callable[[float], bool], fails: Callable[[float], bool]) -> Finding:
    a, a_text = _figure(_rows(rows, **top))
    b, b_text = _figure(_rows(rows, **bottom))
    measured = f"{names[0]} {a_text}; {names[1]} {b_text}"
    if a is None or b is None:
        return Finding(claim, measured, criterion, "not measured")
    r = a / b
    verdict = "holds" if holds(r) else "does not hold" if fails(r) else "partly holds"
    return Finding(claim, f"{measured}: {ratio(r)}", criterion, verdict)


def classify_findings(rows: list[dict[str, Any]]) -> list[Finding]:
    eager, sdpa = {"attn_implementation": "eager"}, {"attn_implementation": "sdpa"}
    fp16, int8 = {"quantization": "none"}, {"quantization": "int8"}
    return [
        _ratio(rows, "int8 weights are ~2.5x faster than fp16 at batch 32 (seed 004, bitsandbytes: 107.21 vs 43.74 "
               "samples/s)", {**int8, **eager, "batch_size": 32}, {**fp16, **eager, "batch_size": 32}, ("int8", "fp16"),
               "int8/fp16 >= 2.0 (eager, batch 32; does not hold: <= 1.0)", lambda r: r >= 2.0, lambda r: r <= 1.0),
        _ratio(rows, "int8 weights are ~4x slower than fp16 at batch 1 (seed 004: 9.39 vs 38.71 samples/s)",
               {**int8, **eager, "batch_size": 1}, {**fp16, **eager, "batch_size": 1}, ("int8", "fp16"),
               "int8/fp16 <= 0.5 (eager, batch 1; does not hold: >= 1.0)", lambda r: r <= 0.5, lambda r: r >= 1.0),
        _ratio(rows, "fp16 throughput barely grows with the batch (seed 004: 38.71 samples/s at batch 1, 43.74 at 32)",
               {**fp16, **eager, "batch_size": 32}, {**fp16, **eager, "batch_size": 1}, ("batch 32", "batch 1"),
               "batch32/batch1 <= 1.5 (fp16, eager, consecutive batches; does not hold: >= 2.0)",
               lambda r: r <= 1.5, lambda r: r >= 2.0),
        _ratio(rows, "FlashAttention (PyTorch SDPA) is 1.5-2x faster on long texts (seed 004, expected, not measured "
               "there)", {**fp16, **sdpa, "batch_size": 32}, {**fp16, **eager, "batch_size": 32}, ("sdpa", "eager"),
               "sdpa/eager >= 1.5 (fp16, batch 32; does not hold: < 1.1)", lambda r: r >= 1.5, lambda r: r < 1.1),
    ]


def has_seed_classify_rows(rows: list[dict[str, Any]]) -> bool:
    return bool(_rows(rows))


# The share of decidable rows whose label must equal transformers': weights in the model dtype, quantized weights.
AGREEMENT_FULL_WEIGHTS = 0.995
AGREEMENT_QUANTIZED = 0.99


def _quantized(row: dict[str, Any]) -> str:
    """The row's quantized weights ("" for weights in the model dtype)."""
    c = row.get("config", {})
    weights = c.get("weights", "auto")
    return weights if weights != "auto" else "" if c.get("quantization", "none") == "none" else c["quantization"]


def _percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def label_checked(row: dict[str, Any]) -> bool:
    """A finished classify row whose labels were checked against transformers (check_texts > 0)."""
    return (row.get("scenario") == "classify" and row.get("status") == "ok"
            and row.get("metrics", {}).get("labels_decidable") is not None)


def label_findings(rows: list[dict[str, Any]]) -> list[Finding]:
    """One finding per classify row checked against transformers: its labels where the precision decides."""
    findings = []
    for row in filter(label_checked, rows):
        m = row["metrics"]
        quantized = _quantized(row)
        want = AGREEMENT_QUANTIZED if quantized else AGREEMENT_FULL_WEIGHTS
        c = row.get("config", {})
        weights = f", {quantized} weights" if quantized else ""
        claim = (f"{row.get('backend')}'s labels equal transformers' where the precision decides ({row.get('model')}, "
                 f"{c.get('dtype')}{weights}, texts={c.get('texts', 'synthetic')})")
        share, count = m.get("labels_agree_with_hf_decidable"), m["labels_decidable"]
        measured = (f"{_percent(share) if share is not None else '-'} of {count} decidable rows (transformers' "
                    f"margin > {sig(m['label_margin_tolerance'])}, from {c.get('dtype')} vs "
                    f"{m.get('label_tolerance_dtype')}); all {m['check_texts']} rows: {_percent(m['labels_agree_with_hf'])}")
        if m.get("accuracy") is not None:
            measured += f"; accuracy {_percent(m['accuracy'])} (transformers {_percent(m['hf_accuracy'])})"
        verdict = "not measured" if share is None else "holds" if share >= want else "does not hold"
        findings.append(Finding(claim, measured, f">= {_percent(want)} of decidable rows", verdict))
    return findings
