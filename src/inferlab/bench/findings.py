"""The seed documents' findings, checked against our rows (the report's "Do the seeds' findings hold?"
section, report_findings.py): each claim (quoted with the seeds' own numbers, which are claims, not our
measurements), what our rows measured, the criterion applied, and the verdict: holds / partly holds /
does not hold / not measured.

Only rows of the seed settings count: generate on the llama-380m preset with the hf backend, and the
attention kernels at [4,16,2048,64] bf16 causal. Owns the claims and criteria.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from inferlab.bench.markdown import num, ratio, sig
from inferlab.bench.results import headline

SEED_MODEL = "llama-380m"
SEED_KERNEL_SHAPE = {"batch_size": 4, "q_heads": 16, "kv_heads": 16, "q_len": 2048, "kv_len": 2048, "head_dim": 64,
                     "causal": True, "dtype": "bfloat16"}


@dataclass(frozen=True)
class Finding:
    claim: str
    measured: str
    criterion: str
    verdict: str  # holds | partly holds | does not hold | not measured


def _gen(rows: list[dict[str, Any]], **want: Any) -> list[dict[str, Any]]:
    defaults = {"sdpa_backend": "auto", "processor": "none"}
    want = {**defaults, **want}
    return [r for r in rows if r.get("scenario") == "generate" and r.get("backend") == "hf"
            and all(r.get("config", {}).get(k) == v for k, v in want.items())]


def _tps(rows: list[dict[str, Any]]) -> float | None:
    values = [headline(r) for r in rows if headline(r) is not None]
    return values[0] if values else None


def _state(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no row"
    r = rows[0]
    if r.get("status") == "ok":
        return f"{num(headline(r))} tok/s"
    return f"{r.get('status')}: {str(r.get('message', ''))[:70]}"


def _ratio_finding(rows: list[dict[str, Any]], claim: str, num_q: dict[str, Any], den_q: dict[str, Any], names: tuple[str, str],
                   criterion: str, holds: Callable[[float], bool]) -> Finding:
    a, b = _gen(rows, **num_q), _gen(rows, **den_q)
    ta, tb = _tps(a), _tps(b)
    measured = f"{names[0]} {_state(a)}; {names[1]} {_state(b)}"
    if ta is None or tb is None:
        return Finding(claim, measured, criterion, "not measured")
    r = ta / tb
    return Finding(claim, f"{measured}: {ratio(r)}", criterion, "holds" if holds(r) else "does not hold")


def _combine(results: list[bool]) -> str:
    if not results:
        return "not measured"
    if all(results):
        return "holds"
    return "does not hold" if not any(results) else "partly holds"


def _static_vs_dynamic(rows: list[dict[str, Any]], processor: str, claim: str, criterion: str,
                       holds: Callable[[float], bool], fails: Callable[[float], bool]) -> Finding:
    parts, verdicts = [], []
    for attn in ("eager", "sdpa"):
        for batch in sorted({r["config"].get("batch_size") for r in _gen(rows, attn_implementation=attn, processor=processor)}):
            s = _gen(rows, attn_implementation=attn, processor=processor, kv_cache="static", batch_size=batch)
            d = _gen(rows, attn_implementation=attn, processor=processor, kv_cache="dynamic", batch_size=batch)
            ts, td = _tps(s), _tps(d)
            if ts is None or td is None:
                continue
            r = ts / td
            first = f", first call {sig(s[0]['metrics'].get('first_call_s'))} s vs {sig(d[0]['metrics'].get('first_call_s'))} s"
            parts.append(f"{attn} b{batch}: static {num(ts)} / dynamic {num(td)} tok/s = {ratio(r)}{first}")
            verdicts.append(True if holds(r) else False if fails(r) else None)
    if not verdicts:
        return Finding(claim, "no static/dynamic pair ran ok", criterion, "not measured")
    if all(v is True for v in verdicts):
        verdict = "holds"
    elif all(v is False for v in verdicts):
        verdict = "does not hold"
    else:
        verdict = "partly holds"
    return Finding(claim, "; ".join(parts), criterion, verdict)


def _forced_backends(rows: list[dict[str, Any]]) -> Finding:
    claim = ("Forcing one SDPA backend in generate is unreliable: flash fails with 'No available kernel' (both caches); "
             "cudnn hangs with a dynamic cache and runs with a static one (0.79x eager)")
    criterion = "flash not ok with either cache; cudnn timeout with dynamic; cudnn ok with static"
    state = {(b, kv): _gen(rows, attn_implementation="sdpa", sdpa_backend=b, kv_cache=kv, batch_size=16)
             for b in ("flash", "efficient", "cudnn", "math") for kv in ("dynamic", "static")}
    measured = "; ".join(f"{b}/{kv}: {_state(v)}" for (b, kv), v in state.items() if v)
    checks = []
    for key, test in ((("flash", "dynamic"), lambda r: r["status"] != "ok"), (("flash", "static"), lambda r: r["status"] != "ok"),
                      (("cudnn", "dynamic"), lambda r: r["status"] == "timeout"), (("cudnn", "static"), lambda r: r["status"] == "ok")):
        if state[key]:
            checks.append(test(state[key][0]))
    return Finding(claim, measured or "no forced-backend rows", criterion, _combine(checks))


def _kernel_level(rows: list[dict[str, Any]]) -> Finding:
    claim = "At [4,16,2048,64] bf16 causal, cuDNN is the fastest SDPA backend (seeds: cudnn 0.119 ms, flash 0.161, efficient 0.335, math 7.094)"
    criterion = "cudnn has the lowest ms/iter among the SDPA backends that ran"
    shape_rows = [r for r in rows if r.get("scenario") == "attention-kernels"
                  and all(r.get("config", {}).get(k) == v for k, v in SEED_KERNEL_SHAPE.items())]
    timings = {r["config"]["kernel"]: headline(r) for r in shape_rows if headline(r) is not None}
    measured = ", ".join(f"{k} {sig(v)} ms" for k, v in sorted(timings.items(), key=lambda kv: kv[1]))
    failed = [f"{r['config']['kernel']}: {r['status']}" for r in shape_rows if r.get("status") != "ok"]
    measured = "; ".join(p for p in (measured, ", ".join(failed)) if p) or "no rows"
    sdpa = {k: v for k, v in timings.items() if k in ("flash", "efficient", "cudnn", "math")}
    if "cudnn" not in sdpa:
        return Finding(claim, measured, criterion, "not measured")
    return Finding(claim, measured, criterion, "holds" if min(sdpa, key=sdpa.get) == "cudnn" else "does not hold")


def seed_findings(rows: list[dict[str, Any]]) -> list[Finding]:
    gen = [r for r in rows if r.get("model") == SEED_MODEL]
    b16 = {"batch_size": 16}
    return [
        _ratio_finding(gen, "With a dynamic cache, sdpa is about as fast as eager (seeds: 1,958 vs 1,907 tok/s, 1.03x)",
                       {"attn_implementation": "sdpa", "kv_cache": "dynamic", **b16},
                       {"attn_implementation": "eager", "kv_cache": "dynamic", **b16}, ("sdpa", "eager"),
                       "0.95 <= sdpa/eager <= 1.10 (dynamic, batch 16)", lambda r: 0.95 <= r <= 1.10),
        _ratio_finding(gen, "flash_attention_2 is ~40% slower than sdpa in generation (seeds: 1,136 vs 1,958 tok/s)",
                       {"attn_implementation": "flash_attention_2", "kv_cache": "dynamic", **b16},
                       {"attn_implementation": "sdpa", "kv_cache": "dynamic", **b16}, ("flash_attention_2", "sdpa"),
                       "flash_attention_2/sdpa <= 0.85 (dynamic, batch 16)", lambda r: r <= 0.85),
        _static_vs_dynamic(gen, "none", "A static KV cache is ~1.8x faster than a dynamic one without a processor "
                           "(seeds: eager 3,513 vs 1,907; sdpa 3,444 vs 1,958 tok/s)",
                           "static/dynamic >= 1.4 at every attention implementation and batch measured (does not hold: < 1.0)",
                           lambda r: r >= 1.4, lambda r: r < 1.0),
        _static_vs_dynamic(gen, "python", "With a per-token Python processor a static cache is 2-3x slower than a dynamic "
                           "one (seeds: 0.37-0.42x), so use a dynamic cache with a processor",
                           "steady-state tok/s, compile time apart (first call shown): static/dynamic <= 0.7 at every "
                           "batch (does not hold: >= 1.0)", lambda r: r <= 0.7, lambda r: r >= 1.0),
        _ratio_finding(gen, "With a static cache eager is the fastest (seeds: eager 3,513 vs sdpa 3,444 tok/s)",
                       {"attn_implementation": "eager", "kv_cache": "static", **b16},
                       {"attn_implementation": "sdpa", "kv_cache": "static", **b16}, ("eager", "sdpa"),
                       "eager/sdpa >= 1.0 (static, batch 16)", lambda r: r >= 1.0),
        _forced_backends(gen),
        _fa2_static(gen),
        _kernel_level(rows),
    ]


def _fa2_static(rows: list[dict[str, Any]]) -> Finding:
    claim = "flash_attention_2 hangs with HF's static cache"
    found = _gen(rows, attn_implementation="flash_attention_2", kv_cache="static", batch_size=16)
    if not found or found[0]["status"] in ("unavailable", "skipped"):
        return Finding(claim, _state(found), "status timeout", "not measured")
    return Finding(claim, _state(found), "status timeout", "holds" if found[0]["status"] == "timeout" else "does not hold")
