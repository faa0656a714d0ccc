"""Which backend runs `inferlab classify` / `inferlab hidden-states`, and opening it.

`--backend auto` (the default) takes the engine (inferlab.engine.Encoder: packed prefill) when it runs the
checkpoint's architecture for the task and no transformers-only option was asked for (`--quantization`:
torchao), and transformers otherwise; the choice and its reason are returned for the CLI to say.
`inferlab` insists on the engine (an architecture it does not run is an UnsupportedError naming the
fallback), `hf` on transformers (the lab's baseline). `WorkloadBackend` carries the request and the
engine's knobs (plain values: scale hands them to its workers).
"""

from __future__ import annotations

from dataclasses import dataclass

from inferlab.errors import ConfigError, UnsupportedError
from inferlab.workloads.hf_loading import ModelLoadConfig
from inferlab.workloads.packed_run import PackedOptions

BACKENDS = ("auto", "inferlab", "hf")
ENGINE_MAX_BATCH_TOKENS = 32768  # the engine's default token budget of one packed batch


@dataclass(frozen=True)
class WorkloadBackend:
    backend: str = "auto"
    weights: str = "auto"  # the engine's weights: "auto" (the model dtype) or "fp8"
    max_batch_tokens: int | None = None  # tokens of one packed batch (None: ENGINE_MAX_BATCH_TOKENS)
    max_rows: int | None = None  # rows of one packed batch (None: the token budget decides)
    max_batch_latency_ms: float | None = None  # cap a packed batch's expected time (lower p95, fewer samples/s)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"--backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if self.backend == "hf" and self.weights != "auto":
            raise ConfigError("--weights fp8 is the engine's (--backend inferlab or auto); transformers quantizes with "
                              "--quantization fp8 (torchao)")
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise ConfigError(f"the engine needs a token budget: --max-batch-tokens {self.max_batch_tokens} must be >= 1")
        PackedOptions(self.max_rows, self.max_batch_latency_ms)  # validates both

    def packed(self, chunk_rows: int = PackedOptions.chunk_rows) -> PackedOptions:
        return PackedOptions(self.max_rows, self.max_batch_latency_ms, chunk_rows)


@dataclass(frozen=True)
class BackendChoice:
    name: str  # "inferlab" or "hf"
    reason: str  # one line for the user


def choose_backend(request: WorkloadBackend, load: ModelLoadConfig, task: str) -> BackendChoice:
    """`task`: "classify" or "hidden-states"."""
    if request.backend == "hf":
        return BackendChoice("hf", "--backend hf")
    from inferlab.engine import encoder_support

    why_not = encoder_support(load.model_dir, task)
    if request.backend == "inferlab":
        if why_not:
            raise UnsupportedError(f"--backend inferlab: {why_not}")
        return BackendChoice("inferlab", "--backend inferlab")
    if load.quantization != "none":
        if request.weights != "auto":
            raise ConfigError("--quantization (transformers, torchao) and --weights (the engine) exclude each other")
        return BackendChoice("hf", f"--quantization {load.quantization} is transformers' (torchao)")
    if why_not:
        if request.weights != "auto":
            raise UnsupportedError(f"--weights {request.weights} needs the engine, which cannot run this checkpoint: "
                                   f"{why_not}")
        return BackendChoice("hf", f"the engine does not run this checkpoint ({why_not})")
    return BackendChoice("inferlab", "the engine runs this checkpoint (packed prefill)")


def encoder_config(load: ModelLoadConfig, request: WorkloadBackend, task: str, max_length: int | None):
    """The engine's EncoderConfig for a workload run (its dtype and device as transformers would load them)."""
    from inferlab.engine import EncoderConfig

    return EncoderConfig(model=load.model_dir, task=task, device=load.device, dtype=load.dtype, weights=request.weights,
                         max_batch_tokens=request.max_batch_tokens or ENGINE_MAX_BATCH_TOKENS, max_length=max_length)


def open_classifier(load: ModelLoadConfig, request: WorkloadBackend, max_length: int | None = None):
    """(the classifier classify_file runs, the BackendChoice)."""
    choice = choose_backend(request, load, "classify")
    if choice.name == "hf":
        from inferlab.workloads.classify import load_classifier

        return load_classifier(load), choice
    from inferlab.workloads.classify_engine import load_engine_classifier

    return load_engine_classifier(encoder_config(load, request, "classify", max_length), request.packed()), choice


def open_hidden_states(load: ModelLoadConfig, request: WorkloadBackend, max_length: int | None = None):
    """(a transformers LoadedModel for collect_hidden_states, or the engine's EngineHiddenStates; the choice)."""
    choice = choose_backend(request, load, "hidden-states")
    if choice.name == "hf":
        from inferlab.workloads.hidden_states import load_base_model

        return load_base_model(load), choice
    from inferlab.workloads.hidden_states_engine import load_engine_hidden_states

    return load_engine_hidden_states(encoder_config(load, request, "hidden-states", max_length), request.packed()), choice
