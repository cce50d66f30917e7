"""How a checkpoint stores its weights, from its config.json's `quantization_config`: the format
(bf16, fp8, mxfp4, nvfp4, intN ...), bits per weight with scales, and which parameter groups are
stored that way; read by `autotune space new`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from autotune.checkpoint.config import text_fields
from autotune.checkpoint.params import ParamCount
from autotune.errors import ConfigError

#: the parameter groups a quantization_config may quantize (ParamCount.group names them)
LINEAR_GROUPS = ("attention", "dense_mlp", "experts", "shared")


@dataclass(frozen=True)
class Checkpoint:
    """How the weights are stored: `format` names it, `bits` per quantized weight (scales included),
    `quantized` the parameter groups stored that way (the rest, embeddings included, stay 16-bit)."""

    format: str
    bits: float
    quant_method: str | None = None
    quantized: tuple[str, ...] = ()
    fp8_kv_scales: bool = False

    @property
    def is_16bit(self) -> bool:
        return self.quant_method is None

    def weight_bits(self, params: ParamCount) -> float:
        quantized = sum(params.group(g) for g in self.quantized)
        return (quantized * self.bits + (params.total - quantized) * 16) / params.total


def _kept_16bit(qc: dict[str, Any]) -> tuple[str, ...]:
    """The linear groups a quantization_config quantizes, from its lists of modules left alone."""
    names = " ".join(str(n) for key in ("modules_to_not_convert", "ignore", "exclude_modules") for n in qc.get(key) or [])
    skipped = {"attention"} if re.search(r"attn|attention", names) else set()
    return tuple(g for g in LINEAR_GROUPS if g not in skipped)


def checkpoint_format(cfg: dict[str, Any]) -> Checkpoint:
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict) or not qc.get("quant_method"):
        written = text_fields(cfg)
        dtype = str(written.get("torch_dtype") or written.get("dtype") or "bfloat16")
        return Checkpoint(format="fp16" if dtype == "float16" else "bf16", bits=16.0)
    method = str(qc["quant_method"]).lower()
    groups = _kept_16bit(qc)
    kv_scales = str(qc.get("kv_cache_quant_algo") or qc.get("kv_cache_scheme") or "").upper().startswith("FP8")
    if method == "fp8":
        return Checkpoint(format="fp8", bits=8.0, quant_method=method, quantized=groups)
    if method == "mxfp4":
        return Checkpoint(format="mxfp4", bits=4.25, quant_method=method, quantized=groups)  # e2m1 + e8m0 per 32
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(qc.get("quant_algo") or ("NVFP4" if method == "modelopt_fp4" else "FP8")).upper()
        fmt, bits = {"FP8": ("fp8", 8.0), "MXFP8": ("mxfp8", 8.25)}.get(algo, ("nvfp4", 4.5))  # e2m1 + fp8 per 16
        return Checkpoint(format=fmt, bits=bits, quant_method=method, quantized=groups, fp8_kv_scales=kv_scales)
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        n = int(qc.get("bits") or qc.get("w_bit") or 4)
        group = int(qc.get("group_size") or qc.get("q_group_size") or 128)
        extra = (16 + n) / group if group > 0 else 0.0  # a 16-bit scale and an n-bit zero per group
        return Checkpoint(format=f"int{n}", bits=n + extra, quant_method=method, quantized=groups)
    if method == "compressed-tensors":
        weights = next(
            (g.get("weights") for g in (qc.get("config_groups") or {}).values() if isinstance(g, dict) and g.get("weights")),
            None,
        )
        if isinstance(weights, dict) and weights.get("num_bits"):
            n, kind = int(weights["num_bits"]), str(weights.get("type", "int"))
            if kind == "float" and n == 4:
                fmt, bits = "nvfp4", 4.5
            elif kind == "float":
                fmt, bits = "fp8", float(n)
            else:
                group = int(weights.get("group_size") or 0)
                fmt, bits = f"int{n}", n + (16 / group if group > 0 else 0.0)
            return Checkpoint(format=fmt, bits=bits, quant_method=method, quantized=groups, fp8_kv_scales=kv_scales)
    raise ConfigError(
        f"quantization_config.quant_method {qc['quant_method']!r}: autotune does not know its bits per weight; "
        "write the space by hand, starting from a shipped one (search_spaces/minimax-m3.1-flash-spark1.yaml "
        "is an EXL3 checkpoint)"
    )
