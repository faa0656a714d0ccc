"""The knobs the HF backends share and the rules they apply in the parent: the compile default, the
cache/compile/dtype combinations transformers cannot run, and the flash-attn precheck."""

from __future__ import annotations

from typing import Any

from inferlab.bench.backends.hf_compile import COMPILE_BACKENDS
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.packages import missing_package
from inferlab.errors import ConfigError

ATTN_IMPLEMENTATION = Knob("attn_implementation", str, "sdpa", "transformers attention implementation",
                           choices=("eager", "sdpa", "flash_attention_2"))
KV_CACHE = Knob("kv_cache", str, "dynamic", "KV cache implementation", choices=("dynamic", "static"))
COMPILE = Knob("compile", bool, None, "compile the decode step (static cache only); default: on with a static cache, "
               "as HF does by itself")


def compile_backend_knob(help: str = "torch.compile backend with compile=true") -> Knob:
    return Knob("compile_backend", str, "inductor", help, choices=COMPILE_BACKENDS)


def resolve(config: dict[str, Any]) -> dict[str, Any]:
    """compile defaults to on exactly for a static cache, as HF does by itself."""
    if config.get("compile") is None:
        config = {**config, "compile": config["kv_cache"] == "static"}
    return config


def check_cache_and_compile(c: dict[str, Any]) -> None:
    if c["compile"] and c["kv_cache"] == "dynamic":
        raise ConfigError("compile=true with kv_cache=dynamic: HF compiles only static caches; set compile=false "
                          "or kv_cache=static")
    if c["compile_backend"] != "inductor" and not c["compile"]:
        raise ConfigError(f"compile_backend={c['compile_backend']} needs compile=true; remove it or set compile=true")
    if c["attn_implementation"] == "flash_attention_2" and c.get("dtype") == "float32":
        raise ConfigError("flash_attention_2 runs only bfloat16/float16; set dtype=bfloat16")


def validate(cell: Cell) -> None:
    check_cache_and_compile(cell.config)


def precheck(cell: Cell) -> str | None:
    if cell.config["attn_implementation"] != "flash_attention_2":
        return None
    return missing_package("flash_attn", "attn_implementation=flash_attention_2", "pip install flash-attn")
