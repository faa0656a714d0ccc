"""The report's "The engine beside its peers" section (rows of the engine-vs-peers preset, or any run with
peer backends): per GPU, one line per unconstrained case (model, batch, new tokens, top-p, KV cache) with
the engine's tok/s, vLLM's, the ratio, and transformers' continuous batching; then the conformer workload
per set of requests with every constrained system (tok/s, molecules/s, validity, output length, what was
measured). A peer row stands beside the engine's row of the same KV cache dtype. What each peer ran with
stands beside its figure: vLLM's version, the attention backend its model runner built, whose top-p/top-k
sampler it ran (FlashInfer's or its own), and transformers' attention path. Every number is a row's.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench.markdown import md_table, num, pct, ratio, short
from inferlab.bench.results import group_rows, gpu_of, workload_key

PEERS = ("vllm", "hf-continuous", "hf-xgrammar")
_CONFORMER_WORKLOAD = ("num_molecules", "num_conformers", "sampling", "profile", "molecules_file", "min_heavy_atoms",
                       "max_heavy_atoms", "max_requests")


def has_peer_rows(rows: list[dict[str, Any]]) -> bool:
    return any(r.get("backend") in PEERS for r in rows)


def kv_cache(row: dict[str, Any]) -> str:
    """The row's KV cache element type: fp8, or the model dtype (kv_dtype auto, and every HF row)."""
    config = row.get("config") or {}
    return "fp8" if config.get("kv_dtype") == "fp8" else str(config.get("dtype", "model dtype"))


def vllm_note(row: dict[str, Any]) -> str:
    """'vLLM 0.26.0, FLASH_ATTN, FlashInfer sampler' from the row's own facts."""
    m = row.get("metrics") or {}
    if not m.get("vllm_version"):
        return ""
    sampler = m.get("vllm_sampler")
    if m.get("flashinfer_sampler"):
        ran = "FlashInfer sampler"
    elif m.get("flashinfer_present"):
        ran = f"FlashInfer present, {sampler or 'its own'} sampler"
    else:
        ran = "without FlashInfer"
    return f"vLLM {m['vllm_version']}, {m.get('vllm_attention_backend', '?')}, {ran}"


def hf_note(row: dict[str, Any]) -> str:
    """transformers' attention path: paged (continuous batching) with or without its decode fast path, or
    the implementation and KV cache of generate."""
    m, c = row.get("metrics") or {}, row.get("config") or {}
    version = (row.get("env") or {}).get("transformers")
    prefix = f"transformers {version}, " if version else "transformers, "
    seen = m.get("attention_kernel_observed")
    kernel = f", attention kernel seen: {seen}" if seen and not str(seen).startswith("none") else ""
    cb = m.get("hf_continuous")
    if isinstance(cb, dict):
        fast = "decode fast path" if cb.get("decode_fast_path") else "no decode fast path (needs flash-attn)"
        return f"{prefix}{cb.get('attention')}, {fast}{kernel}"
    return f"{prefix}{c.get('attn_implementation', '?')}, {c.get('kv_cache', '?')} KV cache{kernel}"


def ran_with(row: dict[str, Any]) -> str:
    if row.get("backend") == "vllm":
        return vllm_note(row) or "-"
    if row.get("backend") in ("hf-continuous", "hf-xgrammar", "hf") and row.get("status") == "ok":
        return hf_note(row)
    return "-"


def _figure(rows: list[dict[str, Any]], metric: str = "output_tokens_per_s") -> str:
    if not rows:
        return "-"
    r = rows[0]
    if r.get("status") != "ok":
        return f"{r.get('status')}: {short(r.get('message'), 60)}"
    return num((r.get("metrics") or {}).get(metric))


def _value(rows: list[dict[str, Any]], metric: str = "output_tokens_per_s") -> float | None:
    if not rows or rows[0].get("status") != "ok":
        return None
    value = (rows[0].get("metrics") or {}).get(metric)
    return float(value) if isinstance(value, (int, float)) else None


def _ratio(ours: float | None, theirs: float | None) -> str:
    return ratio(ours / theirs) if ours and theirs else "-"


def generate_table(rows: list[dict[str, Any]]) -> str:
    lines = []
    generate = [r for r in rows if r.get("scenario") == "generate"]
    for subset in group_rows(generate, lambda r: (r.get("model"), workload_key(r), kv_cache(r))).values():
        by = {b: [r for r in subset if r.get("backend") == b] for b in ("inferlab", "vllm", "hf-continuous")}
        if not by["vllm"] and not by["hf-continuous"]:
            continue
        c = subset[0]["config"]
        case = (f"{subset[0].get('model')}, batch {c['batch_size']}, {c['new_tokens']} new, "
                + (f"top-p {c['top_p']}" if c.get("do_sample") else "greedy"))
        ours = _value(by["inferlab"])
        lines.append([case, kv_cache(subset[0]), _figure(by["inferlab"]), _figure(by["vllm"]),
                      _ratio(ours, _value(by["vllm"])), ran_with(by["vllm"][0]) if by["vllm"] else "-",
                      _figure(by["hf-continuous"]), _ratio(ours, _value(by["hf-continuous"])),
                      ran_with(by["hf-continuous"][0]) if by["hf-continuous"] else "-"])
    if not lines:
        return ""
    return md_table(["case (tok/s)", "KV cache", "inferlab", "vLLM", "ratio", "vLLM ran", "HF continuous", "ratio",
                     "HF ran"], lines)


def _system(row: dict[str, Any]) -> str:
    backend, c = row.get("backend"), row.get("config", {})
    if backend == "vllm":
        return f"vLLM + {c.get('structured_outputs')}"
    if backend == "hf":
        return "HF + Python processor (seeds)"
    return {"inferlab": "inferlab (constraint on the GPU)", "hf-xgrammar": "HF + xgrammar processor"}.get(backend, backend)


def conformer_tables(rows: list[dict[str, Any]]) -> list[str]:
    constrained = [r for r in rows if r.get("scenario") == "constrained"
                   and (r.get("backend") != "inferlab" or r.get("config", {}).get("constraint", "on") == "on")]
    out = []
    for subset in group_rows(constrained, lambda r: (r.get("model"), tuple(r["config"].get(k) for k in _CONFORMER_WORKLOAD))).values():
        if not any(r.get("backend") in PEERS for r in subset):
            continue
        c = subset[0]["config"]
        size = (f", {c.get('min_heavy_atoms')}-{c.get('max_heavy_atoms') or 'any'} heavy atoms"
                if c.get("min_heavy_atoms") or c.get("max_heavy_atoms") else "")
        ours = {kv_cache(r): r for r in subset if r.get("backend") == "inferlab"}
        table = []
        for r in sorted(subset, key=lambda r: (r.get("backend") != "inferlab", kv_cache(r) == "fp8")):
            m = r.get("metrics") or {}
            twin = ours.get(kv_cache(r))
            mine = r.get("backend") == "inferlab"
            table.append([_system(r), kv_cache(r), _figure([r]), _figure([r], "molecules_per_s"),
                          pct(m.get("valid_fraction")), num(m.get("mean_output_tokens")),
                          short(m.get("measured_on", ""), 60),
                          "-" if mine or twin is None else _ratio(_value([twin]), _value([r])),
                          "-" if mine or twin is None else _ratio(_value([twin], "molecules_per_s"),
                                                                   _value([r], "molecules_per_s")),
                          ran_with(r)])
        out += [f"Conformers: {subset[0].get('model')}, {c.get('num_molecules')} NCI molecules{size} x "
                f"{c.get('num_conformers')}, {c.get('sampling')}, profile {c.get('profile')}:", "",
                md_table(["system", "KV cache", "tok/s", "molecules/s", "valid", "tokens/row", "measured on",
                          "inferlab tok/s ratio", "molecules/s ratio", "ran with"], table), ""]
    return out


def render_section(rows: list[dict[str, Any]]) -> list[str]:
    if not has_peer_rows(rows):
        return []
    lines = ["## The engine beside its peers", "",
             "Same prompts, exactly the same output lengths (unconstrained) and the same sampling on every system; "
             "tokens counted the same way; a peer's ratio is against the engine's row of the same KV cache. A regex "
             "constrains text, not tokens, so a peer's conformers may take more tokens than the engine's canonical "
             "ones: compare tok/s for the engines' speed, molecules/s for what a user gets. A peer's start-up is in "
             "its rows' load_s / first_call_s, never in these figures.", ""]
    for gpu, group in group_rows(rows, gpu_of).items():
        lines += [f"On {gpu}:", ""]
        table = generate_table(group)
        if table:
            lines += [table, ""]
        lines += conformer_tables(group)
    return lines
