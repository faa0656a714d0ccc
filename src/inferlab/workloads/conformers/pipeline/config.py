"""Settings of the conformer generation pipeline (generate.py): how conformers are sampled and how the
job is run around the engine. Frozen and validated here; the engine's own knobs (device, dtype, slots,
length, memory) stay the EngineConfig's, passed beside these. `result_settings`: what of both changes the rows.

Not here: running anything.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError
from inferlab.types import SamplingParams
from inferlab.workloads.conformers.chemistry.input_bounds import InputBounds
from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE, get_profile

SAMPLING_MODES = ("greedy", "top-p")
# Settings whose change changes the rows: a rerun with other values is refused (slots, workers, judges and
# memory only change the speed; a request's tokens depend on its seed, not on its batch). max_seq_len is
# not one: it only decides which molecules fit a row, and one that does not is an error row advising a
# larger --max-seq-len with --retry-errors (which is not one either: it reruns those rows), so that rerun
# resumes; an ok row is the same at any length.
RESULT_SETTINGS = ("num_conformers", "profile", "sampling", "seed", "stereo_mirror", "stereo_retries", "smiles_column",
                   "id_column")
MAX_DEFAULT_WORKERS = 8  # template + compile processes when not told (docs/decisions.md)
INLINE_BELOW_MOLECULES = 64  # automatic worker counts: smaller jobs prepare and judge in this process
DEFAULT_JUDGE_WORKERS = 2  # judging processes when not told (docs/decisions.md)
MIN_LOOKAHEAD_REQUESTS = 1024
LOOKAHEAD_SLOTS = 4  # molecules prepared ahead: at least this many batches' worth of requests


@dataclass(frozen=True)
class ConformerSampling:
    """greedy: the argmax (K identical conformers, for checks); top-p: temperature and nucleus sampling,
    each conformer with its own seed derived from the run's seed and its row id."""

    mode: str = "top-p"
    temperature: float = 1.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in SAMPLING_MODES:
            raise ConfigError(f"sampling {self.mode!r} is not one of {', '.join(SAMPLING_MODES)}")
        if self.mode == "top-p":
            self.params()  # SamplingParams validates temperature and top_p with its own messages
            if self.temperature == 0:
                raise ConfigError("temperature 0 is greedy decoding; use --sampling greedy")
        elif (self.temperature, self.top_p) != (1.0, 1.0):
            raise ConfigError(f"--sampling greedy takes the argmax: temperature={self.temperature} and "
                              f"top_p={self.top_p} would be ignored; drop them or use --sampling top-p")

    def params(self) -> SamplingParams:
        """The engine's sampling parameters (the constraint program sets the lengths)."""
        if self.mode == "greedy":
            return SamplingParams(temperature=0.0)
        return SamplingParams(temperature=self.temperature, top_p=self.top_p)

    def describe(self) -> str:
        return "greedy" if self.mode == "greedy" else f"top-p {self.top_p} at temperature {self.temperature}"


def default_workers(cores: int | None = None) -> int:
    """min(8, cores), cores defaulting to those this process may run on."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_DEFAULT_WORKERS, cores))


@dataclass(frozen=True)
class PipelineConfig:
    num_conformers: int  # K conformers per molecule
    profile: str = DEFAULT_PROFILE
    sampling: ConformerSampling = field(default_factory=ConformerSampling)
    seed: int = 0  # the engine seed: conformer `<id>#<k>` samples with a seed derived from (seed, its row id)
    workers: int | None = None  # template/compile processes; None: min(8, cores), in-process below 64 molecules
    # Processes judging finished conformers (strict check, plain decoding, stereo, SDF record) off the
    # engine's path; None: 2 (at most the cores), in-process below 64 molecules; 0: in this process.
    judge_workers: int | None = None
    # A conformer whose coordinates contradict the input's specified stereo and whose mirror image does not is
    # written mirrored (judge.py; the row says `mirrored`).
    stereo_mirror: bool = True
    # A conformer whose coordinates (mirrored or not) contradict the input's specified stereo is generated
    # again, with a new seed, up to this many times; the row records its attempts.
    stereo_retries: int = 0
    retry_errors: bool = False  # the error rows of earlier runs are generated again (each replaced)
    # A ceiling for --max-num-seqs auto (an `inferlab tune` file's max_slots, measured on its sample): as many
    # rows as memory holds at this job's row length, up to it; None: auto's own cap (engine_sizing.py).
    row_ceiling: int | None = None
    # Molecules the pool prepares ahead of the requests handed to the engine, in requests' worth;
    # None: max(1024, 4 x the engine's slots).
    lookahead_requests: int | None = None
    cpu_cores: int | None = None  # cores the automatic worker counts may use (None: this process's; scale-out
    # workers get their share of the host)
    smiles_column: str | None = None  # .csv/.tsv inputs; None: detected
    id_column: str | None = None
    input_bounds: InputBounds = field(default_factory=InputBounds)  # a line or molecule over them: an error row
    rows_output: str | None = None  # the JSONL beside the SDF; None: the SDF path with .jsonl

    def __post_init__(self) -> None:
        if not isinstance(self.num_conformers, int) or self.num_conformers < 1:
            raise ConfigError(f"num_conformers={self.num_conformers!r} must be an integer >= 1")
        get_profile(self.profile)  # ConfigError naming the known profiles
        if self.workers is not None and self.workers < 0:
            raise ConfigError(f"workers={self.workers} must be >= 0 (0: prepare molecules in this process)")
        if self.judge_workers is not None and self.judge_workers < 0:
            raise ConfigError(f"judge_workers={self.judge_workers} (--judge-workers) must be >= 0 "
                              "(0: judge in this process)")
        if not isinstance(self.stereo_retries, int) or self.stereo_retries < 0:
            raise ConfigError(f"stereo_retries={self.stereo_retries!r} (--stereo-retries) must be an integer >= 0")
        if self.row_ceiling is not None and (not isinstance(self.row_ceiling, int) or self.row_ceiling < 1):
            raise ConfigError(f"row_ceiling={self.row_ceiling!r} (a tune file's max_slots) must be an integer >= 1")
        if self.stereo_retries and self.sampling.mode == "greedy":
            raise ConfigError("stereo retries with greedy decoding would draw the same conformer every attempt; "
                              "use --sampling top-p, or --stereo-retries 0")
        if self.lookahead_requests is not None and self.lookahead_requests < 1:
            raise ConfigError(f"lookahead_requests={self.lookahead_requests} must be >= 1 (or None for the default)")
        if self.cpu_cores is not None and self.cpu_cores < 1:
            raise ConfigError(f"cpu_cores={self.cpu_cores} must be >= 1 (or None)")

    def pool_workers(self, molecules: int) -> int:
        """Processes for `molecules` to prepare: a pool costs seconds to start (each process imports torch and
        builds its GrammarSet), so a small job prepares in this process."""
        if self.workers is not None:
            return self.workers
        return default_workers(self.cpu_cores) if molecules >= INLINE_BELOW_MOLECULES else 0

    def judge_pool_workers(self, molecules: int) -> int:
        """Processes judging finished conformers; a small job judges in this process."""
        if self.judge_workers is not None:
            return self.judge_workers
        if molecules < INLINE_BELOW_MOLECULES:
            return 0
        return min(DEFAULT_JUDGE_WORKERS, default_workers(self.cpu_cores))

    def lookahead_molecules(self, engine_slots: int | None) -> int:
        """Molecules to keep prepared ahead; before the engine exists (slots None), the smallest default."""
        requests = self.lookahead_requests or max(MIN_LOOKAHEAD_REQUESTS, LOOKAHEAD_SLOTS * (engine_slots or 0))
        return max(1, math.ceil(requests / self.num_conformers))


def result_settings(engine: Any, config: PipelineConfig) -> dict[str, Any]:
    """The settings that change a run's rows (the output manifest's; see RESULT_SETTINGS) of a run with
    `engine` (its EngineConfig) and `config`. The KV cache's dtype as asked (auto, model or fp8): an FP8 cache
    changes what the model writes, so a rerun that asks another one is refused, not mixed into the rows."""
    pipeline = dataclasses.asdict(config)
    return {
        "model": str(Path(engine.model).resolve()),
        **{key: pipeline.get(key) for key in RESULT_SETTINGS},
        "dtype": engine.dtype,
        "kv_dtype": engine.kv_dtype,
    }
