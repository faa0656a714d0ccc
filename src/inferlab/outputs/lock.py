"""One run per output at a time: an exclusive flock on a lock file beside the output.

The lock is taken without waiting: a second run on the same output is refused at once with the first
run's process id. The operating system drops a flock when its holder ends in any way (SIGKILL included),
so a killed run never leaves its output locked; the lock file is removed when the run releases it (a
killed run's stays behind and the next run takes it over), and so is the folder made for it if the run
left it empty. Taking the lock checks that the file locked is still the one at the path, so a run that
releases and removes it while another opens it cannot let two runs in.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from inferlab.errors import ConfigError, write_failed


class OutputLock:
    def __init__(self, lock_path: str | Path, what: str) -> None:
        self.path = Path(lock_path)
        self.what = what  # what the lock protects, for the message: "out.sdf", "the run folder runs/x"
        self._fd: int | None = None
        self._made_folder = False

    def acquire(self) -> None:
        try:
            self._acquire()
        except OSError as e:  # a read-only folder, no permission, a full disk
            self.release()
            raise write_failed(self.path, e) from None

    def _acquire(self) -> None:
        self._made_folder = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise ConfigError(
                    f"another inferlab run (process {holder}) is writing {self.what}; wait for it to end, or write "
                    "to another output"
                ) from None
            if _same_file(fd, self.path):  # not removed by a run that released it meanwhile
                break
            os.close(fd)
        self._fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # while still held: a run waiting on the old file sees it gone
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
        if self._made_folder and not any(self.path.parent.iterdir()):
            self.path.parent.rmdir()  # the run made the folder for its lock and wrote nothing into it

    def __enter__(self) -> "OutputLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)
