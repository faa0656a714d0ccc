"""The start-up's Triton precompile on the real compiler for a CUDA target, without a GPU, for
test_precompile_aot_gpu.py (a process of its own: it replaces Triton's active driver and its caches).

Triton's active driver is replaced by one that only names the target (compile-only launches make no device
call); the precompile compiles its dry run's specialisations in its thread pool (real front end, MLIR passes
and ptxas); then the real warm-up (the preset's shapes on CPU tensors) runs with its launches compile-only
too and Triton's compile hook recording every specialisation the JIT did not find in its in-memory cache
(and skipping its compile). Prints one JSON line: the precompile's kernels, seconds and error, the misses.

    python tests/gpu/precompile_aot_child.py PRESET ARCH
"""

import json
import sys
import tempfile
import time

import torch
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver

from inferlab.engine.forwards.registry import forward_class
from inferlab.engine.gemm_plans.measure import preset_spec
from inferlab.engine.kernel_precompile import DryCapturer, DryRun, KernelPrecompile, compile_only, divert_launches
from inferlab.engine.ops import OPS_BUILDERS
from inferlab.engine.runner import ModelRunner
from inferlab.models.loader import placeholder_weights

SLOTS, MAX_SEQ_LEN, PREFILL_TOKENS = 16, 48, 64


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


preset, arch = sys.argv[1], int(sys.argv[2])
knobs.cache.dir = tempfile.mkdtemp(prefix="precompile-aot-")  # a fresh Triton cache: every kernel compiles
driver.set_active(TargetOnlyDriver(arch))
spec = preset_spec(preset)
ops, model_class, cpu = OPS_BUILDERS["triton"](), forward_class(spec.architecture), torch.device("cpu")
dry = DryRun(spec, model_class, ops, torch.bfloat16, torch.bfloat16, SLOTS, MAX_SEQ_LEN, PREFILL_TOKENS, 8, True,
             True, None)  # fmt: skip
report = KernelPrecompile(dry, cpu).wait()
misses: dict[str, None] = {}  # distinct specialisations, in launch order
knobs.runtime.jit_cache_hook = lambda **kw: misses.setdefault(kw["repr"]) or True  # record, do not compile
weights = placeholder_weights(spec, torch.bfloat16, cpu)
runner = ModelRunner.build(spec, model_class, weights, ops, torch.bfloat16, SLOTS, MAX_SEQ_LEN, 8, True)
started = time.perf_counter()
with torch.inference_mode(), divert_launches(compile_only):
    runner.warm_up(MAX_SEQ_LEN, PREFILL_TOKENS, True, DryCapturer())
print(json.dumps({"kernels": report.kernels, "wall_s": report.wall_s, "compile_s": report.compile_s,
                  "error": report.error, "warm_up_s": time.perf_counter() - started,
                  "misses": [name[:300] for name in misses]}))
