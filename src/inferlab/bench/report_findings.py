"""The report's "Do the seeds' findings hold?" section: one table per GPU of the seed claims about generation
and attention kernels (findings.py) and, with classify rows of seed 004's settings, of seed 004's
(findings_classify.py); and its "Labels beside transformers'" section: each checked classify row's labels where
the precision decides (findings_classify.label_findings)."""

from __future__ import annotations

from typing import Any

from inferlab.bench.findings import SEED_KERNEL_SHAPE, SEED_MODEL, seed_findings
from inferlab.bench.findings_classify import classify_findings, has_seed_classify_rows, label_checked, label_findings
from inferlab.bench.markdown import md_table
from inferlab.bench.results import group_rows, gpu_of


def render_section(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["## Do the seeds' findings hold?", ""]
    relevant = [r for r in rows if r.get("model") == SEED_MODEL or r.get("scenario") == "attention-kernels"]
    has_generate_seed = any(r.get("model") == SEED_MODEL for r in rows) or any(
        all(r.get("config", {}).get(k) == v for k, v in SEED_KERNEL_SHAPE.items()) for r in rows)
    if not has_generate_seed and not has_seed_classify_rows(rows):
        return lines + ["Not measured here: these rows hold no seed settings (the seed-* presets: llama-380m, "
                        "[4,16,2048,64] bf16 causal, the qwen2-cls texts of seed-classify).", ""]
    headers = ["seeds' claim", "measured here", "criterion", "verdict"]
    if has_generate_seed:
        for gpu, group in group_rows(relevant, gpu_of).items():
            table = [[f.claim, f.measured, f.criterion, f"**{f.verdict}**"] for f in seed_findings(group)]
            lines += [f"On {gpu} (claims quote the seeds' H100 numbers; measurements are this run's rows):", "",
                      md_table(headers, table), ""]
    if has_seed_classify_rows(rows):
        classify = [r for r in rows if r.get("scenario") == "classify"]
        for gpu, group in group_rows(classify, gpu_of).items():
            table = [[f.claim, f.measured, f.criterion, f"**{f.verdict}**"] for f in classify_findings(group)]
            lines += [f"Seed 004 (classification) on {gpu} (claims quote the seed's A100 numbers):", "",
                      md_table(headers, table), ""]
    return lines


LABELS_HEADING = "## Labels beside transformers'"


def render_label_section(rows: list[dict[str, Any]]) -> list[str]:
    """Nothing without a classify row checked against transformers (check_texts > 0)."""
    checked = [r for r in rows if label_checked(r)]
    if not checked:
        return []
    lines = [LABELS_HEADING, "",
             "A row is decidable when transformers' top-two logit margin exceeds twice the largest change the cell's "
             "dtype makes to it (transformers in that dtype against a wider one, on the same texts); the raw share "
             "counts near-ties too.", ""]
    for gpu, group in group_rows(checked, gpu_of).items():
        table = [[f.claim, f.measured, f.criterion, f"**{f.verdict}**"] for f in label_findings(group)]
        lines += [f"On {gpu}:", "", md_table(["claim", "measured here", "criterion", "verdict"], table), ""]
    return lines
