"""The report's "Conformer quality" section (rows of scenario conformer-quality), the model card's quality table
and the COV-R-against-threshold plot. Every number is a row's.

Rows are grouped by model, GPU and sampling (temperature, top-p, top-k); the ETKDG row (no sampling) joins
every group of its model and GPU. Each figure is shown as its mean over the sampling seeds with the spread
(std and min-max). Verdicts, per group, each figure read against another system's spread:
- "constrained within the unconstrained spread": the engine constrained (bf16) against the engine unconstrained,
  on COV-R at every threshold and AMR-R (the issue's acceptance): the constrained mean is at least the lowest
  unconstrained seed's COV-R and at most the highest seed's AMR-R (within the spread, or better);
- "fp8 within bf16's spread": the fp8 row against the bf16 one by the same rule, on every coverage and
  matching figure and validity;
- "engine >= transformers + processor on every metric": the constrained engine's means against the seeds'
  processor's, on coverage, matching, validity and stereo agreement, on the molecules both ran (the processor
  may run on a subset: its rows say so, and the others' `quality_on_subset` holds the same subset).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.markdown import md_table, num
from inferlab.bench.results import gpu_of
from inferlab.bench.scenarios.conformer_quality import NAME, system_label

ENGINE_BF16, ENGINE_FP8, ENGINE_FREE = "engine-bf16", "engine-fp8", "engine-free"
# constrained with the pipeline's stereo repairs (the mirror image, retries): systems of their own
ENGINE_MIRROR, ENGINE_RETRIES = "engine-stereo-mirror", "engine-stereo-retries"
HF_FREE, HF_PROCESSOR, ETKDG = "hf-free", "hf-processor", "etkdg"
ORDER = (ENGINE_BF16, ENGINE_FP8, ENGINE_MIRROR, ENGINE_RETRIES, ENGINE_FREE, HF_FREE, HF_PROCESSOR, ETKDG)
MODEL_CARD_FILE = "quality-table.md"


def quality_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("scenario") == NAME]


def system_of(row: dict[str, Any]) -> str:
    """Which of the compared systems a row is (ORDER)."""
    c, backend = row.get("config") or {}, row.get("backend")
    if backend == "inferlab":
        if c.get("constraint") == "off":
            return ENGINE_FREE
        if c.get("stereo_retries"):
            return ENGINE_RETRIES
        if c.get("stereo_mirror"):
            return ENGINE_MIRROR
        return ENGINE_FP8 if c.get("kv_dtype") == "fp8" else ENGINE_BF16
    if backend == "hf":
        return HF_PROCESSOR if c.get("processor") == "python" else HF_FREE
    return ETKDG if backend == "etkdg" else str(backend)


def sampling_of(row: dict[str, Any]) -> str:
    c = row.get("config") or {}
    top_k = c.get("top_k") or 0
    return f"T={c.get('temperature'):g}, top-p {c.get('top_p'):g}" + (f", top-k {top_k}" if top_k else ", no top-k")


def reported_thresholds(rows: list[dict[str, Any]]) -> list[float]:
    for r in rows:
        if (r.get("metrics") or {}).get("thresholds"):
            return list(r["metrics"]["thresholds"])
    return []


def groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, dict[str, Any]]]:
    """(model, gpu, sampling) -> system -> row; the ETKDG row in every sampling group of its model and GPU."""
    picked = quality_rows(rows)
    out: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for r in picked:
        if system_of(r) != ETKDG:
            out.setdefault((str(r.get("model")), gpu_of(r), sampling_of(r)), {})[system_of(r)] = r
    for r in picked:
        if system_of(r) == ETKDG:
            matching = [key for key in out if key[:2] == (str(r.get("model")), gpu_of(r))]
            for key in matching or [(str(r.get("model")), gpu_of(r), sampling_of(r))]:
                out.setdefault(key, {})[ETKDG] = r
    return {key: dict(sorted(systems.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else 99))
            for key, systems in out.items()}


def figure_names(thresholds: list[float]) -> list[tuple[str, str, bool]]:
    """(metrics key, header, higher is better) of the table's figures."""
    names = []
    for t in thresholds:
        names += [(f"cov_r_{t:g}", f"COV-R <{t:g} A", True), (f"cov_p_{t:g}", f"COV-P <{t:g} A", True)]
    return names + [("amr_r", "AMR-R A", False), ("amr_p", "AMR-P A", False), ("validity", "valid", True),
                    ("stereo_agreement", "stereo", True), ("molecules_without_valid_output", "no valid output", False)]


def quality_of(row: dict[str, Any], on_subset: bool) -> dict[str, Any] | None:
    """The row's spreads: over the molecules it ran, or (on_subset) over the comparison subset; None without."""
    m = row.get("metrics") or {}
    if row.get("status") != "ok":
        return None
    if on_subset and not (row.get("config") or {}).get("on_subset_only"):
        return m.get("quality_on_subset")
    return m.get("quality")


def _is_percent(key: str) -> bool:
    return key.startswith(("cov_", "validity", "stereo"))


def show(spread: dict[str, Any] | None, key: str, with_range: bool = True) -> str:
    if not spread:
        return "-"
    scale, unit = (100.0, "%") if _is_percent(key) else (1.0, "")
    digits = 1 if _is_percent(key) else (0 if key.startswith("molecules") else 3)
    mean = f"{spread['mean'] * scale:.{digits}f}{unit}"
    if spread.get("std") is None:
        return mean
    text = f"{mean} ± {spread['std'] * scale:.{digits}f}"
    return text + (f" [{spread['min'] * scale:.{digits}f}-{spread['max'] * scale:.{digits}f}]" if with_range else "")


def quality_table(systems: dict[str, dict[str, Any]], thresholds: list[float], on_subset: bool,
                  with_range: bool = True) -> str:
    names = figure_names(thresholds)
    body = []
    for system, row in systems.items():
        q = quality_of(row, on_subset)
        m = row.get("metrics") or {}
        status = row.get("status")
        label = system_label(row.get("backend"), row.get("config") or {})
        if q is None:
            reason = row.get("message") or ("no subset figures (subset_molecules not set)" if status == "ok" else status)
            body.append([label] + ["-"] * (len(names) + 2) + [f"{status}: {str(reason)[:80]}"])
            continue
        molecules = (m.get("subset_molecules") if on_subset and not row["config"].get("on_subset_only")
                     else m.get("molecules_run"))
        speed = num((m["quality"].get("output_tokens_per_s") or {}).get("mean"), 0)
        body.append([label] + [show(q.get(key), key, with_range) for key, _, _ in names]
                    + [str(molecules), speed, m.get("run_on", "ok")])
    return md_table(["system"] + [h for _, h, _ in names] + ["molecules", "tok/s", "run on"], body)


def _not_worse(a: dict[str, Any] | None, b: dict[str, Any] | None, higher: bool) -> bool | None:
    """a's mean within b's seeds' range or better (None when either is missing)."""
    if not a or not b:
        return None
    return a["mean"] >= b["min"] if higher else a["mean"] <= b["max"]


def _at_least(a: dict[str, Any] | None, b: dict[str, Any] | None, higher: bool) -> bool | None:
    """a's mean at least as good as b's mean."""
    if not a or not b:
        return None
    return a["mean"] >= b["mean"] if higher else a["mean"] <= b["mean"]


def _verdict(name: str, checks: list[tuple[str, bool | None]]) -> str:
    known = [(label, ok) for label, ok in checks if ok is not None]
    if not known:
        return f"- {name}: not measured"
    failed = [label for label, ok in known if not ok]
    missing = [label for label, ok in checks if ok is None]
    word = "yes" if not failed else "no"
    detail = "" if not failed else f" (not on: {', '.join(failed)})"
    detail += "" if not missing else f" (not measured: {', '.join(missing)})"
    return f"- {name}: **{word}**{detail}"


FP8_GATED = ("cov_", "amr_", "validity")  # the figures the fp8 row is held to bf16's spread on (key prefixes)


def fp8_spread_checks(systems: dict[str, dict[str, Any]], thresholds: list[float]) -> list[tuple[str, str, bool | None]]:
    """(metrics key, header, fp8 within bf16's spread or better: None when not measured) on every coverage and
    matching figure and validity; [] without both rows. The report's verdict and the KV-cache gate
    (bench/kv_dtype_gate.py) read the same checks."""
    if ENGINE_BF16 not in systems or ENGINE_FP8 not in systems:
        return []
    bf16, fp8 = quality_of(systems[ENGINE_BF16], False) or {}, quality_of(systems[ENGINE_FP8], False) or {}
    return [(key, header, _not_worse(fp8.get(key), bf16.get(key), higher))
            for key, header, higher in figure_names(thresholds) if key.startswith(FP8_GATED)]


def verdicts(systems: dict[str, dict[str, Any]], thresholds: list[float]) -> list[str]:
    names = {key: (header, higher) for key, header, higher in figure_names(thresholds)}
    lines = []
    bf16, free = (quality_of(systems[s], False) if s in systems else None for s in (ENGINE_BF16, ENGINE_FREE))
    acceptance = [f"cov_r_{t:g}" for t in thresholds] + ["amr_r"]
    if ENGINE_BF16 in systems and ENGINE_FREE in systems:
        lines.append(_verdict("constrained within the unconstrained spread (COV-R, AMR-R)",
                              [(names[k][0], _not_worse((bf16 or {}).get(k), (free or {}).get(k), names[k][1]))
                               for k in acceptance]))
    if ENGINE_BF16 in systems and ENGINE_FP8 in systems:
        lines.append(_verdict("fp8 within bf16's spread",
                              [(header, ok) for _, header, ok in fp8_spread_checks(systems, thresholds)]))
    if ENGINE_BF16 in systems and HF_PROCESSOR in systems:
        on_subset = bool((systems[HF_PROCESSOR].get("config") or {}).get("on_subset_only"))
        engine, hf = quality_of(systems[ENGINE_BF16], on_subset), quality_of(systems[HF_PROCESSOR], on_subset)
        keys = [k for k in names if k != "molecules_without_valid_output"]
        where = " (on the processor's subset)" if on_subset else ""
        lines.append(_verdict(f"engine >= transformers + processor on every metric{where}",
                              [(names[k][0], _at_least((engine or {}).get(k), (hf or {}).get(k), names[k][1]))
                               for k in keys]))
    return lines


def _heading(key: tuple[str, str, str]) -> str:
    model, gpu, sampling = key
    return f"{Path(model).name or model} · {gpu} · {sampling}"


def _protocol(systems: dict[str, dict[str, Any]]) -> str:
    m = next((r.get("metrics") or {} for r in systems.values() if r.get("status") == "ok"), {})
    c = next(iter(systems.values())).get("config") or {}
    return (f"{m.get('molecules_evaluated', '?')} molecules ({m.get('molecules_selection', '-')}; "
            f"{Path(str(m.get('molecules_source', '?'))).name}), K = {c.get('num_references')} ETKDGv3 references "
            f"(seed {c.get('reference_seed')}), {m.get('generations_per_molecule', '?')} generations per molecule, "
            f"sampling seeds {m.get('seeds', '?')}; heavy-atom GetBestRMS, coverage strictly below each threshold, "
            "an invalid output is a miss, a molecule with no valid output has coverage 0.")


def render_section(rows: list[dict[str, Any]]) -> list[str]:
    grouped = groups(rows)
    if not grouped:
        return []
    lines = ["## Conformer quality", "",
             "Each figure: mean over sampling seeds ± std [min-max]. COV-R / COV-P: share of references / generations "
             "with a counterpart below the threshold; AMR-R / AMR-P: mean of the minimum RMSDs (lower is better). "
             f"The model card's table: `{MODEL_CARD_FILE}` beside this report.", ""]
    for key, systems in grouped.items():
        thresholds = reported_thresholds(list(systems.values()))
        lines += [f"### {_heading(key)}", "", _protocol(systems), "", quality_table(systems, thresholds, False), ""]
        subset = next((r["metrics"].get("subset_molecules") for r in systems.values()
                       if (r.get("metrics") or {}).get("quality_on_subset")), None)
        if subset:
            lines += [f"The same on the first {subset} molecules (the set a slower system ran on):", "",
                      quality_table(systems, thresholds, True), ""]
        lines += verdicts(systems, thresholds) + [""]
    return lines


def model_card_table(rows: list[dict[str, Any]]) -> str:
    """The reference model's quality table (Markdown) for its README: per sampling, every system's figures as
    mean ± std over the seeds, the protocol and the verdicts."""
    grouped = groups(rows)
    if not grouped:
        return ""
    parts = ["## Quality", ""]
    for key, systems in grouped.items():
        thresholds = reported_thresholds(list(systems.values()))
        parts += [f"### {key[2]}", "", _protocol(systems), "", quality_table(systems, thresholds, False, with_range=False),
                  ""] + verdicts(systems, thresholds) + [""]
    env = next((r.get("env") or {} for r in quality_rows(rows)), {})
    parts.append(f"Measured by `inferlab bench --preset conformer-quality` ({gpu_of({'env': env})}, commit "
                 f"{str(env.get('commit') or '?')[:10]}).")
    return "\n".join(parts) + "\n"


def write_plot(rows: list[dict[str, Any]], out_dir: Path) -> Path | None:
    """COV-R against the threshold, one curve per system (mean over seeds), one panel per group."""
    grouped = {k: v for k, v in groups(rows).items()
               if any((r.get("metrics") or {}).get("coverage_curve") for r in v.values())}
    if not grouped:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(grouped), figsize=(6 * len(grouped), 4.5), squeeze=False)
    for ax, (key, systems) in zip(axes[0], grouped.items()):
        for system, row in systems.items():
            curve = (row.get("metrics") or {}).get("coverage_curve")
            if row.get("status") == "ok" and curve:  # one colour per system in every panel
                ax.plot(curve["thresholds"], curve["cov_r"], color=f"C{ORDER.index(system) if system in ORDER else 9}",
                        label=system_label(row.get("backend"), row["config"]))
        for t in reported_thresholds(list(systems.values())):
            ax.axvline(t, color="grey", lw=0.6, ls="--")
        ax.set_xlabel("threshold (A)")
        ax.set_ylabel("COV-R (mean over seeds)")
        ax.set_ylim(0, 1.02)
        ax.set_title(_heading(key), fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "conformer-quality.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
