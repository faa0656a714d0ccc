"""A safetensors checkpoint's tensors read from their files straight into a CUDA device's memory.

safetensors' get_tensor builds each tensor in fresh host memory (page faults over the mmap and the new pages)
and `.to(device)` then copies it from pageable memory, synchronously, once per tensor: slow on a host busy with
other processes (docs/decisions.md, "The weights go from their files to the device through two pinned
buffers"). Here each tensor's bytes go from the file (its offsets
in the header, checkpoint_files.safetensors_header) into one of two pinned buffers by `readinto`, and from
there to the device tensor by an asynchronous copy, so the next chunk's read overlaps the last one's transfer.
A tensor comes back in the checkpoint's dtype and shape on the device (the loader casts and fuses there).
`pinned=False` stages through ordinary host memory: the same byte path where no CUDA is (the CPU tests).
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import torch

from inferlab.models.checkpoint_files import safetensors_header

CHUNK_BYTES = 32 << 20  # per pinned buffer: large enough that a copy's launch is noise, two fit any host

# safetensors dtype names -> torch dtypes (https://github.com/huggingface/safetensors, its format's dtypes)
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}


class PinnedUpload:
    """`reader.tensor(path, key)` -> that tensor on `device`; `close()` waits for the copies and frees the
    buffers and files. Not thread-safe: one loader at a time."""

    def __init__(self, paths: set[Path], device: torch.device, pinned: bool = True,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        self.device = device
        self._files: dict[Path, tuple[BinaryIO, dict, int]] = {}  # path -> (file, header, data start)
        for path in paths:
            header, _ = safetensors_header(path)
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - held until close(), one per file; reads go direct
            self._files[path] = (f, header, 8 + int.from_bytes(f.read(8), "little"))
        self._buffers = [torch.empty(chunk_bytes, dtype=torch.uint8, pin_memory=pinned) for _ in range(2)]
        self._views = [memoryview(b.numpy()) for b in self._buffers]  # readinto's targets: the same memory
        self._done: list[torch.cuda.Event | None] = [None, None]  # each buffer's last copy, recorded
        self._turn = 0
        self._async = pinned and device.type == "cuda"

    def can_read(self, path: Path, key: str) -> bool:
        """Whether `key` is a tensor of a dtype this reader knows (else the caller's generic path serves)."""
        entry = self._files[path][1].get(key)
        return isinstance(entry, dict) and entry.get("dtype") in DTYPES

    def tensor(self, path: Path, key: str) -> torch.Tensor:
        f, header, data_start = self._files[path]
        entry = header[key]
        out = torch.empty(entry["shape"], dtype=DTYPES[entry["dtype"]], device=self.device)
        begin, end = entry["data_offsets"]
        target = out.reshape(-1).view(torch.uint8) if out.numel() else out  # [bytes] of the new tensor
        f.seek(data_start + begin)
        chunk = self._buffers[0].numel()
        for start in range(0, end - begin, chunk):
            size = min(chunk, end - begin - start)
            turn = self._turn
            if self._done[turn] is not None:
                self._done[turn].synchronize()  # this buffer's previous copy has left it
            _read_exactly(f, self._views[turn][:size], path, key)
            target[start:start + size].copy_(self._buffers[turn][:size], non_blocking=self._async)
            if self._async:
                self._done[turn] = torch.cuda.Event()
                self._done[turn].record(torch.cuda.current_stream(self.device))
            self._turn ^= 1
        return out

    def close(self) -> None:
        if self._async:
            torch.cuda.current_stream(self.device).synchronize()  # the last copies read the buffers
        for f, _, _ in self._files.values():
            f.close()
        self._files.clear()
        self._buffers.clear()
        self._views.clear()

    def __enter__(self) -> "PinnedUpload":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _read_exactly(f: BinaryIO, into: memoryview, path: Path, key: str) -> None:
    """Fill `into` from the file (a raw read may return less than asked)."""
    filled = 0
    while filled < len(into):
        n = f.readinto(into[filled:])
        if not n:
            raise OSError(f"{path} ended inside tensor {key!r}: the file changed while it was read")
        filled += n
