"""Reading a checkpoint's files the user supplied without trusting them: small files (config.json, an index,
a tokenizer's JSON) read up to a bound and only when they are regular files (a link to /dev/zero or a FIFO
is refused, never read until memory runs out or forever), and a safetensors file's header checked against
the file's size (a truncated download is named as such). Torch-free: the CLI runs it before any work, and
the weight loader reads only files that passed.

The safetensors layout: an 8-byte little-endian header length N, N bytes of JSON (tensor name -> dtype,
shape, data_offsets [begin, end) into the data that follows; "__metadata__"), then the data, which the
tensors' offsets cover exactly.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from inferlab.errors import InputError

SMALL_FILE_BYTES = 64 << 20  # far above any config.json, index or tokenizer file (a few MB at most)
HEADER_BYTES = 100 << 20  # the safetensors library's own limit on a header
_DAMAGED = "re-download or re-save the checkpoint"


def opened_regular_file(path: Path):
    """`path` opened for reading, refused unless it is a regular file (a device, a FIFO, a loop of links)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if path.is_symlink():
            raise InputError(f"{path} is a symbolic link to a file that does not exist; {_DAMAGED}") from None
        raise
    except OSError as e:
        raise InputError(f"{path} cannot be read ({e.strerror}); {_DAMAGED}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path} is not a regular file (a device, FIFO or folder); {_DAMAGED}")
    try:
        return path.open("rb")
    except OSError as e:
        raise InputError(f"{path} cannot be read ({e.strerror})") from None


def read_small_file(path: Path, limit: int = SMALL_FILE_BYTES) -> bytes:
    """The bytes of a small file of a checkpoint; FileNotFoundError when it is not there."""
    with opened_regular_file(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{path} is over {limit >> 20} MB, larger than any file of its kind; {_DAMAGED}")
    return data


def safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """(the header's JSON object, the file's size); InputError for a file that is not a whole safetensors file."""
    with opened_regular_file(path) as f:
        size = os.fstat(f.fileno()).st_size
        prefix = f.read(8)
        if len(prefix) < 8:
            raise InputError(f"{path} is {size} bytes, too short for a safetensors file (truncated); {_DAMAGED}")
        n = int.from_bytes(prefix, "little")
        if n > HEADER_BYTES or 8 + n > size:
            raise InputError(f"{path} is truncated or not a safetensors file (its header claims {n:,} bytes of a "
                             f"{size:,}-byte file); {_DAMAGED}")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        raise InputError(f"{path}: its safetensors header is not JSON; {_DAMAGED}") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: its safetensors header is not an object of tensors; {_DAMAGED}")
    data_bytes = size - 8 - n
    ends = [_data_end(path, name, entry, data_bytes) for name, entry in header.items() if name != "__metadata__"]
    if max(ends, default=0) != data_bytes:
        raise InputError(f"{path} holds {data_bytes:,} bytes of tensor data, its header {max(ends, default=0):,}: "
                         f"the file is truncated or padded; {_DAMAGED}")
    return header, size


def _data_end(path: Path, name: str, entry: Any, data_bytes: int) -> int:
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise InputError(f"{path}: tensor {name!r} has no valid data_offsets in the header; {_DAMAGED}")
    if offsets[1] > data_bytes:
        raise InputError(f"{path} is truncated: tensor {name!r} ends at byte {offsets[1]:,} of its data, the file "
                         f"holds {data_bytes:,}; {_DAMAGED}")
    return offsets[1]
