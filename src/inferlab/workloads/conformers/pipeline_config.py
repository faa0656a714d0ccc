"""Settings of the conformer generation pipeline (pipeline.py): how conformers are sampled and how the
job is run around the engine. Frozen and validated here; the engine's own knobs (device, dtype, slots,
length, memory) stay EngineConfig fields, passed beside these as `engine_options`.

Not here: running anything.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from inferlab.errors import ConfigError
from inferlab.types import SamplingParams
from inferlab.workloads.conformers.profiles import DEFAULT_PROFILE, get_profile

SAMPLING_MODES = ("greedy", "top-p")
MAX_DEFAULT_WORKERS = 8  # template + compile processes when not told: ~25 ms per molecule each keeps a GPU fed
INLINE_BELOW_MOLECULES = 64  # automatic worker count: fewer molecules are prepared in this process
MIN_WAVE_REQUESTS = 1024
WAVE_SLOTS = 16  # a wave holds at least this many batches' worth of requests (see PipelineConfig.wave_requests)


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
    # Requests handed to one Engine.stream call. The engine takes a call's requests before it decodes, so
    # the pipeline feeds it in waves while the pool prepares the next; each wave ends with a drain (rows
    # finishing with no replacement). None: max(1024, 16 x the engine's slots): drains cost a few percent.
    wave_requests: int | None = None
    lookahead_waves: float = 2.0  # molecules prepared ahead of the wave being built, in waves
    cpu_cores: int | None = None  # cores the automatic worker count may use (None: this process's; scale-out
    # workers get their share of the host)
    smiles_column: str | None = None  # .csv/.tsv inputs; None: detected
    id_column: str | None = None
    rows_output: str | None = None  # the JSONL beside the SDF; None: the SDF path with .jsonl

    def __post_init__(self) -> None:
        if not isinstance(self.num_conformers, int) or self.num_conformers < 1:
            raise ConfigError(f"num_conformers={self.num_conformers!r} must be an integer >= 1")
        get_profile(self.profile)  # ConfigError naming the known profiles
        if self.workers is not None and self.workers < 0:
            raise ConfigError(f"workers={self.workers} must be >= 0 (0: prepare molecules in this process)")
        if self.wave_requests is not None and self.wave_requests < 1:
            raise ConfigError(f"wave_requests={self.wave_requests} must be >= 1 (or None for the default)")
        if self.cpu_cores is not None and self.cpu_cores < 1:
            raise ConfigError(f"cpu_cores={self.cpu_cores} must be >= 1 (or None)")
        if self.lookahead_waves <= 0:
            raise ConfigError(f"lookahead_waves={self.lookahead_waves} must be > 0")

    def pool_workers(self, molecules: int) -> int:
        """Processes for `molecules` to prepare: a pool costs seconds to start (each process imports torch and
        builds its GrammarSet), so a small job prepares in this process."""
        if self.workers is not None:
            return self.workers
        return default_workers(self.cpu_cores) if molecules >= INLINE_BELOW_MOLECULES else 0

    def wave_size(self, engine_slots: int | None) -> int:
        """Requests per wave; before the engine exists (slots None), the smallest default."""
        if self.wave_requests is not None:
            return self.wave_requests
        return max(MIN_WAVE_REQUESTS, WAVE_SLOTS * (engine_slots or 0))

    def lookahead_molecules(self, wave_size: int) -> int:
        return max(1, math.ceil(self.lookahead_waves * wave_size / self.num_conformers))
