"""`inferlab report RUN...`: Markdown tables and PNG plots from result rows."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write a Markdown report and PNG plots from run directories or .jsonl files")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or results .jsonl files)")
    p.add_argument("--baseline", help="speedups against KNOB=VALUE, e.g. attn_implementation=eager (default: first configuration)")
    p.add_argument("--out", "--output", dest="out",
                   help="output folder (default: RUN/report for one run directory, else ./report)")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from inferlab.bench.report import write_report
    from inferlab.cli.paths import output_folder
    from inferlab.bench.results import load_rows

    rows = load_rows(args.runs)
    first = Path(args.runs[0])
    out = Path(args.out) if args.out else (first / "report" if len(args.runs) == 1 and first.is_dir() else Path("report"))
    output_folder("--out", out)
    path = write_report(args.runs, rows, out, args.baseline)
    print(f"wrote {path} ({len(rows)} rows)")
    for png in sorted((out / "plots").glob("*.png")):
        print(f"wrote {png}")
    return 0
