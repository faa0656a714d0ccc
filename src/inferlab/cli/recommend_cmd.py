"""`inferlab recommend RUN...`: the best configuration per GPU, scenario, model and batch size, with the
margin to the runner-up, from measured rows only."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recommend", help="best configuration per GPU/scenario/model/batch size, with the margin to the runner-up")
    p.add_argument("runs", nargs="+", metavar="RUN")
    p.add_argument("--markdown", action="store_true",
                   help="print the whole table as Markdown (the text output is a block per recommendation, 100 "
                        "columns wide; a configuration's rows in several runs are its repeats)")
    p.set_defaults(func=_recommend)


def _recommend(args: argparse.Namespace) -> int:
    from inferlab.bench.recommend import format_markdown, format_text, recommend
    from inferlab.bench.results import load_rows

    recs = recommend(load_rows(args.runs))
    print(format_markdown(recs) if args.markdown else format_text(recs))
    return 0
