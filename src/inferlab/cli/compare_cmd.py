"""`inferlab compare RUN_A RUN_B`: the same cells of two runs side by side, with deltas."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare two runs cell by cell (headline figure, delta, delta %%)")
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--markdown", action="store_true",
                   help="print the whole comparison as a Markdown table (the text output fits 100 columns)")
    p.set_defaults(func=_compare)


def _compare(args: argparse.Namespace) -> int:
    from inferlab.bench.compare import compare_rows, format_comparison
    from inferlab.bench.results import load_rows

    print(format_comparison(compare_rows(load_rows([args.run_a]), load_rows([args.run_b])), args.run_a, args.run_b,
                            markdown=args.markdown))
    return 0
