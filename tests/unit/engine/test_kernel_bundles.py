"""The package's Triton kernels (engine/kernel_bundles/): a Triton cache folder and its precompile records
packed, then unpacked into another machine's cache folder where the identity matches; the precompile thread
asks the bundle first and compiles nothing when a record has its key. Without a GPU: the cache folder is a
fake of Triton's layout (<hash>/<files>, groups of absolute paths) and the identity is the test's."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import torch

from inferlab.engine import kernel_bundles as kb

IDENTITY = {"gpu": "NVIDIA H200", "capability": [9, 0], "triton": "3.6.0", "triton_key": "abc", "ptxas": "V13.0",
            "python": "3.12"}  # fmt: skip
KEY = {"gpu": "NVIDIA H200", "triton": "3.6.0", "slots": 1024, "engine_code": "e1", "triton_cache": "/old/cache"}


def _triton_cache(root: Path) -> list[str]:
    """Two kernels as Triton 3.6 leaves them (json, cubin, IR text, a group of absolute paths) and a launcher
    module; returns the first kernel's group members' paths (what a precompile record names)."""
    files = []
    for h, name in (("AAA", "rms_norm"), ("BBB", "attention")):
        folder = root / h
        folder.mkdir(parents=True)
        members = {}
        for suffix, data in ((".json", b'{"name": "%s"}' % name.encode()), (".cubin", b"\x7fELF" + h.encode()),
                             (".ptx", b"// ptx"), (".ttir", b"module"), (".source", b"def k(): pass")):
            path = folder / f"{name}{suffix}"
            path.write_bytes(data)
            members[path.name] = str(path)
        (folder / f"__grp__{name}.json").write_text(json.dumps({"child_paths": members}))
        files.append(sorted(str(folder / f) for f in (f"{name}.json", f"{name}.cubin")))
    (root / "CCC").mkdir()
    (root / "CCC" / "__triton_launcher.cpython-312-x86_64-linux-gnu.so").write_bytes(b"\x7fELF launcher")
    return files[0] + [str(root / "AAA" / "__grp__rms_norm.json")]


@pytest.fixture
def bundle(tmp_path, monkeypatch):
    """A bundle of the fake cache in tmp_path/bundles, its identity the test's; returns that folder."""
    source = tmp_path / "old" / "cache"
    record_files = _triton_cache(source)
    records = [{"key": {**KEY, "triton_cache": str(source)}, "value": {"kernels": 1, "files": record_files}}]
    kb.pack(source, records, IDENTITY, tmp_path / "bundles")
    monkeypatch.setattr(kb, "identity", lambda device: dict(IDENTITY))
    return tmp_path / "bundles"


def test_pack_ships_binaries_metadata_groups_and_launchers_but_not_the_ir_text(bundle):
    manifest = json.loads((bundle / "nvidia-h200.json").read_text())
    assert manifest["identity"] == IDENTITY and manifest["archive"] == "nvidia-h200.tar.xz"
    assert manifest["records"] == [{"key": kb.record_key(KEY), "kernels": 1,
                                    "files": ["AAA/__grp__rms_norm.json", "AAA/rms_norm.cubin", "AAA/rms_norm.json"]}]
    with tarfile.open(bundle / "nvidia-h200.tar.xz") as tar:
        names = tar.getnames()
        group = json.loads(tar.extractfile("AAA/__grp__rms_norm.json").read())
    assert "AAA/rms_norm.ptx" not in names and "AAA/rms_norm.ttir" not in names
    assert "CCC/__triton_launcher.cpython-312-x86_64-linux-gnu.so" in names and len(names) == manifest["files"] == 7
    assert group == {"child_paths": ["rms_norm.cubin", "rms_norm.json"]}  # relative, shipped members only


def test_install_unpacks_into_the_new_folder_and_finds_the_record_of_its_key(bundle, tmp_path):
    cache = tmp_path / "new" / "cache"
    (cache / "BBB").mkdir(parents=True)
    (cache / "BBB" / "attention.cubin").write_bytes(b"mine")  # a file already there is kept
    installed = kb.install({**KEY, "triton_cache": str(cache)}, torch.device("cpu"), str(cache), bundle)
    assert installed.exact and installed.kernels == 1 and installed.written == 6
    assert installed.files == [str(cache / "AAA" / f) for f in ("__grp__rms_norm.json", "rms_norm.cubin",
                                                                "rms_norm.json")]  # fmt: skip
    assert (cache / "BBB" / "attention.cubin").read_bytes() == b"mine"
    group = json.loads((cache / "AAA" / "__grp__rms_norm.json").read_text())["child_paths"]
    assert group == {"rms_norm.cubin": str(cache / "AAA" / "rms_norm.cubin"),
                     "rms_norm.json": str(cache / "AAA" / "rms_norm.json")}  # fmt: skip
    assert all(Path(p).exists() for p in group.values())
    again = kb.install({**KEY, "triton_cache": str(cache)}, torch.device("cpu"), str(cache), bundle)
    assert again.exact and again.written == 0


def test_another_start_up_key_gets_the_files_without_the_record(bundle, tmp_path):
    cache = tmp_path / "new"
    installed = kb.install({**KEY, "slots": 512}, torch.device("cpu"), str(cache), bundle)
    assert not installed.exact and installed.files == [] and installed.written == 7
    assert (cache / "AAA" / "rms_norm.cubin").exists()


@pytest.mark.parametrize("change", [{"triton_key": "other build"}, {"ptxas": "V12.8"}, {"python": "3.11"}])
def test_a_machine_of_another_identity_gets_nothing(bundle, tmp_path, monkeypatch, change):
    monkeypatch.setattr(kb, "identity", lambda device: {**IDENTITY, **change})
    cache = tmp_path / "new"
    assert kb.install(KEY, torch.device("cpu"), str(cache), bundle) is None
    assert not cache.exists()


def test_no_bundle_for_the_gpu_or_another_cache_manager_gets_nothing(bundle, tmp_path, monkeypatch):
    assert kb.install({**KEY, "gpu": "NVIDIA H100 80GB HBM3"}, torch.device("cpu"), str(tmp_path / "c"), bundle) is None
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "my.module:Manager")
    assert kb.install(KEY, torch.device("cpu"), str(tmp_path / "c"), bundle) is None


def test_a_damaged_archive_is_a_warning_not_a_failed_start(bundle, tmp_path, caplog):
    (bundle / "nvidia-h200.tar.xz").write_bytes(b"not xz")
    assert kb.install(KEY, torch.device("cpu"), str(tmp_path / "c"), bundle) is None
    assert "could not use" in caplog.text


def test_a_member_outside_its_kernel_folder_is_refused(bundle, tmp_path, caplog):
    import io

    with tarfile.open(bundle / "nvidia-h200.tar.xz", "w:xz") as tar:
        info = tarfile.TarInfo("../escape.so")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    assert kb.install(KEY, torch.device("cpu"), str(tmp_path / "c"), bundle) is None
    assert not (tmp_path / "escape.so").exists() and "unexpected member" in caplog.text


class _NoDryRun:
    def warm_up(self):
        raise AssertionError("the dry run ran though the bundle held every kernel")


def test_the_precompile_asks_the_bundle_first_and_compiles_nothing_when_it_holds_every_kernel():
    from inferlab.engine.kernel_precompile import KernelPrecompile

    exact = kb.Installed(True, 32, ["/c/AAA/k.cubin"], 224, 0.4)
    report = KernelPrecompile(_NoDryRun(), torch.device("cpu"), sink=lambda *a: None, shipped=lambda: exact).wait()
    assert report.error == "" and report.clean and report.shipped == "all"
    assert report.kernels == 32 and report.files == ["/c/AAA/k.cubin"] and report.phases["shipped_s"] == 0.4


def test_a_bundle_without_the_record_leaves_the_dry_run_to_compile_the_rest():
    from inferlab.engine.kernel_precompile import KernelPrecompile

    class Dry:
        ran = False

        def warm_up(self):
            Dry.ran = True

    partial = kb.Installed(False, 0, [], 7, 0.2)
    report = KernelPrecompile(Dry(), torch.device("cpu"), sink=lambda *a: None, shipped=lambda: partial).wait()
    assert Dry.ran and report.shipped == "7 files" and "walk_s" in report.phases


def test_the_shipped_bundles_are_whole():
    """Each committed manifest (at least the H100's) names its GPU and archive; the archive holds exactly its
    `files` members, every record's files among them, every group naming members of its own folder."""
    from inferlab.engine.gemm_plans import gpu_slug

    manifests = sorted(kb.BUNDLES_FOLDER.glob("*.json"))
    assert "nvidia-h100-80gb-hbm3.json" in [p.name for p in manifests]
    for path in manifests:
        manifest = json.loads(path.read_text())
        assert manifest["format"] == kb.FORMAT and path.stem == gpu_slug(manifest["identity"]["gpu"])
        with tarfile.open(path.with_name(manifest["archive"])) as tar:
            names = set(tar.getnames())
            groups = {n: json.loads(tar.extractfile(n).read())["child_paths"] for n in names if "/__grp__" in n}
        assert len(names) == manifest["files"] and groups
        for record in manifest["records"]:
            assert record["kernels"] > 0 and set(record["files"]) <= names and "triton_cache" not in record["key"]
        for name, children in groups.items():
            assert all(f"{name.split('/')[0]}/{child}" in names for child in children), name


def test_build_jobs_name_model_length_kv_dtype_and_forced_run_width():
    from inferlab.engine.kernel_bundles.build import DEFAULT_JOBS, parse_jobs

    assert parse_jobs("m:64,/ckpt/x:128:fp8,m:256:auto:4") == [("m", 64, "auto", 0), ("/ckpt/x", 128, "fp8", 0),
                                                               ("m", 256, "auto", 4)]  # fmt: skip
    assert ("qwen3-0.6b", 1704, "auto", 0) in parse_jobs(DEFAULT_JOBS)  # the start-up test's job


def test_a_child_whose_precompile_an_earlier_job_recorded_is_not_a_failure():
    from inferlab.engine.kernel_bundles.build import precompile_problem
    from inferlab.engine.stats import EngineStats

    assert precompile_problem(EngineStats(precompile_kernels=31)) == ""
    # the forced-run job's warm-up is the plain job's: the plain job's record skips its precompile
    assert precompile_problem(EngineStats(precompile_skipped="Triton's cache holds the 31 kernels ...")) == ""
    assert precompile_problem(EngineStats()) == "no kernels"  # no precompile at all (e.g. it was off)
    assert precompile_problem(EngineStats(precompile_kernels=3, precompile_error="meta tensor")) == "meta tensor"
