"""Which encode backend runs `inferlab classify` / `inferlab hidden-states` (workloads/encode_backends.py), and
opening it.

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
from inferlab.workloads.backend import Backend
from inferlab.workloads.classify import require_classification_head
from inferlab.workloads.encode_backends import EncodeSpec, EngineEncodeBackend, HFEncodeBackend
from inferlab.workloads.hf_loading import ModelLoadConfig, hf_fallback_fix, load_tokenizer
from inferlab.workloads.hidden_states import HiddenStatesOptions
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
            raise UnsupportedError(f"--backend inferlab: {why_not}; {hf_fallback_fix(load.model_dir)}")
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


def open_encode_backend(choice: BackendChoice, load: ModelLoadConfig, request: WorkloadBackend, spec: EncodeSpec,
                        max_length: int | None = None, pad_id: int | None = None) -> Backend:
    """The chosen encode backend (workloads/encode_backends.py), loaded: transformers with `load`'s attention and
    quantization, or the engine with the request's knobs, its dtype and device as transformers would load them
    (pad_id: classify reads each row's last token that is not it)."""
    if choice.name == "hf":
        backend: Backend = HFEncodeBackend(spec, load.attn, load.quantization)
    else:
        options = {"weights": request.weights, "max_batch_tokens": request.max_batch_tokens or ENGINE_MAX_BATCH_TOKENS,
                   "max_length": max_length, "pad_id": pad_id}
        backend = EngineEncodeBackend(spec, options, request.max_batch_latency_ms)
    backend.load(load.model_dir, load.device, load.dtype)
    return backend


def open_classifier(load: ModelLoadConfig, request: WorkloadBackend, max_length: int | None = None):
    """(the classifier classify_file runs: the transformers backend's Classifier, or the engine's
    EngineClassifier over its encode backend; the BackendChoice)."""
    spec = EncodeSpec("classify")
    choice = choose_backend(request, load, spec.task)
    if choice.name == "hf":
        return open_encode_backend(choice, load, request, spec).classifier, choice
    from inferlab.workloads.classify_engine import EngineClassifier

    require_classification_head(load.model_dir)
    tokenizer = load_tokenizer(load.model_dir)  # its pad id, as transformers' classifier reads it
    backend = open_encode_backend(choice, load, request, spec, max_length, tokenizer.pad_token_id)
    return EngineClassifier(backend, tokenizer, request.packed()), choice


def open_hidden_states(load: ModelLoadConfig, request: WorkloadBackend, options: HiddenStatesOptions):
    """(what collect_hidden_states runs: the transformers backend's LoadedModel, or the engine's
    EngineHiddenStates over its encode backend; the BackendChoice)."""
    spec = EncodeSpec("hidden-states", options.layers, options.pool)
    choice = choose_backend(request, load, spec.task)
    if choice.name == "hf":
        return open_encode_backend(choice, load, request, spec).loaded, choice
    from inferlab.workloads.hidden_states_engine import EngineHiddenStates

    tokenizer = load_tokenizer(load.model_dir)
    backend = open_encode_backend(choice, load, request, spec, options.max_length)
    return EngineHiddenStates(backend, tokenizer, request.packed()), choice
