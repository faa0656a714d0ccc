"""The checkpoint bytes read straight into device tensors (models/pinned_upload.py): on the CPU its byte path
with ordinary host buffers, small enough that tensors span several chunks and chunks end mid-element."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from inferlab.models.pinned_upload import PinnedUpload


def test_every_dtype_shape_and_chunk_boundary_reads_back_bitwise(tmp_path):
    generator = torch.Generator().manual_seed(0)
    tensors = {
        "bf16": torch.randn(37, 5, generator=generator).to(torch.bfloat16),
        "f32": torch.randn(3, 4, 5, generator=generator),
        "f16": torch.randn(11, generator=generator).to(torch.float16),
        "fp8": torch.randn(9, 3, generator=generator).to(torch.float8_e4m3fn),
        "i64": torch.arange(-5, 8, dtype=torch.int64),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    expected = load_file(str(path))
    with PinnedUpload({path}, torch.device("cpu"), pinned=False, chunk_bytes=7) as upload:
        for key in expected:
            assert upload.can_read(path, key)
            got = upload.tensor(path, key)
            assert got.dtype == expected[key].dtype and got.shape == expected[key].shape, key
            assert torch.equal(got.reshape(-1).view(torch.uint8), expected[key].reshape(-1).view(torch.uint8)), key
        assert not upload.can_read(path, "missing")


def test_a_file_cut_short_after_its_check_is_an_error_naming_the_tensor(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"w": torch.ones(64)}, str(path))
    with PinnedUpload({path}, torch.device("cpu"), pinned=False, chunk_bytes=16) as upload:
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size - 100)
        with pytest.raises(OSError, match="ended inside tensor 'w'"):
            upload.tensor(path, "w")
