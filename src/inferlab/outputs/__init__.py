"""Writing outputs without losing any: whole-file writes through a temporary file and a rename
(atomic.py), one run per output at a time (lock.py), the job that made an output recorded beside it and
checked before it is resumed (manifest.py), and the guard every writing command runs under (guard.py).
Imports nothing of inferlab but its errors, so every layer may use it."""
