"""inferlab: fast, honestly measured batch inference of small language models on GPUs.

The public API is what this module exports; everything else is internal and may move.
"""

from inferlab.errors import CapacityError, ConfigError, InferlabError, InputError, UnsupportedError
from inferlab.types import Collect, ConstraintPressure, Request, Result, SamplingParams, Steer, Timings

__all__ = [
    "CapacityError",
    "Collect",
    "ConfigError",
    "ConstraintPressure",
    "InferlabError",
    "InputError",
    "Request",
    "Result",
    "SamplingParams",
    "Steer",
    "Timings",
    "UnsupportedError",
]
__version__ = "0.1.0"
