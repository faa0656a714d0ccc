"""`--device`, checked while the flags are parsed: a name no command can run on (`--device tpu`) is a usage
error naming the choices, before anything is loaded."""

from __future__ import annotations

import argparse
import re

DEVICE_HELP = "auto (cuda if available), cpu, cuda, cuda:N"


def device_name(text: str) -> str:
    value = text.strip().lower()
    if value in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", value):
        return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a device inferlab runs on; use auto, cpu, cuda or cuda:N")


def add_device_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--device", type=device_name, default="auto", help=DEVICE_HELP)
