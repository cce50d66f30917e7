"""Tiny random-weight Hugging Face checkpoints that mirror a target model's attention shape.

An engine probe needs a model with the target's head_dim, query heads, KV heads and layer kinds
(sliding / full attention, MoE routing) but not its size: 1-2 layers and a small hidden size
start in seconds. The config work here is plain dicts (tested without torch); writing the
weights needs torch + transformers, which the GPU machine has.

Tokenizer: copied from the target directory when there is one (the vocabulary then stays the
target's, so every token id fits). Without one, a byte-level tokenizer is generated offline with
the `tokenizers` library (259 tokens, vocab padded to 512), so chat requests still work. For
throughput-only probes, `vllm serve --load-format dummy` skips the weights entirely, and
`--skip-tokenizer-init` (a vLLM ModelConfig flag) skips the tokenizer, but then only token-id
prompts work, not chat.

  python -m autotune.probe.programs.tiny_models --like TARGET_DIR --out DIR [--layers 2] [--no-weights]
  python -m autotune.probe.programs.tiny_models --llama --head-dim 128 --heads 8 --kv-heads 2 --out DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.models import ModelSpec

# Facts of google/gemma-3-270m's config.json (transformers Gemma3TextConfig; the GGUF metadata
# agrees: 18 blocks, embedding 640, 4 heads, 1 KV head, key length 256, sliding window 512).
GEMMA3_270M: dict[str, Any] = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 640,
    "intermediate_size": 2048,
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "sliding_window": 512,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "rope_local_base_freq": 10_000.0,
    "vocab_size": 262144,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}

BYTE_SPECIALS = ("<pad>", "<s>", "</s>")
BYTE_VOCAB_SIZE = 512  # 3 specials + 256 byte symbols, padded
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)
_DROP_KEYS = ("quantization_config", "_name_or_path", "auto_map", "transformers_version")


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language-model part of a config (multimodal configs nest it under text_config)."""
    inner = config.get("text_config")
    if not isinstance(inner, dict):
        return dict(config)
    merged = dict(inner)
    arch = (config.get("architectures") or [""])[0]
    if arch.endswith("ForConditionalGeneration"):
        merged["architectures"] = [arch.replace("ForConditionalGeneration", "ForCausalLM")]
    return merged


def attention_shape(config: dict[str, Any]) -> dict[str, int]:
    """head_dim, query heads and KV heads of a (text) config."""
    cfg = text_config(config)
    try:
        heads = int(cfg["num_attention_heads"])
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"config has no attention shape (num_attention_heads / head_dim): {exc}") from None
    return {
        "head_dim": head_dim,
        "num_attention_heads": heads,
        "num_key_value_heads": int(cfg.get("num_key_value_heads") or heads),
    }


def _representative_layer_types(layer_types: list[str], layers: int) -> list[str]:
    """`layers` entries that keep every distinct layer kind of the target (in first-seen order)."""
    kinds = list(dict.fromkeys(layer_types))
    if layers < len(kinds):
        raise ConfigError(f"{layers} layer(s) cannot hold the target's {len(kinds)} layer kinds {kinds}")
    return kinds + [kinds[0]] * (layers - len(kinds))


def tiny_config(
    target: dict[str, Any],
    *,
    layers: int = 2,
    hidden_size: int = 256,
    intermediate_size: int = 512,
    vocab_size: int | None = None,
) -> dict[str, Any]:
    """A copy of the target's (text) config with few layers and small widths; the attention shape,
    layer kinds, rope and MoE routing stay the target's."""
    if layers < 1:
        raise ConfigError("a tiny model needs at least one layer")
    cfg = {k: v for k, v in text_config(target).items() if k not in _DROP_KEYS}
    shape = attention_shape(cfg)
    cfg.update(shape)
    cfg["num_hidden_layers"] = layers
    cfg["hidden_size"] = hidden_size
    cfg["intermediate_size"] = intermediate_size
    if "moe_intermediate_size" in cfg:
        cfg["moe_intermediate_size"] = intermediate_size
    if "shared_expert_intermediate_size" in cfg:
        cfg["shared_expert_intermediate_size"] = intermediate_size
    if isinstance(cfg.get("layer_types"), list) and cfg["layer_types"]:
        cfg["layer_types"] = _representative_layer_types(cfg["layer_types"], layers)
    elif isinstance(cfg.get("sliding_window_pattern"), int):
        cfg["sliding_window_pattern"] = min(cfg["sliding_window_pattern"], layers)
    if isinstance(cfg.get("first_k_dense_replace"), int):
        cfg["first_k_dense_replace"] = min(cfg["first_k_dense_replace"], max(layers - 1, 0))
    if vocab_size is not None:
        cfg["vocab_size"] = vocab_size
    return cfg


def llama_config(
    *,
    head_dim: int,
    n_heads: int,
    n_kv_heads: int,
    layers: int = 2,
    hidden_size: int = 256,
    intermediate_size: int = 512,
    vocab_size: int = BYTE_VOCAB_SIZE,
    max_position_embeddings: int = 4096,
) -> dict[str, Any]:
    """A Llama-architecture config with the given attention shape."""
    if n_heads % n_kv_heads:
        raise ConfigError(f"{n_heads} query heads do not split into {n_kv_heads} KV heads")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": layers,
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500_000.0,
        "vocab_size": vocab_size,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def config_from_spec(spec: ModelSpec, **sizes: int) -> dict[str, Any]:
    """A Llama-style tiny config from a ModelSpec's attention numbers (architecture not mirrored)."""
    missing = [f for f in ("n_heads", "head_dim") if getattr(spec, f) is None]
    if missing:
        raise ConfigError(f"model {spec.name!r} lacks {', '.join(missing)}; a tiny model needs its attention shape")
    return llama_config(
        head_dim=spec.head_dim, n_heads=spec.n_heads, n_kv_heads=spec.n_kv_heads or spec.n_heads, **sizes
    )


# ---------------------------------------------------------------------- writing the checkpoint


def copy_tokenizer(source: Path, out: Path) -> list[str]:
    copied = []
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, out / name)
            copied.append(name)
    if not any(n in copied for n in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        raise ConfigError(f"{source} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...)")
    return copied


def write_byte_tokenizer(out: Path) -> None:
    """A byte-level BPE tokenizer without merges (every UTF-8 byte is a token), built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    try:
        from transformers import PreTrainedTokenizerFast as FastTokenizer
    except ImportError:  # transformers 5 renamed the fast base class
        from transformers import TokenizersBackend as FastTokenizer  # type: ignore[no-redef]

    vocab = {token: i for i, token in enumerate(BYTE_SPECIALS)}
    for symbol in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[symbol] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = FastTokenizer(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))


def build(
    out_dir: str | Path,
    config: dict[str, Any],
    *,
    tokenizer_from: str | Path | None = None,
    weights: bool = True,
    seed: int = 0,
) -> Path:
    """Write config.json, a tokenizer and (with `weights`) random bf16 safetensors to `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = dict(config)
    if tokenizer_from is not None:
        copy_tokenizer(Path(tokenizer_from), out)
    else:
        write_byte_tokenizer(out)
        config.update(vocab_size=BYTE_VOCAB_SIZE, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if weights:
        _write_random_weights(out, seed)
    return out


def _write_random_weights(out: Path, seed: int) -> None:
    import torch
    import transformers

    torch.manual_seed(seed)
    hf_config = transformers.AutoConfig.from_pretrained(str(out))
    model = transformers.AutoModelForCausalLM.from_config(hf_config)
    model = model.to(torch.bfloat16)
    model.save_pretrained(str(out))  # safetensors; also rewrites config.json in transformers' form


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m autotune.probe.programs.tiny_models", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--like", metavar="DIR", help="target Hugging Face checkpoint directory to mirror")
    source.add_argument("--gemma3-270m", action="store_true", help="mirror Gemma 3 270M from built-in facts")
    source.add_argument("--llama", action="store_true", help="Llama architecture with --head-dim/--heads/--kv-heads")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--intermediate", type=int, default=512)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--byte-tokenizer", action="store_true", help="generate a byte tokenizer even with --like")
    parser.add_argument("--no-weights", action="store_true", help="config + tokenizer only (for --load-format dummy)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    sizes = {"layers": args.layers, "hidden_size": args.hidden, "intermediate_size": args.intermediate}
    tokenizer_from: Path | None = None
    if args.like:
        target = Path(args.like)
        config = tiny_config(json.loads((target / "config.json").read_text()), **sizes)
        tokenizer_from = None if args.byte_tokenizer else target
    elif args.gemma3_270m:
        config = tiny_config(GEMMA3_270M, **sizes)
    else:
        config = llama_config(head_dim=args.head_dim, n_heads=args.heads, n_kv_heads=args.kv_heads, **sizes)
    out = build(args.out, config, tokenizer_from=tokenizer_from, weights=not args.no_weights, seed=args.seed)
    shape = attention_shape(json.loads((out / "config.json").read_text()))
    print(f"tiny model: {out} ({config['architectures'][0]}, {args.layers} layers, {shape})")


if __name__ == "__main__":
    main()
