"""config.json of a Hugging Face checkpoint: the one reader of it, and the model facts drawn from it.

`load_model_config` reads a checkpoint's config into a `ModelConfig`: through transformers'
config class where transformers is installed and has one for the `model_type` (or, for a
`model_type` that only the checkpoint's own code knows, for the class its `architectures` names),
which fills the family's defaults, unnests a multimodal model's `text_config` and maps each
family's attribute names; otherwise from the JSON as written, every default it assumes named.
A checkpoint's own code (`auto_map`) is never run. The space generator (`autotune space new`),
the planner (`model_facts`), the vLLM engine's feature probes and the model shapes all read a
checkpoint's config here; `read_config` is the JSON itself, `text_fields` its text part.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Iterator

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


# ---------------------------------------------------------------------- the architecture


class ConfigReader(StrEnum):
    """Who read the config: transformers' class for it, or autotune from the JSON as written."""

    TRANSFORMERS = "transformers"
    JSON = "json"


class Mixer(StrEnum):
    """What mixes tokens in a layer."""

    ATTENTION = "attention"
    SLIDING = "sliding-window attention"
    LINEAR = "linear attention"  # Gated DeltaNet (Qwen3-Next, Qwen3.5)
    MAMBA = "Mamba-2"
    LINEAR_LAYER = "a linear layer"  # a pruned attention replaced by one matrix
    NONE = "none"


class Ffn(StrEnum):
    """What follows the mixer in a layer."""

    DENSE = "dense MLP"
    MOE = "MoE"
    LINEAR_LAYER = "a linear layer"
    NONE = "none"


@dataclass(frozen=True)
class Layer:
    """One decoder layer: its mixer (with the KV heads of an attention mixer) and its MLP (with the
    width of a dense one)."""

    mixer: Mixer
    ffn: Ffn
    kv_heads: int = 0
    ffn_width: int = 0


#: one letter per layer of Nemotron-H's `hybrid_override_pattern`
PATTERN_LAYERS = {"M": (Mixer.MAMBA, Ffn.NONE), "*": (Mixer.ATTENTION, Ffn.NONE), "-": (Mixer.NONE, Ffn.DENSE),
                  "E": (Mixer.NONE, Ffn.MOE)}
#: transformers' names for the kinds of a hybrid's layers (`layer_types`, `layers_block_type`)
BLOCK_TYPES = {"full_attention": (Mixer.ATTENTION, None), "attention": (Mixer.ATTENTION, None),
               "sliding_attention": (Mixer.SLIDING, None), "chunked_attention": (Mixer.SLIDING, None),
               "linear_attention": (Mixer.LINEAR, None), "mamba": (Mixer.MAMBA, Ffn.NONE),
               "mlp": (Mixer.NONE, Ffn.DENSE), "moe": (Mixer.NONE, Ffn.MOE)}
#: activations whose MLP has no gate: two matrices, not three
UNGATED_ACTS = frozenset({"relu2", "gelu_new", "gelu_pytorch_tanh", "gelu", "relu"})


@dataclass(frozen=True)
class ModelConfig:
    """The facts of a checkpoint's config a space and the planner need (sizes in elements).

    `raw` is config.json as written; `text` the language model's fields (with transformers: its
    config class's, defaults filled); `vision` the vision tower's; `hf` transformers' config
    object (None when autotune read the JSON itself). `defaults` names every number the reader
    took from somewhere other than config.json."""

    raw: dict[str, Any]
    text: dict[str, Any]
    reader: ConfigReader
    name: str
    model_type: str
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int | None  # None: config.json leaves it to a config class autotune did not have
    tied_embeddings: bool
    context_max: int | None
    layers: tuple[Layer, ...]
    intermediate_size: int | None = None
    gated_mlp: bool = True
    n_experts: int = 0
    experts_per_tok: int = 0
    expert_intermediate: int | None = None
    shared_intermediate: int = 0  # width of the shared experts of one MoE layer, all together
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    sliding_window: int | None = None
    mtp_layers: int = 0
    attention_sinks: bool = False
    vision: dict[str, Any] | None = None
    config_class: str | None = None
    hf: Any = None
    defaults: tuple[str, ...] = ()

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def is_mla(self) -> bool:
        return bool(self.kv_lora_rank)

    @property
    def moe_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.ffn is Ffn.MOE)

    @property
    def sliding_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.mixer is Mixer.SLIDING)

    @property
    def attention_layers(self) -> int:
        """Layers whose KV cache grows with the context (full attention)."""
        return sum(1 for layer in self.layers if layer.mixer is Mixer.ATTENTION)

    @property
    def kv_layers(self) -> int | None:
        """Full-attention layers where fewer than every layer (None: every layer keeps a full KV cache)."""
        n = self.attention_layers
        return n if n < self.n_layers else None

    @property
    def read_by(self) -> str:
        """`transformers' Gemma3Config`, or `autotune from the JSON (transformers ...)`."""
        if self.reader is ConfigReader.TRANSFORMERS:
            return f"transformers' {self.config_class}"
        return f"autotune from the JSON as written ({self.config_class or 'transformers is not installed'})"

    def summary(self) -> str:
        heads = (
            f"MLA (KV latent {self.kv_lora_rank} + rope {self.qk_rope_head_dim})"
            if self.is_mla
            else f"{self.n_heads} heads / {self.n_kv_heads} KV heads x {self.head_dim}"
        )
        parts = [self.name, f"{self.n_layers} layers", f"hidden {self.hidden_size}", heads]
        kinds = {kind: sum(1 for layer in self.layers if layer.mixer is kind) for kind in Mixer}
        if any(kinds[k] for k in (Mixer.LINEAR, Mixer.MAMBA, Mixer.NONE, Mixer.LINEAR_LAYER)):
            parts.append("mixers: " + ", ".join(f"{n} {k}" for k, n in kinds.items() if n))
        if self.is_moe:
            shared = " + shared" if self.shared_intermediate else ""
            parts.append(f"{self.n_experts} experts{shared} ({self.experts_per_tok} per token) in {self.moe_layers} layers")
        if self.sliding_layers:
            parts.append(f"{self.sliding_layers} sliding-window layers ({self.sliding_window} tokens)")
        if self.mtp_layers:
            parts.append(f"{self.mtp_layers} MTP layer(s)")
        if self.attention_sinks:
            parts.append("attention sinks")
        if self.vision:
            parts.append("vision tower")
        parts.append(f"context {self.context_max}" if self.context_max else "context not stated")
        return ", ".join(parts)


class _Fields:
    """The text fields a reader takes numbers from, noting each one config.json does not hold."""

    def __init__(self, text: dict[str, Any], written: dict[str, Any], source: str | None, obj: Any = None):
        self.text, self.written, self.source = text, written, source
        self.defaults: list[str] = []
        for key in ("num_hidden_layers", "num_key_value_heads", "head_dim"):  # properties of some config classes
            if self.text.get(key) is None and getattr(obj, key, None) is not None:
                self.text[key] = getattr(obj, key)

    def get(self, *keys: str) -> Any:
        key = next((k for k in keys if self.text.get(k) is not None), None)
        if key is None:
            return None
        value = self.text[key]
        if not any(k in self.written for k in keys) and self.source:
            shown = value if not isinstance(value, list) else f"[{len(value)} entries]"
            self.defaults.append(f"{key}: {self.source} default {shown}")
        return value

    def peek(self, *keys: str) -> Any:
        """A value without noting where it came from (for a decision that may not need it)."""
        return next((self.text[k] for k in keys if self.text.get(k) is not None), None)

    def assume(self, key: str, value: Any, why: str) -> Any:
        self.defaults.append(f"{key}: assumed {why}")
        return value


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' warnings (unused keys, remote code it will not run) off while autotune reads."""
    import transformers

    before = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    logging.captureWarnings(True)
    try:
        yield
    finally:
        transformers.logging.set_verbosity(before)
        logging.captureWarnings(False)


def _transformers_config(raw: dict[str, Any]) -> tuple[Any, str]:
    """(transformers' config object, or None; why not, or its class name). The class is the one
    registered for `model_type`, else the config class of the model class `architectures` names;
    the checkpoint's own code is never imported."""
    try:
        import transformers
        from transformers import CONFIG_MAPPING
    except ImportError:
        return None, "transformers is not installed"
    model_type = str(raw.get("model_type") or "")
    with _quiet_transformers():
        cls = CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None
        if cls is None:
            arch = next(iter(raw.get("architectures") or []), None)
            model_cls = getattr(transformers, str(arch), None) if arch else None
            cls = getattr(model_cls, "config_class", None)
        if cls is None:
            return None, f"transformers {transformers.__version__} has no class for model_type {model_type!r}"
        try:
            return cls.from_dict(dict(raw)), cls.__name__
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            return None, f"transformers' {cls.__name__} cannot read it ({exc})"


def load_model_config(model: str | Path) -> ModelConfig:
    """The ModelConfig of a checkpoint directory's config.json (or the file); ConfigError with one
    line for a config that is not a decoder LLM's."""
    raw = read_config(model)
    hf, how = _transformers_config(raw)
    written = text_fields(raw)
    if hf is not None:
        text_cfg = hf.get_text_config(decoder=True) if hasattr(hf, "get_text_config") else hf
        text = {**text_cfg.to_dict(), **{k: getattr(text_cfg, k) for k in getattr(text_cfg, "attribute_map", {})
                                        if hasattr(text_cfg, k)}}
        vision_cfg = getattr(hf, "vision_config", None)
        vision = vision_cfg.to_dict() if vision_cfg is not None and hasattr(vision_cfg, "to_dict") else None
        fields = _Fields(text, written, f"transformers' {type(text_cfg).__name__}", text_cfg)
        return _architecture(raw, fields, ConfigReader.TRANSFORMERS, how, hf, vision)
    vision = raw.get("vision_config") if isinstance(raw.get("vision_config"), dict) else None
    return _architecture(raw, _Fields(written, written, None), ConfigReader.JSON, how, None, vision)


def _layers(f: _Fields, n_layers: int, moe: bool, n_kv_heads: int, width: int | None) -> list[Layer]:
    """Each layer's mixer and MLP, from whichever of the families' layouts the config has."""
    blocks = f.get("block_configs")  # Nemotron-NAS (DeciLM): a pruned layout per layer
    if isinstance(blocks, list) and blocks:
        return [_nas_layer(b, f) for b in blocks]
    # Nemotron-H as written (transformers turns it into layers_block_type)
    pattern = f.written.get("hybrid_override_pattern") or f.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern and set(pattern) <= set(PATTERN_LAYERS):
        return [Layer(*PATTERN_LAYERS[c], kv_heads=n_kv_heads, ffn_width=width or 0) for c in pattern]
    kinds = f.get("layers_block_type")
    if isinstance(kinds, list) and kinds and all(k in BLOCK_TYPES for k in kinds):
        mamba = f.text.get("mamba_num_heads") is not None  # Nemotron-H calls its Mamba layers linear_attention
        return [Layer(Mixer.MAMBA if mamba and BLOCK_TYPES[k][0] is Mixer.LINEAR else BLOCK_TYPES[k][0],
                      BLOCK_TYPES[k][1] or Ffn.NONE, n_kv_heads, width or 0) for k in kinds]
    mixers = _mixers(f, n_layers)
    dense = _dense_layers(f, n_layers) if moe else set(range(n_layers))
    return [Layer(mixers[i], Ffn.DENSE if i in dense else Ffn.MOE, n_kv_heads, width or 0) for i in range(n_layers)]


def _mixers(f: _Fields, n_layers: int) -> list[Mixer]:
    """`layer_types` as written, else Qwen3-Next's `full_attention_interval` (every interval-th layer
    full attention, the rest linear), else `layer_types` as a config class fills it (Gemma 3)."""
    interval = f.written.get("full_attention_interval")
    if interval and "layer_types" not in f.written:
        return [Mixer.ATTENTION if (i + 1) % int(interval) == 0 else Mixer.LINEAR for i in range(n_layers)]
    types = f.get("layer_types")
    if isinstance(types, list) and len(types) == n_layers and all(t in BLOCK_TYPES for t in types):
        return [BLOCK_TYPES[t][0] for t in types]
    return [Mixer.ATTENTION] * n_layers


def _dense_layers(f: _Fields, n_layers: int) -> set[int]:
    """The layers of a MoE model whose MLP is dense."""
    moe_layers = f.get("moe_layers")  # Llama 4 (transformers fills it from interleave_moe_layer_step)
    if isinstance(moe_layers, list):
        return set(range(n_layers)) - {int(i) for i in moe_layers}
    if f.get("interleave_moe_layer_step"):
        step = int(f.get("interleave_moe_layer_step"))
        return {i for i in range(n_layers) if (i + 1) % step}
    if f.get("decoder_sparse_step") is not None:  # Qwen MoE: every step-th layer, minus mlp_only_layers
        step = int(f.get("decoder_sparse_step")) or 1
        only = set(f.get("mlp_only_layers") or [])
        return {i for i in range(n_layers) if (i + 1) % step or i in only}
    first_dense = int(f.get("first_k_dense_replace") or 0)  # DeepSeek / GLM: dense first layers
    freq = int(f.get("moe_layer_freq") or 1)
    return {i for i in range(n_layers) if i < first_dense or (i - first_dense) % freq}


def _nas_layer(block: dict[str, Any], f: _Fields) -> Layer:
    """One Nemotron-NAS block: attention pruned away, replaced by a matrix, or with its own KV
    heads; an MLP of `ffn_mult` x 2h/3 rounded up to a multiple of 256 (DeciLM's rule)."""
    hidden, heads = int(f.text["hidden_size"]), int(f.text["num_attention_heads"])
    attn, ffn = block.get("attention") or {}, block.get("ffn") or {}
    if attn.get("no_op"):
        mixer, kv = Mixer.NONE, 0
    elif attn.get("replace_with_linear"):
        mixer, kv = Mixer.LINEAR_LAYER, 0
    else:
        mixer, kv = Mixer.ATTENTION, heads // int(attn.get("n_heads_in_group") or 1)
    if ffn.get("no_op"):
        return Layer(mixer, Ffn.NONE, kv)
    if ffn.get("replace_with_linear"):
        return Layer(mixer, Ffn.LINEAR_LAYER, kv)
    width = int(float(ffn["ffn_mult"]) * 2 * hidden / 3)
    return Layer(mixer, Ffn.DENSE, kv, -(-width // 256) * 256)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _architecture(raw: dict[str, Any], f: _Fields, reader: ConfigReader, how: str, hf: Any,
                  vision: dict[str, Any] | None) -> ModelConfig:
    required = {
        "num_hidden_layers": f.get("num_hidden_layers", "n_layer", "num_layers"),
        "hidden_size": f.get("hidden_size", "d_model", "n_embd"),
        "num_attention_heads": f.get("num_attention_heads", "n_head"),
    }
    missing = [k for k, v in required.items() if v is None]
    if missing:
        raise ConfigError(
            f"config.json has no {missing[0]}: not the config of a decoder LLM autotune can read "
            f"(it needs {', '.join(required)})"
        )
    vocab = _int(f.get("vocab_size"))
    if vocab is None and reader is ConfigReader.TRANSFORMERS:  # its class knows every default: no vocabulary, no LM
        raise ConfigError(f"config.json has no vocab_size, nor has {how}: not the config of a decoder LLM autotune "
                          "can read")
    n_layers, hidden = int(required["num_hidden_layers"]), int(required["hidden_size"])
    heads = int(required["num_attention_heads"])
    kv_heads = _int(f.get("num_key_value_heads", "num_kv_heads"))
    if kv_heads is None and f.get("n_heads_in_group") is None and not f.get("block_configs"):
        kv_heads = f.assume("num_key_value_heads", heads, f"= num_attention_heads ({heads}): multi-head attention")
    head_dim = _int(f.get("head_dim"))
    if head_dim is None:
        head_dim = f.assume("head_dim", hidden // heads, f"hidden_size / num_attention_heads = {hidden // heads}")
    width = _int(f.get("intermediate_size_mlp", "intermediate_size")) if f.text.get("intermediate_size_mlp") \
        else _int(f.get("intermediate_size", "ffn_dim"))
    expert_keys = ("num_local_experts", "num_experts", "n_routed_experts")
    layers = _layers(f, n_layers, bool(f.peek(*expert_keys)), int(kv_heads or 0), width)
    moe = any(layer.ffn is Ffn.MOE for layer in layers)  # a config class's expert defaults mean nothing without
    n_experts = int(f.get(*expert_keys) or 0) if moe else 0
    per_tok = int(f.get("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk") or 0) if moe else 0
    expert_width = _int(f.get("moe_intermediate_size", "intermediate_size")) if n_experts else None
    shared = 0
    if moe:
        shared = int(f.get("n_shared_experts") or 0) * int(expert_width or 0)
        if f.peek("moe_shared_expert_intermediate_size") is not None:  # Nemotron-H: its width, not a count
            shared = int(f.get("moe_shared_expert_intermediate_size")) * max(int(f.peek("n_shared_experts") or 1), 1)
        shared += int(f.get("shared_expert_intermediate_size", "shared_intermediate_size") or 0)
        if str(f.text.get("model_type")) == "llama4_text":  # Llama 4: a shared expert as wide as one routed
            shared = int(expert_width or 0)
    tied = f.get("tie_word_embeddings")
    if tied is None:
        tied = f.assume("tie_word_embeddings", False, "false (an LM head of its own)")
    context = _int(f.get("max_position_embeddings", "n_positions", "seq_length"))
    act = str(f.text.get("mlp_hidden_act") or f.text.get("hidden_act") or "silu")
    archs = raw.get("architectures") or []
    sliding = any(layer.mixer is Mixer.SLIDING for layer in layers)
    window = _int(f.get("sliding_window", "attention_chunk_size")) if sliding else None  # Llama 4: chunks
    return ModelConfig(
        raw=raw,
        text=f.text,
        reader=reader,
        name=str(archs[0]) if archs else str(raw.get("model_type", "unknown")),
        model_type=str(raw.get("model_type", "")),
        hidden_size=hidden,
        n_heads=heads,
        n_kv_heads=int(kv_heads or max((layer.kv_heads for layer in layers), default=heads)),
        head_dim=head_dim,
        vocab_size=vocab,
        tied_embeddings=bool(tied),
        context_max=context,
        layers=tuple(layers),
        intermediate_size=width,
        gated_mlp=act not in UNGATED_ACTS,
        n_experts=n_experts,
        experts_per_tok=per_tok,
        expert_intermediate=expert_width,
        shared_intermediate=shared,
        kv_lora_rank=_int(f.get("kv_lora_rank")),
        q_lora_rank=_int(f.get("q_lora_rank")),
        qk_nope_head_dim=_int(f.get("qk_nope_head_dim")),
        qk_rope_head_dim=_int(f.get("qk_rope_head_dim")),
        v_head_dim=_int(f.get("v_head_dim")),
        sliding_window=window,
        mtp_layers=int(f.get("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules") or 0),
        attention_sinks=str(raw.get("model_type")) == "gpt_oss",  # learned per-head sinks in every attention layer
        vision=vision,
        config_class=how,
        hf=hf,
        defaults=tuple(dict.fromkeys(f.defaults)),
    )


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


def config_facts(config: ModelConfig) -> dict[str, Any]:
    """A ModelConfig -> ModelFacts fields (only the ones it gives); those ModelSpec also has are
    what `space new` writes into a space."""
    out: dict[str, Any] = {
        "n_layers": config.n_layers,
        "hidden_size": config.hidden_size,
        "n_heads": config.n_heads,
        "n_kv_heads": config.n_kv_heads,
        "head_dim": config.head_dim,
        "n_experts": config.n_experts or None,
        "experts_per_tok": config.experts_per_tok or None,
        "kv_lora_rank": config.kv_lora_rank,
        "qk_rope_head_dim": config.qk_rope_head_dim,
        "context_max": config.context_max,
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": config.tied_embeddings,
        "kv_layers": config.kv_layers,
    }
    written = text_fields(config.raw)
    dtype = written.get("torch_dtype") or written.get("dtype")
    if isinstance(dtype, str) and dtype in _DTYPE_BITS:
        out["dtype_bits"] = _DTYPE_BITS[dtype]
    if config.sliding_layers and config.sliding_window:
        out["sliding_layers"] = config.sliding_layers
        out["sliding_window"] = config.sliding_window
    quant = config.raw.get("quantization_config")
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
            try:
                read = config_facts(load_model_config(path))
            except ConfigError:  # not an LLM's config (or unreadable): the space's own numbers stand
                read = {}
            for name, value in read.items():
                values[name] = value
                sources[name] = "config.json"
        if path.exists():
            size, how = _checkpoint_bytes(path)
            if size:
                values["checkpoint_bytes"] = size
                sources["checkpoint_bytes"] = how or "disk"
    return ModelFacts(**values, sources=sources)
