"""Check the start-up's Triton precompile on the real compiler, without a GPU (a CUDA target named instead).

    PYTHONPATH=src python scripts/gpu/precompile_check.py [--preset tiny] [--arch 90] [--workers 4]
    # against the GPU machine's Triton (see triton_aot_check.py for the download):
    PYTHONPATH=/tmp/t36:src python scripts/gpu/precompile_check.py

engine/kernel_precompile.py compiles what its dry run of the warm-up (meta tensors) launches; its test
compares the two sets of launches, this runs the compile itself: Triton's active driver is replaced by one
that only names the target (compile-only launches make no device call), the precompile compiles the dry
run's specialisations in its thread pool (real front end, MLIR passes and ptxas), and then the real warm-up
(the preset's shapes on CPU tensors) is run with its launches compile-only too and Triton's compile hook
counting every specialisation the JIT did not find in its in-memory cache (and skipping its compile). Prints
the precompile's kernels and seconds and the warm-up's misses; exit 1 when there is one. On CPU the grids
are sized for the CPU (both runs alike); a few minutes on a loaded 2-core machine for the tiny presets.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import torch  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

from inferlab.engine.gemm_plans.measure import preset_spec  # noqa: E402
from inferlab.engine.kernel_precompile import DryCapturer, DryRun, KernelPrecompile, compile_only  # noqa: E402
from inferlab.engine.kernel_precompile import divert_launches  # noqa: E402
from inferlab.engine.ops import OPS_BUILDERS  # noqa: E402
from inferlab.engine.runner import ModelRunner  # noqa: E402
from inferlab.models.loader import placeholder_weights  # noqa: E402
from inferlab.models.registry import implementation_for  # noqa: E402


class TargetOnlyDriver:
    """What the JIT asks the driver on its compile-only path: a device index, a stream, the target."""

    def __init__(self, arch: int) -> None:
        self.target = GPUTarget("cuda", arch, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return self.target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", help="a causal-LM preset of models/presets.py")
    parser.add_argument("--arch", type=int, default=90, help="CUDA compute capability x 10 (90: H100/H200)")
    parser.add_argument("--workers", type=int, default=0, help="compile threads (0: the engine's choice)")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--max-seq-len", type=int, default=48)
    parser.add_argument("--prefill-tokens", type=int, default=64)
    args = parser.parse_args()
    knobs.cache.dir = tempfile.mkdtemp(prefix="precompile-check-")  # a fresh Triton cache: every kernel compiles
    driver.set_active(TargetOnlyDriver(args.arch))
    spec = preset_spec(args.preset)
    ops, model_class, cpu = OPS_BUILDERS["triton"](), implementation_for(spec.architecture).load(), torch.device("cpu")
    dry = DryRun(spec, model_class, ops, torch.bfloat16, torch.bfloat16, args.slots, args.max_seq_len,
                 args.prefill_tokens, 8, True, True, None)  # fmt: skip
    report = KernelPrecompile(dry, cpu, workers=args.workers or None).wait()
    print(f"precompile: {report.kernels} kernels in {report.wall_s:.1f} s ({report.compile_s:.1f} s of compile "
          f"threads){', stopped: ' + report.error if report.error else ''}")
    misses: dict[str, None] = {}  # distinct specialisations, in launch order
    knobs.runtime.jit_cache_hook = lambda **kw: misses.setdefault(kw["repr"]) or True  # record, do not compile
    weights = placeholder_weights(spec, torch.bfloat16, cpu)
    runner = ModelRunner.build(spec, model_class, weights, ops, torch.bfloat16, args.slots, args.max_seq_len, 8, True)
    t = time.perf_counter()
    with torch.inference_mode(), divert_launches(compile_only):
        runner.warm_up(args.max_seq_len, args.prefill_tokens, True, DryCapturer())
    print(f"warm-up ({time.perf_counter() - t:.1f} s): {len(misses)} specialisations not in the JIT's caches")
    for name in misses:
        print(f"  MISS {name[:300]}")
    return 1 if misses or report.error else 0


if __name__ == "__main__":
    sys.exit(main())
