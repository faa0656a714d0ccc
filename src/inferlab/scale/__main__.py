"""`python -m inferlab.scale TASK.json`: run one shard task in this process (the local launcher's worker;
its stdout and stderr already go to the shard's log file). Exit 0 when the shard is done, 2 for a user
error (its message printed), 1 for anything else (the traceback is in the log)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from inferlab.child_processes import die_with_parent_from_environment
from inferlab.errors import InferlabError
from inferlab.scale.worker import ShardTask, run_shard


def main(argv: list[str]) -> int:
    die_with_parent_from_environment()  # the local launcher's coordinator
    if len(argv) != 1:
        print("usage: python -m inferlab.scale TASK.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    task = ShardTask.from_json(Path(argv[0]).read_text(encoding="utf-8"))
    try:
        run_shard(task, capture_log=False)
    except InferlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception:  # logged with its traceback by run_shard
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
