"""Build this GPU's kernel bundle (kernel_bundles/__init__.py) from the precompile of the flagship jobs.

    python -m inferlab.engine.kernel_bundles.build [--out DIR] [--jobs qwen3-0.6b:1704:auto,qwen3-0.6b:1704:fp8]

Each job (MODEL:MAX_SEQ_LEN:KV_DTYPE[:FORCED_RUN_TOKENS]; MODEL a preset name, its random-weight checkpoint
made on the way, or a checkpoint folder, e.g. the reference conformer model's) starts one engine in a child
process, all over one empty Triton cache folder and one empty start-up cache with the shipped kernels off, so
every kernel is compiled here and every precompile leaves its record; the child then runs a short
constrained job (conformer-like programs over the engine's tokenizer), so that the constrained decode
variants' kernels, which the warm-up does not launch and a run compiles at its first constrained step, are in
the folder too (files of no record: read instead of compiled where they match). The folder and the records
are packed into DIR/<gpu-slug>.json and .tar.xz (DIR defaults to this package's folder). Needs a CUDA GPU.
The default jobs are the start-up test's (tests/gpu/test_startup_cache_gpu.py, qwen3-0.6b at 1,704
positions) in both KV dtypes, bf16 also with forced tokens in bulk (the tune tries 4).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_JOBS = "qwen3-0.6b:1704:auto,qwen3-0.6b:1704:fp8,qwen3-0.6b:1704:auto:4"
CONSTRAINED_REQUESTS = 64  # the constrained job's requests: a few decode buckets' variants


def checkpoint_for(model: str, folder: Path) -> Path:
    """A checkpoint folder for MODEL: itself, or a preset's random weights."""
    if Path(model).is_dir():
        return Path(model)
    from inferlab.models.checkpoint_init import init_checkpoint
    from inferlab.models.presets import get_preset
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    path = folder / model
    if not (path / "config.json").exists():
        tokenizer = qwen3_chem_tokenizer_dir() if get_preset(model).tokenizer == "qwen3-chem" else None
        init_checkpoint(model, path, seed=0, dtype="bfloat16", tokenizer_dir=tokenizer)
    return path


def start_one(model: str, max_seq_len: int, kv_dtype: str, forced_run_tokens: int, startup_cache: str) -> None:
    """The child: one engine start, its precompile compiling every kernel (this process's TRITON_CACHE_DIR),
    then the constrained job."""
    from inferlab.engine import Engine, EngineConfig

    config = EngineConfig(model=model, device="cuda", max_seq_len=max_seq_len, kv_dtype=kv_dtype,
                          forced_run_tokens=forced_run_tokens, cache_dir=startup_cache, shipped_kernels=False)
    with Engine(config) as engine:
        s = engine.stats
        problem = precompile_problem(s)
        if problem:
            raise SystemExit(f"{model}: the precompile did not run cleanly ({problem})")
        done = (f"precompile skipped ({s.precompile_skipped})" if s.precompile_skipped
                else f"{s.precompile_kernels} kernels in {s.precompile_s:.1f} s")
        print(f"{Path(model).name} {max_seq_len} {kv_dtype} F={forced_run_tokens}: {done}; {s.startup_phases()}",
              flush=True)
        run_constrained(engine)


def precompile_problem(stats) -> str:
    """Why a child's precompile leaves the bundle short of its start-up's kernels ("": it does not). A job
    whose warm-up is an earlier job's (one that differs only in what the warm-up does not launch, such as the
    forced-run width) finds that job's record and skips its precompile: its own kernels come from its
    constrained job."""
    if stats.precompile_error:
        return stats.precompile_error
    if not stats.precompile_kernels and not stats.precompile_skipped:
        return "no kernels"
    return ""


def run_constrained(engine) -> None:
    """CONSTRAINED_REQUESTS conformer-like programs (two coordinate blocks) sampled at T = 1."""
    from inferlab.constraints.program import compile_program
    from inferlab.constraints.segments import Copy, EndOfSequence, Hole
    from inferlab.types import Request, SamplingParams

    segments = [Copy("[CONFORMER][C]<"), Hole("coord3-fixed4"), Copy(">[O]<"), Hole("coord3-fixed4"),
                Copy(">[/CONFORMER]"), EndOfSequence()]  # fmt: skip
    program = compile_program(segments, engine.tokenizer)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=128)
    results = engine.generate([Request(f"c{i}", prompt="[SMILES]CO[/SMILES]", sampling=sampling, constraint=program)
                               for i in range(CONSTRAINED_REQUESTS)])  # fmt: skip
    print(f"  constrained job: {len(results)} requests, {engine.stats.lazy_capture_s:.1f} s of lazy captures",
          flush=True)


def build(jobs: list[tuple[str, int, str, int]], out: Path) -> Path:
    import torch

    from inferlab.engine.kernel_bundles import identity, pack

    with tempfile.TemporaryDirectory() as tmp:
        triton_dir, startup_dir = Path(tmp) / "triton", Path(tmp) / "inferlab"
        env = dict(os.environ, TRITON_CACHE_DIR=str(triton_dir))
        for model, max_seq_len, kv_dtype, forced in jobs:
            path = checkpoint_for(model, Path(tmp) / "models")
            subprocess.run([sys.executable, "-m", "inferlab.engine.kernel_bundles.build", "--child", str(path),
                            str(max_seq_len), kv_dtype, str(forced), str(startup_dir)], env=env, check=True)
        records = [json.loads(p.read_text()) for p in sorted((startup_dir / "precompile").glob("*.json"))]
        ident = identity(torch.device("cuda"))
        if ident is None:
            raise SystemExit("this machine's Triton gives no identity for a bundle (kernel_bundles.identity)")
        return pack(triton_dir, records, ident, out)


def parse_jobs(text: str) -> list[tuple[str, int, str, int]]:
    jobs = []
    for item in filter(None, text.split(",")):
        parts = item.split(":")
        kv = parts[2] if len(parts) > 2 else "auto"
        jobs.append((parts[0], int(parts[1]), kv, int(parts[3]) if len(parts) > 3 else 0))
    return jobs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument("--jobs", default=DEFAULT_JOBS,
                        help="MODEL:MAX_SEQ_LEN[:KV_DTYPE[:FORCED_RUN_TOKENS]], comma-separated")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        model, length, kv, forced, cache = args.child
        start_one(model, int(length), kv, int(forced), cache)
        return
    manifest = build(parse_jobs(args.jobs), args.out)
    data = json.loads(manifest.read_text())
    archive = manifest.with_name(data["archive"])
    print(f"wrote {manifest} ({len(data['records'])} records) and {archive} ({data['files']} files, "
          f"{archive.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
