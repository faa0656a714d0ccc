"""Weight quantization of a loaded transformers model through torchao (a maintained library; we write no
quantization kernels).

Owns: the names users pass (`none`, `int8`, `fp8`), checking at run time that the installed torchao has
the API and the device has the hardware, and applying it. Unavailable means UnsupportedError with the
reason, which the lab records as an `unavailable` row. Does not own: loading the model (hf_loading.py).

- int8: int8 weight-only (weights stored int8 with per-channel scales, activations stay in the model dtype).
- fp8: fp8 dynamic activation x fp8 weight matmuls (torch._scaled_mm); needs compute capability >= 8.9.
Only nn.Linear layers whose in and out features are multiples of 16 are quantized (fp8 kernels need it;
the few-output classification head and similar small layers stay in the model dtype).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from inferlab.errors import ConfigError, UnsupportedError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuantScheme:
    description: str
    # torchao names for the same scheme, newest API first: `XConfig` classes (torchao >= 0.10) and the older
    # factory functions (torchao 0.5-0.9). Either is passed to torchao.quantization.quantize_.
    torchao_names: tuple[str, ...]
    min_cuda_capability: tuple[int, int] | None = None


QUANT_SCHEMES: dict[str, QuantScheme] = {
    "int8": QuantScheme("int8 weight-only (torchao)", ("Int8WeightOnlyConfig", "int8_weight_only")),
    "fp8": QuantScheme(
        "fp8 dynamic activation + fp8 weight (torchao)",
        ("Float8DynamicActivationFloat8WeightConfig", "float8_dynamic_activation_float8_weight"),
        min_cuda_capability=(8, 9),
    ),
}
QUANTIZATIONS = ("none", *QUANT_SCHEMES)


def validate_quantization_name(name: str) -> None:
    if name not in QUANTIZATIONS:
        raise ConfigError(f"quantization {name!r} is not known; use one of {', '.join(QUANTIZATIONS)}")


def _torchao_quantization_module():
    try:
        import torchao.quantization as tq
    except Exception as e:  # noqa: BLE001 - missing, or built for another torch: both mean unavailable
        raise UnsupportedError(
            f"quantization needs torchao, which could not be imported ({type(e).__name__}: {e}); "
            "install it with `pip install torchao` (or carry its wheel to the GPU machine)"
        ) from None
    return tq


def _scheme_config(tq, name: str, scheme: QuantScheme):
    for attr in scheme.torchao_names:
        factory = getattr(tq, attr, None)
        if factory is not None:
            return factory()
    raise UnsupportedError(
        f"the installed torchao has none of {', '.join(scheme.torchao_names)} for {name}; "
        "install a torchao version with that API (0.5 or newer)"
    )


def check_quantization_available(name: str, device: torch.device) -> None:
    """Raise UnsupportedError (with the reason) unless `name` can run on `device` here."""
    validate_quantization_name(name)
    if name == "none":
        return
    scheme = QUANT_SCHEMES[name]
    if scheme.min_cuda_capability is not None:
        if device.type != "cuda":
            raise UnsupportedError(
                f"{name} ({scheme.description}) needs a CUDA GPU of compute capability "
                f">= {scheme.min_cuda_capability[0]}.{scheme.min_cuda_capability[1]}; this run is on {device.type}"
            )
        capability = torch.cuda.get_device_capability(device)
        if capability < scheme.min_cuda_capability:
            raise UnsupportedError(
                f"{name} ({scheme.description}) needs compute capability >= "
                f"{scheme.min_cuda_capability[0]}.{scheme.min_cuda_capability[1]}; "
                f"{torch.cuda.get_device_name(device)} has {capability[0]}.{capability[1]}"
            )
    _scheme_config(_torchao_quantization_module(), name, scheme)


def _quantizable(module: torch.nn.Module, fqn: str) -> bool:
    return isinstance(module, torch.nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0


def quantize_model(model: torch.nn.Module, name: str, device: torch.device) -> int:
    """Quantize `model` in place (already on `device`); returns how many Linear layers were quantized."""
    check_quantization_available(name, device)
    if name == "none":
        return 0
    tq = _torchao_quantization_module()
    targets = sum(1 for fqn, m in model.named_modules() if _quantizable(m, fqn))
    if targets == 0:
        raise UnsupportedError(f"{name}: the model has no Linear layer with in/out features divisible by 16")
    tq.quantize_(model, _scheme_config(tq, name, QUANT_SCHEMES[name]), filter_fn=_quantizable)
    log.info("quantized %d Linear layers with %s", targets, QUANT_SCHEMES[name].description)
    return targets
