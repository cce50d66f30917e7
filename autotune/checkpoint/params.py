"""How many parameters a model has, by module kind, and how many one decoded token reads.

Two ways, one result type. Where torch and transformers are installed and transformers read the
config (`ConfigReader.TRANSFORMERS`), the model is built on the meta device (no memory, no
weights, no download: what `accelerate estimate-memory` does) and every parameter is summed by
the kind of module that holds it. Otherwise a closed form counts the same kinds from the config's
shapes; tests/test_model_config.py holds it within 1 % of the meta count on every config of the
corpus. Neither builds the MTP layers (transformers leaves them out): they are one decoder layer
of the model's own each, plus the projection that joins the two streams (2h x h), and are counted
apart, as is the vision tower.

Read per token: every layer's attention, dense MLP, shared experts, routers and norms, the routed
experts a token picks (experts per token / experts of them), and the LM head (the input embedding
is a row lookup). The vision tower and MTP layers are not read by a decoded text token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from autotune.errors import ConfigError
from autotune.checkpoint.config import ConfigReader, Ffn, Layer, Mixer, ModelConfig, _quiet_transformers


class CountMethod(StrEnum):
    META = "meta"  # transformers' modules built on the meta device
    CLOSED_FORM = "closed form"


class Kind(StrEnum):
    """The module kinds parameters are summed by."""

    EMBEDDING = "embedding"
    LM_HEAD = "lm_head"
    ATTENTION = "attention"  # every token mixer: attention, linear attention, Mamba-2
    DENSE_MLP = "dense_mlp"
    EXPERTS = "experts"  # routed
    SHARED = "shared"  # shared experts
    OTHER = "other"  # routers, norms, sinks
    VISION = "vision"  # vision tower and projector
    MTP = "mtp"


@dataclass(frozen=True)
class ParamCount:
    """Parameters by module kind, and the share of the routed experts one token reads."""

    embedding: float
    lm_head: float
    attention: float
    dense_mlp: float
    experts: float
    shared: float
    other: float
    vision: float
    mtp: float
    experts_read: float  # experts per token / experts (1 for a dense model)
    method: CountMethod

    @property
    def total(self) -> float:
        """Every parameter the served model loads: all but the MTP layers (loaded only to draft)."""
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp + self.experts + self.shared
                + self.other + self.vision)

    @property
    def active(self) -> float:
        """Read per decoded token (module docstring)."""
        head = self.lm_head or self.embedding
        return self.attention + self.dense_mlp + self.shared + self.other + self.experts * self.experts_read + head

    def group(self, name: str) -> float:
        return float(getattr(self, name))

    def describe(self, why_closed: str | None = None) -> str:
        """`27.4B parameters (vision tower 0.42B), 27.0B read per token; counted on the meta device ...`;
        `why_closed`: why the meta count could not be made, said after a closed form."""
        apart = [f"vision tower {self.vision / 1e9:.2f}B" for _ in [0] if self.vision]
        apart += [f"MTP layers: {self.mtp / 1e9:.2f}B, not in the total (loaded only to draft with them)"
                  for _ in [0] if self.mtp]
        how = (
            "counted on the meta device (transformers' own modules, no weights)"
            if self.method is CountMethod.META
            else "closed form from the config's shapes" + (f": {why_closed}" if why_closed else "")
        )
        return (f"{self.total / 1e9:.1f}B parameters{' (' + '; '.join(apart) + ')' if apart else ''}, "
                f"{self.active / 1e9:.1f}B read per token; {how}")


def count_params(config: ModelConfig, method: CountMethod | None = None) -> ParamCount:
    """The count of `config`: on the meta device where it can be (or `method` says so), else the
    closed form. Asking for META where torch or transformers is missing is a ConfigError, and so
    is a config without a vocabulary size (one that leaves it to transformers' defaults)."""
    if config.vocab_size is None:
        raise ConfigError(
            f"config.json has no vocab_size: its model_type {config.model_type!r} leaves it to transformers' "
            f"defaults, and {config.config_class}: install transformers (pip install transformers), or write "
            "vocab_size into config.json"
        )
    if method is CountMethod.CLOSED_FORM:
        return closed_form(config)
    why = meta_unavailable(config)
    if why is None:
        return meta_count(config)
    if method is CountMethod.META:
        raise ConfigError(f"no meta count for {config.name}: {why}")
    return closed_form(config)


def meta_unavailable(config: ModelConfig) -> str | None:
    """Why the meta count cannot be made here (None: it can)."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return "torch and transformers are not installed, with which the count is exact (pip install torch transformers)"
    if config.reader is not ConfigReader.TRANSFORMERS:
        return config.config_class or "transformers did not read the config"
    return None


# ---------------------------------------------------------------------- on the meta device


_VISION = re.compile(r"vision|visual|multi_modal_projector|mm_projector|image_newline|patch_merger")


def _kind(path: str, owner: Any, parent: Any, embedding: bool) -> Kind:
    """The kind of a parameter, from its dotted path and the classes of the modules holding it."""
    parts = path.split(".")[:-1]
    if _VISION.search(path):
        return Kind.VISION
    if "lm_head" in parts:
        return Kind.LM_HEAD
    if embedding:
        return Kind.EMBEDDING
    if any(p.startswith("shared_expert") for p in parts):
        return Kind.SHARED
    if "experts" in parts:
        return Kind.EXPERTS
    owner_cls, parent_cls = type(owner).__name__.lower(), type(parent).__name__.lower()
    if "router" in owner_cls or (parts and parts[-1] in ("gate", "router") and re.search(r"moe|sparse", parent_cls)):
        return Kind.OTHER
    if "norm" in owner_cls or "norm" in (parts[-1] if parts else ""):
        return Kind.OTHER
    return Kind.OTHER if not parts else _block_kind(parts, parent)


def _block_kind(parts: list[str], parent: Any) -> Kind:
    names = " ".join(parts)
    if re.search(r"attn|attention|mixer|mamba|linear_attn|self_attn", names):
        cls = type(parent).__name__.lower()
        if "mixer" in names and re.search(r"mlp|moe", cls):  # Nemotron-H names every block's module `mixer`
            return Kind.DENSE_MLP
        return Kind.ATTENTION
    if re.search(r"mlp|feed_forward|ffn", names):
        return Kind.DENSE_MLP
    return Kind.OTHER


def _model_class(config: ModelConfig) -> Any:
    """The class `architectures` names where transformers has it (a multimodal model with its
    vision tower), else AutoModelForCausalLM's for the config."""
    import transformers

    arch = next(iter(config.raw.get("architectures") or []), None)
    cls = getattr(transformers, str(arch), None) if arch else None
    if cls is not None and isinstance(config.hf, getattr(cls, "config_class", type(None))):
        return cls
    return transformers.AutoModelForCausalLM


def meta_count(config: ModelConfig) -> ParamCount:
    """Build the model on the meta device and sum its parameters by kind (tied ones once)."""
    import torch

    cls = _model_class(config)
    with _quiet_transformers(), torch.device("meta"):
        try:
            model = cls.from_config(config.hf) if hasattr(cls, "from_config") else cls(config.hf)
        except Exception as exc:  # transformers' own refusal, said in one line
            raise ConfigError(f"transformers cannot build {config.name} on the meta device: {exc}") from exc
    modules = dict(model.named_modules())
    embeddings = {id(m.weight) for m in modules.values() if isinstance(m, torch.nn.Embedding)}
    sums = dict.fromkeys(Kind, 0.0)
    for path, param in model.named_parameters():
        owner_path = path.rsplit(".", 1)[0] if "." in path else ""
        owner = modules.get(owner_path)
        parent = modules.get(owner_path.rsplit(".", 1)[0] if "." in owner_path else "")
        sums[_kind(path, owner, parent, id(param) in embeddings)] += param.numel()
    sums[Kind.MTP] = config.mtp_layers * (_last_layer_size(model, config) + _mtp_join(config))
    return _result(config, sums, CountMethod.META)


def _last_layer_size(model: Any, config: ModelConfig) -> float:
    """Parameters of the text model's last decoder layer (an MTP layer is built like it)."""
    import torch

    lists = [(name, m) for name, m in model.named_modules()
             if isinstance(m, torch.nn.ModuleList) and name.endswith("layers") and not _VISION.search(name)
             and len(m) == config.n_layers]
    if not lists:
        return 0.0
    return float(sum(p.numel() for p in lists[0][1][-1].parameters()))


def _mtp_join(config: ModelConfig) -> float:
    """An MTP module's own weights besides its decoder layer: the 2h x h projection of the
    embedding and hidden state, and their two norms."""
    h = config.hidden_size
    return 2 * h * h + 2 * h


def _result(config: ModelConfig, sums: dict[Kind, float], method: CountMethod) -> ParamCount:
    read = config.experts_per_tok / config.n_experts if config.n_experts else 1.0
    return ParamCount(**{k.value: float(v) for k, v in sums.items()}, experts_read=read, method=method)


# ---------------------------------------------------------------------- the closed form


def _attention(config: ModelConfig, layer: Layer) -> float:
    h, t = config.hidden_size, config.text
    if layer.mixer is Mixer.NONE:
        return 0.0
    if layer.mixer is Mixer.LINEAR_LAYER:
        return float(h * h)
    if layer.mixer is Mixer.MAMBA:
        heads, head_dim = int(t["mamba_num_heads"]), int(t["mamba_head_dim"])
        inner, state, groups = heads * head_dim, int(t["ssm_state_size"]), int(t.get("n_groups") or 1)
        conv = inner + 2 * groups * state
        kernel = int(t.get("conv_kernel") or 4)
        return float(h * (inner + conv + heads) + conv * (kernel + 1) + inner * h + 3 * heads + inner)
    if layer.mixer is Mixer.LINEAR:
        key = int(t["linear_num_key_heads"]) * int(t["linear_key_head_dim"])
        value_heads = int(t["linear_num_value_heads"])
        value = value_heads * int(t["linear_value_head_dim"])
        kernel = int(t.get("linear_conv_kernel_dim") or 4)
        return float(h * (2 * key + 2 * value + 2 * value_heads) + (2 * key + value) * kernel + value * h
                     + 2 * value_heads + int(t["linear_value_head_dim"]))
    if config.is_mla:
        nope, rope = config.qk_nope_head_dim or 0, config.qk_rope_head_dim or 0
        v = config.v_head_dim or config.head_dim
        rank, q_rank = config.kv_lora_rank or 0, config.q_lora_rank
        q_width = config.n_heads * (nope + rope)
        q = h * q_rank + q_rank * q_width + q_rank if q_rank else h * q_width
        return float(q + h * (rank + rope) + rank + rank * config.n_heads * (nope + v) + config.n_heads * v * h)
    d, heads = config.head_dim, config.n_heads
    gated = t.get("attn_output_gate")
    if gated is None:  # Qwen3-Next gates every attention output without saying so in its config
        gated = config.model_type == "qwen3_next"
    gate = 2 if gated else 1  # the q projection also gives the output gate
    weights = h * heads * d * (gate + 1) + 2 * h * layer.kv_heads * d
    bias = (heads + 2 * layer.kv_heads) * d + h if t.get("attention_bias") else 0
    sinks = heads if config.attention_sinks else 0
    return float(weights + bias + sinks)


def _ffn(config: ModelConfig, layer: Layer) -> dict[Kind, float]:
    h, t = config.hidden_size, config.text
    mats = 3 if config.gated_mlp else 2
    if layer.ffn is Ffn.DENSE:
        width = layer.ffn_width or config.intermediate_size or 4 * h
        return {Kind.DENSE_MLP: float(mats * h * width)}
    if layer.ffn is Ffn.LINEAR_LAYER:
        return {Kind.DENSE_MLP: float(h * h)}
    if layer.ffn is Ffn.NONE:
        return {}
    e, width = config.n_experts, config.expert_intermediate or 0
    experts = e * mats * h * width
    router = h * e
    if config.model_type == "gpt_oss":  # biased experts and router
        experts += e * (2 * width + h)
        router += e
    shared = mats * h * config.shared_intermediate
    if t.get("shared_expert_intermediate_size"):
        shared += h  # Qwen's gate on the shared expert
    return {Kind.EXPERTS: float(experts), Kind.OTHER: float(router), Kind.SHARED: float(shared)}


def _vision(config: ModelConfig) -> float:
    """A ViT tower: its layers, patch and position embeddings, and a projector into the text width."""
    v = config.vision
    if not v:
        return 0.0
    h = int(v.get("hidden_size") or 0)
    width = int(v.get("intermediate_size") or 4 * h)
    layers = int(v.get("num_hidden_layers") or v.get("depth") or 0)
    mats = 3 if v.get("model_type") == "pixtral" else 2
    per_layer = 4 * h * h + mats * h * width + 4 * h + width + h * 4  # projections, their biases, two norms
    patch = int(v.get("patch_size") or 14)
    channels = int(v.get("num_channels") or v.get("in_channels") or 3)
    temporal = int(v.get("temporal_patch_size") or 1)
    positions = int(v.get("num_position_embeddings") or (int(v.get("image_size") or 0) // patch) ** 2)
    out = int(v.get("out_hidden_size") or v.get("projector_output_dim") or config.hidden_size)
    merge = int(v.get("spatial_merge_size") or 1) ** 2
    projector = (h * merge) * out + (h * merge) ** 2 if merge > 1 else h * out
    return float(layers * per_layer + channels * temporal * patch * patch * h + positions * h + projector)


def closed_form(config: ModelConfig) -> ParamCount:
    """The count from the config's shapes alone (module docstring)."""
    h = config.hidden_size
    sums = dict.fromkeys(Kind, 0.0)
    layer_sizes = []
    for layer in config.layers:
        attention = _attention(config, layer)
        ffn = _ffn(config, layer)
        norms = h * ((layer.mixer is not Mixer.NONE) + (layer.ffn is not Ffn.NONE))
        sums[Kind.ATTENTION] += attention
        for kind, n in ffn.items():
            sums[kind] += n
        sums[Kind.OTHER] += norms
        layer_sizes.append(attention + sum(ffn.values()) + norms)
    sums[Kind.OTHER] += h  # the final norm
    sums[Kind.EMBEDDING] = float(config.vocab_size * h)
    sums[Kind.LM_HEAD] = 0.0 if config.tied_embeddings else float(config.vocab_size * h)
    sums[Kind.VISION] = _vision(config)
    sums[Kind.MTP] = config.mtp_layers * ((layer_sizes[-1] if layer_sizes else 0.0) + _mtp_join(config))
    return _result(config, sums, CountMethod.CLOSED_FORM)
