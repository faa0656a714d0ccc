"""`python -m inferlab.workloads.conformers.training build-data --out DIR` (CPU, RDKit) and
`... train --data DIR --out CKPT` (GPU; no RDKit): the reference model's recipe, one command per stage.
Progress goes to stderr through logging; an InferlabError ends the command with its message (exit 2)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from inferlab.errors import InferlabError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferlab.workloads.conformers.training", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    build = verbs.add_parser("build-data", help="molecules, ETKDG conformer texts, the reduced tokenizer, token stores")
    build.add_argument("--out", type=Path, required=True, help="the data folder (its work folder is OUT.work)")
    build.add_argument("--workers", type=int, default=2, help="processes making conformer texts (0: this one)")
    build.add_argument("--limit", type=int, default=None, help="only the first N candidate molecules (a trial)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    try:
        if args.verb == "build-data":
            from inferlab.workloads.conformers.training.data_build import BuildConfig, build_data

            build_data(BuildConfig(args.out, workers=args.workers, limit=args.limit))
    except InferlabError as e:
        logging.getLogger(__name__).error("error: %s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
