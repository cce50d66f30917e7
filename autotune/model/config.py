"""config.json of a Hugging Face checkpoint: the one reader of it, and the model facts drawn from it.

The planner (`model_facts`), the space generator (`autotune space new`), the vLLM engine's feature
probes and the model shapes all read a checkpoint's config through `read_config`; the fields of a
multimodal model's text part come through `text_fields`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.models import ModelSpec

CONFIG_NAME = "config.json"


def config_file(model: str | Path) -> Path:
    """A checkpoint directory's config.json, or `model` itself when it names the file."""
    path = Path(model).expanduser()
    return path / CONFIG_NAME if path.is_dir() else path


def read_config(model: str | Path) -> dict[str, Any]:
    """The whole config.json of a checkpoint directory (or the file itself), a JSON object;
    ConfigError with one line when it is missing or unreadable."""
    config = config_file(model)
    if not config.is_file():
        raise ConfigError(f"{config} does not exist (a Hugging Face checkpoint directory has a {CONFIG_NAME})")
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{config}: cannot read model config ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{config}: a model config is a JSON object, got {type(data).__name__}")
    return data


def text_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The config's fields with a multimodal model's `text_config` laid over them (the language
    model's numbers win); the config itself when it has no text part."""
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else dict(config)


@dataclass(frozen=True)
class ModelFacts:
    """ModelSpec plus what config.json and the checkpoint files say (the planner's input)."""

    params_total_b: float | None = None
    params_active_b: float | None = None
    weight_bits: float | None = None
    n_layers: int | None = None
    hidden_size: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = None
    kv_layers: int | None = None
    context_max: int | None = None
    n_experts: int | None = None
    experts_per_tok: int | None = None
    kv_lora_rank: int | None = None  # MLA: one latent per token and layer
    qk_rope_head_dim: int | None = None
    vocab_size: int | None = None
    tie_word_embeddings: bool = False
    sliding_layers: int = 0
    sliding_window: int | None = None
    dtype_bits: float | None = None
    checkpoint_bytes: int | None = None
    checkpoint_quant: str | None = None
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def is_moe(self) -> bool:
        return bool(self.n_experts) or (
            self.params_active_b is not None
            and self.params_total_b is not None
            and self.params_active_b < self.params_total_b
        )


_DTYPE_BITS = {"bfloat16": 16, "float16": 16, "float32": 32, "float8_e4m3fn": 8}


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def _facts_from_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """config.json -> ModelFacts fields (only the ones present)."""
    c = text_fields(cfg)
    out: dict[str, Any] = {
        "n_layers": _first(c, "num_hidden_layers", "n_layer", "num_layers"),
        "hidden_size": _first(c, "hidden_size", "d_model", "n_embd"),
        "n_heads": _first(c, "num_attention_heads", "n_head"),
        "n_kv_heads": _first(c, "num_key_value_heads", "num_kv_heads"),
        "head_dim": c.get("head_dim"),
        "n_experts": _first(c, "num_local_experts", "num_experts", "n_routed_experts"),
        "experts_per_tok": _first(c, "num_experts_per_tok", "experts_per_token", "num_experts_per_token"),
        "kv_lora_rank": c.get("kv_lora_rank"),
        "qk_rope_head_dim": c.get("qk_rope_head_dim"),
        "context_max": c.get("max_position_embeddings"),
        "vocab_size": c.get("vocab_size"),
        "tie_word_embeddings": c.get("tie_word_embeddings"),
    }
    if out["head_dim"] is None and out["hidden_size"] and out["n_heads"]:
        out["head_dim"] = out["hidden_size"] // out["n_heads"]
    dtype = _first(c, "torch_dtype", "dtype")
    if isinstance(dtype, str) and dtype in _DTYPE_BITS:
        out["dtype_bits"] = _DTYPE_BITS[dtype]
    layer_types = c.get("layer_types")
    if isinstance(layer_types, list) and c.get("sliding_window"):
        sliding = sum(1 for t in layer_types if "sliding" in str(t))
        out["kv_layers"] = len(layer_types) - sliding
        out["sliding_layers"] = sliding
        out["sliding_window"] = c["sliding_window"]
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        out["checkpoint_quant"] = str(quant["quant_method"])
    return {k: v for k, v in out.items() if v is not None}


def _checkpoint_bytes(path: Path) -> tuple[int | None, str | None]:
    if path.is_file():
        return path.stat().st_size, f"file size of {path.name}"
    shards = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.gguf"))
    if shards:
        return sum(p.stat().st_size for p in shards), f"{len(shards)} weight file(s) on disk"
    return None, None


def model_facts(model: ModelSpec) -> ModelFacts:
    """The space's ModelSpec, overridden by config.json when model.path is a directory that has
    one; a .gguf file (or a directory of weight files) gives the checkpoint size."""
    spec_fields = (
        "params_total_b", "params_active_b", "weight_bits", "n_layers", "hidden_size",
        "n_heads", "n_kv_heads", "head_dim", "kv_layers", "context_max", "vocab_size",
    )
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in spec_fields:
        if getattr(model, name) is not None:
            values[name] = getattr(model, name)
            sources[name] = "space"
    if model.path:
        path = Path(model.path).expanduser()
        if path.is_dir() and config_file(path).is_file():
            for name, value in _facts_from_config(read_config(path)).items():
                values[name] = value
                sources[name] = "config.json"
        if path.exists():
            size, how = _checkpoint_bytes(path)
            if size:
                values["checkpoint_bytes"] = size
                sources["checkpoint_bytes"] = how or "disk"
    return ModelFacts(**values, sources=sources)
