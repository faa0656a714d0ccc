"""Load a HuggingFace checkpoint and its tokenizer for the transformers-backed workloads.

Owns: the load knobs shared by classify, hidden states and HF text generation (dtype, attention
implementation, quantization, device), their validation, the transformers 4.x / 5.x differences in
`from_pretrained` (safetensors weights only, checked whole first, as the engine reads them: a pickled
checkpoint can run code as it loads), and a pad token for batched inference. Does not own: what the model
is run for.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from packaging.version import Version

from inferlab.errors import ConfigError, InputError, UnsupportedError
from inferlab.models.checkpoint_check import weight_files
from inferlab.models.config_file import read_config
from inferlab.workloads.quantization import check_quantization_available, quantize_model, validate_quantization_name

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
# transformers 4.56 renamed from_pretrained's torch_dtype to dtype (5.x warns on the old name).
_DTYPE_KWARG = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
# model types whose attention soft-caps its scores (cap * tanh(scores / cap)): only eager (or flash-attn's
# softcap) computes them; Gemma 3 configs carry attn_logit_softcapping too, but its attention never applies it
SOFTCAPPED_ATTENTION = ("gemma2",)


@dataclass(frozen=True)
class ModelLoadConfig:
    model_dir: str
    dtype: str = "auto"  # "auto": bfloat16 on CUDA, float32 on CPU
    attn: str = "sdpa"
    quantization: str = "none"  # see quantization.QUANTIZATIONS
    device: str = "auto"  # "auto": cuda if available, else cpu; or "cpu", "cuda", "cuda:1"

    def __post_init__(self) -> None:
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ConfigError(f"dtype {self.dtype!r} is not supported; use auto or one of {', '.join(DTYPES)}")
        if self.attn not in ATTN_IMPLEMENTATIONS:
            raise ConfigError(f"attention {self.attn!r} is not supported; use one of {', '.join(ATTN_IMPLEMENTATIONS)}")
        validate_quantization_name(self.quantization)
        if self.device != "auto":
            try:
                torch.device(self.device)
            except RuntimeError:
                raise ConfigError(f"device {self.device!r} is not a torch device; use auto, cpu or cuda[:N]") from None


@dataclass
class LoadedModel:
    """A model ready for inference (eval mode, on its device) and what was really loaded."""

    model: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    attn: str  # the attention implementation transformers reports after loading
    quantization: str
    quantized_layers: int
    load_s: float
    model_dir: str

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    def describe(self) -> dict[str, Any]:
        return {
            "model_dir": self.model_dir,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "attn": self.attn,
            "quantization": self.quantization,
            "quantized_layers": self.quantized_layers,
            "load_s": round(self.load_s, 3),
        }


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[name]


def check_model_dir(model_dir: str | Path) -> Path:
    path = Path(model_dir)
    read_config(path)  # the folder, and a JSON object with sizes in range before transformers sizes anything by it
    return path


ENGINE_FAMILIES = ("a checkpoint of an architecture the inferlab engine runs (Llama, Mistral, Qwen2, Qwen3, "
                   "Gemma 1-3: `inferlab model presets`)")


def transformers_problem(model_dir: str | Path) -> str | None:
    """Why transformers cannot load the checkpoint (a model_type it does not know, or model code shipped in the
    checkpoint, config.json auto_map, which is never run), with the fix; None when it can."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    path = check_model_dir(model_dir)
    config = read_config(path)
    model_type, architectures = config.get("model_type"), config.get("architectures") or ["?"]
    version = transformers.__version__
    if config.get("auto_map"):
        return (f"{path} ships its own model code (config.json auto_map), which inferlab never runs; use a checkpoint "
                f"of a model transformers {version} has, or {ENGINE_FAMILIES}")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING_NAMES:
        what = f"model_type {model_type!r}" if isinstance(model_type, str) else "no model_type"
        return (f"{path} ({architectures[0]}) has {what}, which transformers {version} does not know: pip install -U "
                f"transformers if it is newer, or use {ENGINE_FAMILIES}")
    return None


def check_transformers_knows(model_dir: str | Path) -> Path:
    """check_model_dir, and UnsupportedError naming the fix where transformers_problem finds one (transformers'
    own error would be a traceback)."""
    path = check_model_dir(model_dir)
    problem = transformers_problem(path)
    if problem is not None:
        raise UnsupportedError(problem)
    return path


def hf_fallback_fix(model_dir: str | Path) -> str:
    """What to tell a user the engine refused: `--backend hf` where transformers runs the checkpoint, else why
    transformers cannot either."""
    problem = transformers_problem(model_dir)
    if problem is None:
        return "--backend hf (transformers, or auto: the engine where it can) runs it"
    return f"transformers cannot run it either: {problem}"


def _check_attn_available(attn: str, device: torch.device) -> None:
    if attn != "flash_attention_2":
        return
    if device.type != "cuda":
        raise UnsupportedError("flash_attention_2 runs on CUDA only; use --attn sdpa on this device")
    if importlib.util.find_spec("flash_attn") is None:
        raise UnsupportedError("flash_attention_2 needs the flash-attn package, which is not installed; use --attn sdpa")


def text_config_of(config):
    """The language-model part of a (possibly multimodal) transformers config."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def model_max_positions(model) -> int | None:
    return int(getattr(text_config_of(model.config), "max_position_embeddings", 0) or 0) or None


def resolve_max_length(requested: int | None, model_max: int | None) -> int:
    """The token limit of one row: `requested`, else the model's positions; never past the model's."""
    if requested is None:
        if model_max is None:
            raise ConfigError("the model config has no max_position_embeddings; pass --max-length")
        return model_max
    if model_max is not None and requested > model_max:
        raise ConfigError(f"--max-length {requested} is over the model's {model_max} positions; lower it")
    return requested


def ensure_tokenizer_pad(tokenizer) -> int:
    """Batched inference needs a pad token: keep the tokenizer's, else reuse EOS. Returns the pad id."""
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise InputError("the tokenizer has neither a pad nor an EOS token; add a pad token to the checkpoint")
        tokenizer.pad_token = tokenizer.eos_token
        log.info("tokenizer has no pad token; padding with EOS (%r)", tokenizer.eos_token)
    return int(tokenizer.pad_token_id)


def load_tokenizer(model_dir: str | Path):
    """The checkpoint's tokenizer with a pad token (ensure_tokenizer_pad), for a model loaded elsewhere."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(check_transformers_knows(model_dir)))
    ensure_tokenizer_pad(tokenizer)
    return tokenizer


def ensure_pad_token(tokenizer, model) -> int:
    """ensure_tokenizer_pad, and tell the model config too (sequence classifiers find each row's last real
    token through config.pad_token_id)."""
    pad_id = ensure_tokenizer_pad(tokenizer)
    model.config.pad_token_id = pad_id
    text_config_of(model.config).pad_token_id = pad_id
    return pad_id


def attention_for(model_dir: str | Path, attn: str | None) -> str | None:
    """The attention implementation to load `model_dir` with: `attn`, unless the model soft-caps its attention
    scores (SOFTCAPPED_ATTENTION), which SDPA cannot do: then None (transformers' default) means eager, and
    sdpa is refused: some transformers versions run SDPA on a soft-capped model and silently drop the cap
    (docs/decisions.md)."""
    from transformers import AutoConfig

    model_type = getattr(text_config_of(AutoConfig.from_pretrained(str(model_dir))), "model_type", None)
    if model_type not in SOFTCAPPED_ATTENTION:
        return attn
    if attn == "sdpa":
        raise UnsupportedError(
            f"{model_type} soft-caps its attention scores, which sdpa cannot do (transformers before 5.24 would "
            "silently drop the cap and compute other logits); use --attn eager (lab knob attn_implementation=eager)"
        )
    return attn or "eager"


def from_pretrained_for_inference(auto_class, model_dir: str | Path, dtype: torch.dtype, attn: str | None,
                                  device: torch.device):
    """`auto_class.from_pretrained` in `dtype` (with this transformers' keyword for it) and attention `attn`
    (None: transformers' default for the model, eager for a soft-capped one: attention_for), moved to
    `device`, in eval mode. The caller checks first that `attn` can run here."""
    attn = attention_for(model_dir, attn)
    weight_files(Path(model_dir))  # safetensors only, as the engine: a pickle file can run code when loaded
    model = auto_class.from_pretrained(str(model_dir), **{_DTYPE_KWARG: dtype}, attn_implementation=attn,
                                       use_safetensors=True)
    return model.to(device).eval()


def load_hf_model(config: ModelLoadConfig, auto_class) -> LoadedModel:
    """Load `config.model_dir` with `auto_class` (e.g. AutoModelForSequenceClassification) for inference.

    Raises InputError for a missing checkpoint, UnsupportedError for an attention implementation or a
    quantization this machine cannot run (checked before the weights are read).
    """
    from transformers import AutoTokenizer

    from inferlab.engine import resolve_device  # the engine's rule, so both backends read --device alike

    path = check_transformers_knows(config.model_dir)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    _check_attn_available(config.attn, device)
    check_quantization_available(config.quantization, device)
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = from_pretrained_for_inference(auto_class, path, dtype, config.attn, device)
    ensure_pad_token(tokenizer, model)
    quantized = quantize_model(model, config.quantization, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    load_s = time.perf_counter() - start
    attn_used = getattr(model.config, "_attn_implementation", None) or config.attn
    if attn_used != config.attn:
        log.warning("asked for attention %s, transformers set %s", config.attn, attn_used)
    log.info("loaded %s (%s, %s, attn %s, quantization %s) in %.1f s", path, device, dtype, attn_used,
             config.quantization, load_s)
    return LoadedModel(model, tokenizer, device, dtype, attn_used, config.quantization, quantized, load_s, str(path))
