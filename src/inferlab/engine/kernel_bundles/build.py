"""Build this GPU's kernel bundle (kernel_bundles/__init__.py) from the precompile of the flagship jobs.

    python -m inferlab.engine.kernel_bundles.build [--out DIR] [--jobs qwen3-0.6b:1704:auto,qwen3-0.6b:1704:fp8]

Each job (MODEL:MAX_SEQ_LEN:KV_DTYPE; MODEL a preset name, its random-weight checkpoint made on the way, or a
checkpoint folder, e.g. the reference conformer model's) starts one engine in a child
process, all over one empty Triton cache folder and one empty start-up cache with the shipped kernels off, so
every kernel is compiled here and every precompile leaves its record; then the folder and the records are
packed into DIR/<gpu-slug>.json and .tar.xz (DIR defaults to this package's folder). Needs a CUDA GPU.
The default jobs are the start-up test's (tests/gpu/test_startup_cache_gpu.py, qwen3-0.6b at 1,704
positions) in both KV dtypes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_JOBS = "qwen3-0.6b:1704:auto,qwen3-0.6b:1704:fp8"


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


def start_one(model: str, max_seq_len: int, kv_dtype: str, startup_cache: str) -> None:
    """The child: one engine start, its precompile compiling every kernel (this process's TRITON_CACHE_DIR)."""
    from inferlab.engine import Engine, EngineConfig

    config = EngineConfig(model=model, device="cuda", max_seq_len=max_seq_len, kv_dtype=kv_dtype,
                          cache_dir=startup_cache, shipped_kernels=False)  # fmt: skip
    with Engine(config) as engine:
        s = engine.stats
        if s.precompile_error or not s.precompile_kernels:
            raise SystemExit(f"{model}: the precompile did not run cleanly ({s.precompile_error or 'no kernels'})")
        print(f"{Path(model).name} {max_seq_len} {kv_dtype}: {s.precompile_kernels} kernels in "
              f"{s.precompile_s:.1f} s; {s.startup_phases()}", flush=True)


def build(jobs: list[tuple[str, int, str]], out: Path) -> Path:
    import torch

    from inferlab.engine.kernel_bundles import identity, pack

    with tempfile.TemporaryDirectory() as tmp:
        triton_dir, startup_dir = Path(tmp) / "triton", Path(tmp) / "inferlab"
        env = dict(os.environ, TRITON_CACHE_DIR=str(triton_dir))
        for model, max_seq_len, kv_dtype in jobs:
            path = checkpoint_for(model, Path(tmp) / "models")
            subprocess.run([sys.executable, "-m", "inferlab.engine.kernel_bundles.build", "--child", str(path),
                            str(max_seq_len), kv_dtype, str(startup_dir)], env=env, check=True)  # fmt: skip
        records = [json.loads(p.read_text()) for p in sorted((startup_dir / "precompile").glob("*.json"))]
        ident = identity(torch.device("cuda"))
        if ident is None:
            raise SystemExit("this machine's Triton gives no identity for a bundle (kernel_bundles.identity)")
        return pack(triton_dir, records, ident, out)


def parse_jobs(text: str) -> list[tuple[str, int, str]]:
    jobs = []
    for item in filter(None, text.split(",")):
        model, length, kv = (item.split(":") + ["auto"])[:3]
        jobs.append((model, int(length), kv))
    return jobs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument("--jobs", default=DEFAULT_JOBS, help="MODEL:MAX_SEQ_LEN:KV_DTYPE, comma-separated")
    parser.add_argument("--child", nargs=4, metavar=("MODEL", "MAX_SEQ_LEN", "KV_DTYPE", "STARTUP_CACHE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        model, length, kv, cache = args.child
        start_one(model, int(length), kv, cache)
        return
    manifest = build(parse_jobs(args.jobs), args.out)
    data = json.loads(manifest.read_text())
    archive = manifest.with_name(data["archive"])
    print(f"wrote {manifest} ({len(data['records'])} records) and {archive} ({data['files']} files, "
          f"{archive.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
