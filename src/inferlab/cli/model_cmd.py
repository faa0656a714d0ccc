"""`inferlab model init`: write a random-weight checkpoint of a named preset."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    model = sub.add_parser("model", help="model checkpoints: init a random-weight preset, list presets")
    msub = model.add_subparsers(dest="model_command", required=True, metavar="ACTION")

    init = msub.add_parser("init", help="write a random-weight HuggingFace checkpoint of a preset shape")
    init.add_argument("--preset", required=True, help="preset name (see `inferlab model presets`)")
    init.add_argument("--out", "--output", dest="out", required=True, help="output directory (must be new or empty)")
    init.add_argument("--seed", type=int, default=0)
    init.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    init.add_argument("--tokenizer", default=None, help="a HuggingFace tokenizer folder (default: built-in BPE)")
    init.set_defaults(func=_init)

    presets = msub.add_parser("presets", help="list the preset shapes")
    presets.set_defaults(func=_presets)


def _init(args: argparse.Namespace) -> int:
    from inferlab.cli.paths import output_folder
    from inferlab.models.checkpoint_init import init_checkpoint

    output_folder("--out", args.out)
    out = init_checkpoint(args.preset, args.out, seed=args.seed, dtype=args.dtype, tokenizer_dir=args.tokenizer)
    print(f"wrote {out}")
    return 0


def _presets(args: argparse.Namespace) -> int:
    from inferlab.models.presets import PRESETS

    width = max(len(n) for n in PRESETS)
    for p in PRESETS.values():
        print(f"{p.name:<{width}}  {p.task:<24}  {p.description}")
    return 0
