"""Whether a start-up runs the kernel precompile (engine/precompile_record.py), without a GPU: a clean
precompile's record skips the next one of the same key while every kernel file it names is in Triton's
cache; a missing file, another key, no cache, a precompile that stopped early or had a failed compile run it
again; what the key holds; the compile pool collects each kernel's files."""

from __future__ import annotations

import json
from concurrent.futures import Future

import pytest
import torch

from inferlab.engine.precompile_record import (
    decide,
    engine_code_fingerprint,
    kernel_files,
    precompile_key,
    record,
)
from inferlab.engine.startup_cache import StartupCache

MACHINE = {"gpu": "NVIDIA H200", "capability": [9, 0], "sm_count": 132, "torch": "2.11.0", "cuda": "13.0",
           "triton": "3.6.0", "triton_cache": "/tmp/triton"}
WARM_UP = {"spec": "abc", "slots": 1024, "max_seq_len": 1792, "kv_dtype": "torch.bfloat16", "graphs": True}


class CompiledKernel:  # what Triton's compile returns, as far as the record reads it
    def __init__(self, files: dict):
        self.metadata_group = files


def kernel_in(folder, name: str) -> CompiledKernel:
    folder.mkdir(parents=True, exist_ok=True)
    files = {f"{name}.json": folder / f"{name}.json", f"{name}.cubin": folder / f"{name}.cubin"}
    for path in files.values():
        path.write_text("x")
    return CompiledKernel({k: str(v) for k, v in files.items()})


def test_a_clean_precompile_is_skipped_next_time_while_its_files_are_in_the_cache(tmp_path):
    cache = StartupCache(tmp_path / "startup")
    key = precompile_key(WARM_UP, MACHINE)
    kernels = [kernel_in(tmp_path / "triton" / f"K{i}", f"k{i}") for i in range(3)]
    files = [f for k in kernels for f in kernel_files(k)]
    assert decide(cache, key).run
    assert record(cache, key, kernels=3, files=files, clean=True) is not None
    skip = decide(cache, key)
    assert not skip.run and "3 kernels" in skip.reason
    (tmp_path / "triton" / "K1" / "k1.cubin").unlink()  # Triton's cache evicted one
    again = decide(cache, key)
    assert again.run and "1 of the 6 kernel files" in again.reason


@pytest.mark.parametrize("changed", [{"slots": 512}, {"kv_dtype": "torch.float8_e4m3fn"}, {"triton": "3.7.0"},
                                     {"triton_cache": "/elsewhere"}, {"gpu": "NVIDIA H100 80GB HBM3"}])
def test_another_key_runs_the_precompile(tmp_path, changed):
    cache = StartupCache(tmp_path / "startup")
    files = kernel_files(kernel_in(tmp_path / "triton" / "K", "k"))
    record(cache, precompile_key(WARM_UP, MACHINE), 1, files, clean=True)
    other = precompile_key({**WARM_UP, **{k: v for k, v in changed.items() if k in WARM_UP}},
                           {**MACHINE, **{k: v for k, v in changed.items() if k in MACHINE}})
    assert decide(cache, other).run


def test_nothing_is_recorded_for_a_precompile_that_was_not_clean_or_named_no_files(tmp_path):
    cache = StartupCache(tmp_path / "startup")
    key = precompile_key(WARM_UP, MACHINE)
    files = kernel_files(kernel_in(tmp_path / "triton" / "K", "k"))
    assert record(cache, key, 1, files, clean=False) is None
    assert record(cache, key, 0, [], clean=True) is None
    assert decide(cache, key).run
    assert decide(StartupCache(None), key).run  # startup_cache=False: nothing remembered
    path = cache.store("precompile", key, {"kernels": 1, "files": []})
    assert decide(cache, key).run and json.loads(path.read_text())["value"]["files"] == []


def test_kernel_files_are_the_kernels_cache_paths():
    kernel = CompiledKernel({"k.json": "/c/K/k.json", "k.cubin": "/c/K/k.cubin", "odd": 3, "rel": "k.ptx"})
    assert kernel_files(kernel) == ["/c/K/k.cubin", "/c/K/k.json"]
    assert kernel_files(object()) == []


def test_the_key_follows_the_engines_code(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "kernels" / "b.py").write_text("y = 2\n")
    before = engine_code_fingerprint(tmp_path)
    (tmp_path / "kernels" / "b.py").write_text("y = 3\n")
    assert engine_code_fingerprint(tmp_path) != before
    assert precompile_key(WARM_UP, MACHINE)["engine_code"] == engine_code_fingerprint()


def test_the_dry_runs_key_fields_are_json_and_follow_its_settings(tiny_checkpoint):
    pytest.importorskip("triton")
    from inferlab.engine.forwards.registry import forward_class
    from inferlab.engine.kernel_precompile import DryRun
    from inferlab.engine.ops import OPS_BUILDERS
    from inferlab.models.config import read_model_spec

    spec = read_model_spec(tiny_checkpoint("tiny"))

    def dry(**changed) -> DryRun:
        fields = dict(spec=spec, model_class=forward_class(spec.architecture), ops=OPS_BUILDERS["triton"](),
                      dtype=torch.bfloat16, kv_dtype=torch.bfloat16, slots=16, max_seq_len=64, max_prefill_tokens=64,
                      max_stop_ids=8, share_prompts=True, use_graphs=True, gemm_plan=lambda *a: None)
        return DryRun(**{**fields, **changed})

    base = dry().key_fields()
    assert json.loads(json.dumps(base)) == base and base["gemm"] == "auto"
    for changed in ({"slots": 32}, {"max_seq_len": 128}, {"kv_dtype": torch.float8_e4m3fn}, {"use_graphs": False},
                    {"gemm_plan": None}):
        assert dry(**changed).key_fields() != base, changed


def test_the_compile_pool_collects_each_kernels_files(tmp_path):
    pytest.importorskip("triton")
    from inferlab.engine.kernel_precompile import _CompilePool

    kernels = [kernel_in(tmp_path / f"K{i}", f"k{i}") for i in range(2)]
    pool = _CompilePool(2, torch.device("cpu"))
    futures: list[Future] = [pool.submit(lambda k=k: k) for k in kernels]
    assert [f.result() for f in futures] == kernels
    pool.shutdown(wait=True)
    assert sorted(pool.files) == sorted(f for k in kernels for f in kernel_files(k)) and pool.count == 2
