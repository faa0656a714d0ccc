"""`python -m inferlab.workloads.conformers.training build-data --out DIR` (CPU, RDKit) and
`... train --data DIR --out CKPT` (GPU; no RDKit): the reference model's recipe, one command per stage;
`... reproduce --data DIR --out CKPT` trains again and compares the result with the committed checkpoint.
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
    build.add_argument("--limit", type=int, default=None, help="only the first N molecules of each split (a trial)")
    train = verbs.add_parser("train", help="train the reference model on a data folder into a new checkpoint folder")
    train.add_argument("--data", type=Path, required=True, help="the folder build-data wrote")
    train.add_argument("--out", type=Path, required=True, help="the checkpoint folder to create")
    train.add_argument("--steps", type=int, default=None, help="steps (default: the recipe's; others make a trial)")
    train.add_argument("--budget-s", type=float, default=None, help="wall-clock limit of the loop (default: the "
                                                                       "recipe's); a run it stops is marked so")
    train.add_argument("--stereo-weight", type=float, default=None, help="the loss weight of stereo-deciding tokens "
                                                                           "(default: the recipe's; others: a trial)")
    train.add_argument("--hand-weight", type=float, default=None, help="the hand pairs' ranking loss, in tokens' "
                       "worth per pair (default: the recipe's, 0: none; others: a trial, train_loop.py)")
    train.add_argument("--layers", type=int, default=None, help="transformer layers (default: the recipe's shape; "
                                                                "others: a trial)")
    train.add_argument("--compile", action="store_true", help="the step under torch.compile (a trial: "
                       "compiled_loss.py)")
    train.add_argument("--device", default="auto", help="auto (CUDA when there is one), cuda or cpu")
    again = verbs.add_parser("reproduce", help="train again into a new folder and compare it with a checkpoint "
                                               "(default: the committed reference model)")
    again.add_argument("--data", type=Path, required=True, help="the folder build-data wrote")
    again.add_argument("--out", type=Path, required=True, help="the new checkpoint folder to create")
    again.add_argument("--reference", type=Path, default=None, help="the checkpoint to compare with (default: the "
                                                                   "committed one)")
    again.add_argument("--device", default="auto", help="auto (CUDA when there is one), cuda or cpu")
    probe = verbs.add_parser("probe", help="on a device, before training: determinism and speed of the recipe")
    probe.add_argument("--data", type=Path, required=True, help="the folder build-data wrote")
    probe.add_argument("--steps", type=int, default=40, help="steps to time (at least 30)")
    probe.add_argument("--compile", action="store_true", help="probe the step under torch.compile")
    probe.add_argument("--device", default="auto", help="auto, cuda or cpu")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    try:
        if args.verb == "build-data":
            from inferlab.workloads.conformers.training.data_build import BuildConfig, build_data

            build_data(BuildConfig(args.out, workers=args.workers, limit=args.limit))
        elif args.verb == "train":
            from dataclasses import replace

            from inferlab.workloads.conformers.training.model_shape import REFERENCE_SHAPE
            from inferlab.workloads.conformers.training.reference_training import train_reference
            from inferlab.workloads.conformers.training.train_loop import RECIPE

            config = replace(RECIPE, steps=args.steps or RECIPE.steps, budget_s=args.budget_s or RECIPE.budget_s,
                             stereo_weight=RECIPE.stereo_weight if args.stereo_weight is None
                             else args.stereo_weight, compile=args.compile,
                             hand_weight=RECIPE.hand_weight if args.hand_weight is None else args.hand_weight)
            shape = replace(REFERENCE_SHAPE, layers=args.layers or REFERENCE_SHAPE.layers)
            train_reference(args.data, args.out, config, shape, device=args.device)
        elif args.verb == "reproduce":
            import json

            from inferlab.workloads.conformers.reference_model import reference_model_dir
            from inferlab.workloads.conformers.training.reference_training import train_reference
            from inferlab.workloads.conformers.training.reproduction import compare_checkpoints

            reference = args.reference or reference_model_dir()
            train_reference(args.data, args.out, device=args.device)
            comparison = compare_checkpoints(args.out, reference)
            (args.out / "reproduction.json").write_text(json.dumps(comparison, indent=1) + "\n")
            logging.getLogger(__name__).info(
                "reproduction: %s (%d of %d tensors differ, largest |difference| %.3g); %s",
                "identical weights" if comparison["identical"] else "weights differ", comparison["tensors_differing"],
                comparison["tensors"], comparison["max_abs_difference"], args.out / "reproduction.json")
        else:
            import json

            from inferlab.workloads.conformers.training.reference_training import probe_reference

            logging.getLogger(__name__).info("probe: %s", json.dumps(probe_reference(
                args.data, args.steps, device=args.device, compile=args.compile)))
    except InferlabError as e:
        logging.getLogger(__name__).error("error: %s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
