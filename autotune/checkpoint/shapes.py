"""Model shape directories: a public config.json without weights, served with `--load-format dummy`.

A shape directory (model_shapes/<name>/) holds config.json and shape.yaml (where the numbers come
from, what was scaled down). vLLM still needs a tokenizer, so `materialize` writes a complete
directory into the cache: the config plus a byte-level BPE tokenizer built offline with the
`tokenizers` library, whose vocabulary has exactly the config's `vocab_size` entries and the
config's bos/eos/pad ids. Its merges are trained on autotune's own prompt text, so prompts of the
bench tokenize to words; the ids above the trained ones decode to visible filler (" <id>"), so
every token a random-weight model can sample detokenizes to text.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import ConfigError
from autotune.checkpoint.config import read_config
from autotune.models import SearchSpace
from autotune.yaml_files import load_yaml_model

SHAPES_DIR = Path(__file__).resolve().parents[2] / "model_shapes"
MARKER = "shape.yaml"
TOKENIZER_FORMAT = 2  # bump when the generated tokenizer changes: the cache key includes it
TRAINED_VOCAB = 4096  # merges learned from the bench's prompt text; the rest is filler
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


class ShapeInfo(BaseModel):
    """shape.yaml: provenance of one shape directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    source: str = Field(description="the public config.json the numbers were taken from")
    scaled: str | None = Field(None, description="what was changed to fit one GPU, and why; None = full shape")
    params_total_b: float = Field(description="parameters of this shape (autotune.checkpoint.params), billions")
    params_active_b: float = Field(description="parameters read per token (autotune.checkpoint.params), billions")
    notes: str = ""


#: what a recipe of a dummy-weight study says under `accuracy`
DUMMY_ACCURACY = ["not applicable (dummy weights)"]


def dummy_weights(space: SearchSpace) -> bool:
    """`load_format: dummy`: random weights, real kernels. Every number is speed, none is accuracy."""
    return space.fixed.get("load_format") == "dummy" or any(
        k.name == "load_format" and "dummy" in k.values for k in space.knobs
    )


def is_shape_dir(path: Path) -> bool:
    return path.is_dir() and (path / MARKER).is_file() and (path / "config.json").is_file()


def shape_info(path: Path) -> ShapeInfo:
    return load_yaml_model(path / MARKER, ShapeInfo, "model shape")


# ---------------------------------------------------------------- tokenizer


def _corpus() -> list[str]:
    """The text autotune itself sends: prompt sets, haystack sentences, word lists."""
    from autotune.bench import words
    from autotune.bench.needle import Haystack
    from autotune.bench.throughput import load_prompts

    texts = [p.prompt for name in ("prose", "structured") for p in load_prompts(name)]
    texts += Haystack(7).sentences(400)
    texts += [" ".join(v) for k, v in vars(words).items() if k.isupper() and isinstance(v, tuple)]
    return texts


def _first_id(value: object) -> int | None:
    """A config's token id field: an int or a list of them (the first counts)."""
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, int)), None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def special_ids(cfg: dict) -> dict[str, int]:
    """Special token name -> id, from the config's bos/eos/pad ids; a role whose id another role
    already holds shares that token."""
    out: dict[str, int] = {}
    for role in ("eos", "bos", "pad"):
        i = _first_id(cfg.get(f"{role}_token_id"))
        if i is not None and i not in out.values():
            out[f"<|{role}|>"] = i
    return out


def _token_at(specials: dict[str, int], value: object) -> str | None:
    i = _first_id(value)
    return next((t for t, j in specials.items() if j == i), None)


def build_tokenizer(vocab_size: int, specials: dict[str, int]):
    """A byte-level BPE tokenizer with exactly `vocab_size` ids; `specials` sit at their ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    bad = {t: i for t, i in specials.items() if not 0 <= i < vocab_size}
    if bad:
        raise ConfigError(f"special token ids outside the vocabulary of {vocab_size}: {bad}")
    trained_size = min(TRAINED_VOCAB, vocab_size - len(specials))
    if trained_size < 256 + 1:
        raise ConfigError(f"vocab_size {vocab_size} is too small for a byte-level tokenizer")
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=trained_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    trainer_tok.train_from_iterator(_corpus(), trainer)
    model = json.loads(trainer_tok.to_str())["model"]
    trained = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    vocab: dict[str, int] = dict(specials)
    taken = set(specials.values())
    free = (i for i in range(vocab_size) if i not in taken)
    for token, _ in trained:
        vocab[token] = next(free)
    for i in free:
        vocab[f"Ġ<{i}>"] = i  # 'Ġ' is the byte-level space: decodes to " <i>"
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


def materialize(shape_dir: Path, cache: Path) -> Path:
    """A servable directory for the shape (config + generated tokenizer) under `cache`; reused
    when config.json and the tokenizer format are unchanged."""
    cfg_text = (shape_dir / "config.json").read_text()
    cfg = read_config(shape_dir)
    vocab_size = cfg.get("vocab_size")
    if not isinstance(vocab_size, int) or vocab_size <= 0:
        raise ConfigError(f"{shape_dir / 'config.json'}: vocab_size missing")
    digest = hashlib.sha1(f"{TOKENIZER_FORMAT}\n{cfg_text}".encode()).hexdigest()[:12]
    target = cache / "model-shapes" / f"{shape_dir.name}-{digest}"
    if (target / "tokenizer.json").is_file():
        return target
    partial = target.with_name(target.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    (partial / "config.json").write_text(cfg_text)
    specials = special_ids(cfg)
    build_tokenizer(vocab_size, specials).save(str(partial / "tokenizer.json"))
    eos = _token_at(specials, cfg.get("eos_token_id"))
    bos = _token_at(specials, cfg.get("bos_token_id"))
    pad = _token_at(specials, cfg.get("pad_token_id"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "pad_token": pad or eos,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg.get("max_position_embeddings", 32768),
        "chat_template": CHAT_TEMPLATE,
    }
    (partial / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (partial / "SHAPE.txt").write_text(
        f"generated by autotune from {shape_dir.name}: config.json of a public model, no weights "
        "(serve with --load-format dummy); tokenizer generated offline, not the model's own\n"
    )
    if target.exists():  # another process won the race
        return target
    partial.rename(target)
    return target
