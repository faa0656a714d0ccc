"""The decode step against its bound: the fewest bytes and FLOPs each kernel family of one decode step must
move, and the table that reads the measured kernel times against them (scenario decode-profile; the
report's roofline section reads the rows). Pure arithmetic, no torch.

Families (the labels the profile gives each kernel, bench/step_profile.py):
  gemm qkv / gemm o   the projections: weights (H + 2K) D x d and d x H D, the rows in and out
  gemm mlp            gate_up, the gate activation and down as one unit (the engine's GEMM plan times them
                      so): weights 3 I x d, the rows in and out, the [rows, I] intermediate written and read
  gemm lm_head        weights V x d (the tied embedding), the rows in, the logits out
  attention           rope, the K/V write and decode attention (one fused kernel per layer): every row's K/V
                      over its real length (the cache's element type, fp8 with its scales), the new K/V
                      written, q in, the output out
  norm                the embedding gather + norm and the residual add + norm after each sublayer: per
                      launch the rows' x and residual in, normed and residual out, and the weight
  sampling            the draw: the logits read once
  bookkeeping         the min-length stop mask and the record of each row's token (a few hundred bytes a row)
  constraint          a constrained step's mask, forced rows, choose and advance, and the pressure they
                      measure (its fused race, the draw with the mask in registers, counts as sampling)
  forced runs         a packed step's booking of forced runs and the layout of its T positions
  forced pressure     the booked tokens' pressure, from the logits of the positions before them
  other               anything unlabelled
The last four count no minimum (their bound: their launches at the launch floor). A packed step's GEMMs and
LM head run over its T positions; the bounds count the b rows' work, what one token per row needs.
Each family's bound is the largest of: its bytes at the device's measured copy bandwidth, its FLOPs at the
measured bf16 matrix rate, and its launches at the shortest time a kernel runs on the device (the launch
floor). A family meets its bound at >= 60% of it; one under 5% of the step is not held to it. The gaps
between kernels in the replayed graph (step time - kernel time) are their own row, read against the
measured per-kernel gap of a graph of trivial kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

FAMILIES = ("gemm qkv", "gemm o", "gemm mlp", "gemm lm_head", "attention", "norm", "sampling", "bookkeeping",
            "constraint", "forced runs", "forced pressure", "other")  # fmt: skip
GAPS = "gaps"  # the table's row for the time between kernels
MEETS = 0.6  # a family meets its bound at this fraction of it
SMALL_SHARE = 0.05  # families under this share of the step are not held to their bound
ROW_STATE_BYTES = 12 * 8  # a row's int64 counters and flags the bookkeeping reads or writes
TOKEN_BYTES = 8  # a sampled token id (int64)


@dataclass(frozen=True)
class StepShape:
    """What one decode step computes: the model's sizes, the rows and the positions each row attends over."""

    rows: int
    context: int  # K/V positions each row's attention reads (its real length, the new token included)
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    dtype_bytes: int  # weights and activations (the model dtype)
    kv_bytes_per_token: int  # one position's K and V over all layers, as the cache stores them (fp8: + scales)
    logits_bytes: int  # one logit as the LM head writes it
    stop_ids: int  # stop-id entries per row the stop mask reads


@dataclass(frozen=True)
class Work:
    bytes: float
    flops: float


def weight_bytes(s: StepShape) -> float:
    """The weights one step reads: every layer's projections and the (tied) LM head."""
    q, kv, d, i = s.heads * s.head_dim, s.kv_heads * s.head_dim, s.hidden, s.intermediate
    return (s.layers * ((q + 2 * kv) * d + d * q + 3 * i * d) + s.vocab * d) * s.dtype_bytes


def kv_read_bytes(s: StepShape) -> float:
    return s.rows * s.context * s.kv_bytes_per_token


def minimum_work(s: StepShape, norm_launches: float) -> dict[str, Work]:
    """The fewest bytes and FLOPs of each family (see the module docstring); norm_launches per step (the
    profile's count: a Llama layer has two, Gemma's four)."""
    b, e, d, n = s.rows, s.dtype_bytes, s.hidden, s.layers
    q, kv, i = s.heads * s.head_dim, s.kv_heads * s.head_dim, s.intermediate
    rows_of = lambda width: b * width * e  # noqa: E731 - one activation tensor of the step
    return {
        "gemm qkv": Work(n * ((q + 2 * kv) * d * e + rows_of(d) + rows_of(q + 2 * kv)), n * 2 * b * d * (q + 2 * kv)),
        "gemm o": Work(n * (d * q * e + rows_of(q) + rows_of(d)), n * 2 * b * q * d),
        "gemm mlp": Work(n * (3 * i * d * e + 2 * rows_of(d) + 2 * rows_of(i)), n * 2 * b * 3 * i * d),
        "gemm lm_head": Work(s.vocab * d * e + rows_of(d) + b * s.vocab * s.logits_bytes, 2 * b * d * s.vocab),
        "attention": Work(kv_read_bytes(s) + b * s.kv_bytes_per_token + n * (rows_of(q + 2 * kv) + rows_of(q)),
                          n * 4 * b * s.heads * s.head_dim * s.context),
        "norm": Work(norm_launches * (4 * rows_of(d) + d * e), norm_launches * 4 * b * d),
        "sampling": Work(b * s.vocab * s.logits_bytes + b * TOKEN_BYTES, 0.0),
        "bookkeeping": Work(b * (s.stop_ids * (TOKEN_BYTES + 2 * s.logits_bytes) + ROW_STATE_BYTES), 0.0),
        "constraint": Work(0.0, 0.0),
        "forced runs": Work(0.0, 0.0),
        "forced pressure": Work(0.0, 0.0),
        "other": Work(0.0, 0.0),
    }


TILE = 128  # the output tile of the GEMMs' parallelism note (cuBLAS's and Triton's common Hopper tile side)


def gemm_tiles(s: StepShape) -> dict[str, list[int]]:
    """Output tiles of TILE x TILE of each GEMM a family launches per layer (gate_up and down for the MLP): a
    GEMM of fewer tiles than the device has SMs cannot keep its tensor cores busy."""
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    tiles = lambda n: -(-s.rows // TILE) * -(-n // TILE)  # noqa: E731
    return {"gemm qkv": [tiles(q + 2 * kv)], "gemm o": [tiles(s.hidden)],
            "gemm mlp": [tiles(2 * s.intermediate), tiles(s.hidden)], "gemm lm_head": [tiles(s.vocab)]}  # fmt: skip


@dataclass(frozen=True)
class Ceilings:
    """The device's measured limits (bench/device_limits.py, bench/bandwidth.py)."""

    copy_gb_per_s: float  # a large device-to-device copy, bytes read + written
    matmul_tflops: float  # a large matrix product in the model dtype
    kernel_floor_us: float  # the shortest a kernel runs (a trivial kernel's profiled duration)
    graph_gap_us: float | None  # the time between trivial kernels replayed in a CUDA graph (None: no graphs)
    copy_curve: tuple[tuple[float, float], ...] = ()  # (bytes moved, GB/s) of copies of the sizes a step moves
    sm_count: int | None = None  # streaming multiprocessors (CUDA)

    def copy_gb_per_s_at(self, nbytes: float) -> float:
        """The copy bandwidth a transfer of `nbytes` reaches (log-interpolated on the measured curve; the large
        copy's beyond it)."""
        curve = sorted(self.copy_curve)
        if not curve or nbytes >= curve[-1][0]:
            return max([self.copy_gb_per_s] + [g for _, g in curve[-1:]])
        if nbytes <= curve[0][0]:
            return curve[0][1]
        for (x0, g0), (x1, g1) in zip(curve, curve[1:]):
            if x0 <= nbytes <= x1:
                f = (math.log(nbytes) - math.log(x0)) / (math.log(x1) - math.log(x0))
                return g0 + f * (g1 - g0)
        return self.copy_gb_per_s


@dataclass(frozen=True)
class Measured:
    us: float  # device time per step
    launches: float  # kernels per step


def _bound_terms(work: Work, launches: float, c: Ceilings) -> dict[str, float]:
    return {
        "bandwidth": work.bytes / (c.copy_gb_per_s * 1e3),  # bytes / (GB/s * 1e9) in us
        "compute": work.flops / (c.matmul_tflops * 1e6),  # FLOPs / (TFLOP/s * 1e12) in us
        "launches": launches * c.kernel_floor_us,
    }


def family_rows(measured: dict[str, Measured], work: dict[str, Work], step_us: float, c: Ceilings,
                tiles: dict[str, list[int]] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """One row per family that ran (FAMILIES order), then the gaps row: the table of the report. `tiles`:
    gemm_tiles of the step, for the note on a GEMM family below its compute bound."""
    rows = []
    for family in FAMILIES:
        m = measured.get(family)
        if m is None or m.launches == 0:
            continue
        w = work.get(family, Work(0.0, 0.0))
        terms = _bound_terms(w, m.launches, c)
        limit = max(terms, key=terms.get)
        bound = terms[limit]
        per_launch = w.bytes / m.launches
        sized_gbps = c.copy_gb_per_s_at(per_launch) if w.bytes else None
        row = {
            "family": family,
            "launches": m.launches,
            "us": m.us,
            "share": m.us / step_us if step_us else None,
            "bytes": w.bytes,
            "flops": w.flops,
            "gb_per_s": w.bytes / (m.us * 1e3) if m.us else None,
            "tflops": w.flops / (m.us * 1e6) if m.us else None,
            "bytes_us": terms["bandwidth"],
            "flops_us": terms["compute"],
            "floor_us": terms["launches"],
            "bound_us": bound,
            "limit": limit,
            "pct_of_bound": bound / m.us if m.us else None,
            "bytes_per_launch": per_launch,
            "copy_gb_per_s_at_size": sized_gbps,  # what a copy of one launch's bytes reaches on this device
            "pct_of_sized_copy": (w.bytes / (sized_gbps * 1e3)) / m.us if sized_gbps and m.us else None,
            "output_tiles": (tiles or {}).get(family),
            "sm_count": c.sm_count,
        }
        row["meets"], row["reason"] = verdict(row)
        rows.append(row)
    kernel_us = sum(r["us"] for r in rows)
    launches = sum(r["launches"] for r in rows)
    gaps_us = max(0.0, step_us - kernel_us)
    floor = launches * c.graph_gap_us if c.graph_gap_us is not None else None
    gaps = {"family": GAPS, "launches": launches, "us": gaps_us, "share": gaps_us / step_us if step_us else None,
            "floor_us": floor, "bound_us": floor, "limit": "launches",
            "pct_of_bound": floor / gaps_us if floor is not None and gaps_us else None}  # fmt: skip
    gaps["meets"], gaps["reason"] = verdict(gaps)
    return rows + [gaps]


def verdict(row: dict[str, Any]) -> tuple[bool, str | None]:
    """(meets, why not or what bounds it): >= MEETS of the bound, or under SMALL_SHARE of the step."""
    pct, share = row.get("pct_of_bound"), row.get("share") or 0.0
    if row["family"] == GAPS:
        if pct is None:
            return share < SMALL_SHARE, "no graph replay: the step's gaps are host launches"
        ok = pct >= MEETS or share < SMALL_SHARE
        return ok, (f"{row['launches']:.0f} kernels x {row['floor_us'] / max(row['launches'], 1):.2f} us, the gap "
                    "between trivial kernels of a replayed graph")
    if row["limit"] == "launches":
        note = (f"launch-bound: {row['launches']:.0f} launches take >= {row['floor_us']:.1f} us; its bytes take "
                f"{row['bytes_us']:.1f} us at the copy bandwidth")
        return (pct or 0.0) >= MEETS or share < SMALL_SHARE, note
    if pct is not None and pct >= MEETS:
        return True, None
    if share < SMALL_SHARE:
        return True, "under 5% of the step"
    sized = row.get("pct_of_sized_copy")
    note = f"{100 * (pct or 0.0):.0f}% of its {row['limit']} bound"
    if sized is not None and row["limit"] == "bandwidth":
        note += (f"; a copy of its {row['bytes_per_launch'] / 1e6:.2f} MB per launch reaches "
                 f"{row['copy_gb_per_s_at_size']:.0f} GB/s here ({100 * sized:.0f}% of that)")
    if row.get("output_tiles") and row["limit"] == "compute":
        tiles = " and ".join(str(t) for t in row["output_tiles"])
        note += (f"; {tiles} output tiles of {TILE}x{TILE} per GEMM"
                 + (f" for {row['sm_count']} SMs" if row.get("sm_count") else ""))
    return False, note


def step_summary(shape: StepShape, step_us: float, c: Ceilings) -> dict[str, Any]:
    """The step as the engine's own bandwidth figure counts it: weights + every row's K/V over the step time."""
    nbytes = weight_bytes(shape) + kv_read_bytes(shape)
    gbps = nbytes / (step_us * 1e3) if step_us else None
    return {"step_us": step_us, "step_bytes": nbytes, "step_gb_per_s": gbps,
            "step_bandwidth_fraction": gbps / c.copy_gb_per_s if gbps and c.copy_gb_per_s else None,
            "weight_bytes": weight_bytes(shape), "kv_read_bytes": kv_read_bytes(shape)}  # fmt: skip
