"""The corpus of real config.json files: shared/reference/configs/ beside the checkout.

Each `<name>/config.json` is a published model's config, copied verbatim from a public repository
(MANIFEST.md there says from where). PUBLISHED holds the sizes their publishers state, as the
MANIFEST quotes them: every config of the corpus must have a row here, so a config added there
is a test case here."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "configs"


@dataclass(frozen=True)
class Published:
    """A model's size as its publisher states it (billions). `active_b` None: a dense model, whose
    decode reads every text weight. `class_size`: the figure is a size class (the name's "14B"),
    not a count; the count the MANIFEST gives for the config then stands beside it in `counted_b`.
    `active_class_size`: the same for the active figure (Qwen3-Next's "A3B": 3.56B with the LM head,
    3.25B without; the Qwen3-30B-A3B card's 3.3B counts both embedding tables)."""

    total_b: float
    active_b: float | None
    stated_in: str
    vision_b: float | None = None
    mtp_b: float | None = None
    class_size: bool = False
    counted_b: float | None = None
    active_class_size: bool = False  # the active figure is the name's class ("A3B"), not a count


PUBLISHED: dict[str, Published] = {
    "deepseek-v3": Published(671, 37, "DeepSeek-V3 README (671B / 37B); README_WEIGHTS: MTP 11.5B unique", mtp_b=11.5),
    "devstral-2-123b-instruct-2512": Published(123, None, "Devstral 2 model card benchmark table"),
    "devstral-small-2-24b-instruct-2512": Published(24, None, "Devstral Small 2 model card"),
    "gemma-3-27b-it": Published(27.433, None, "Gemma 3 Technical Report: 417M vision + 1,416M embedding + 25,600M "
                                "non-embedding", vision_b=0.417),
    "gpt-oss-120b": Published(117, 5.1, "openai/gpt-oss README"),
    "gpt-oss-20b": Published(21, 3.6, "gpt-oss-20b model card"),
    "kimi-k2-instruct": Published(1000, 32, "Kimi-K2 README (1T / 32B)", class_size=True, counted_b=1026.4),
    "llama-3.1-70b-instruct": Published(70, None, "Llama 3.1 model card"),
    "llama-3.2-1b-instruct": Published(1.23, None, "Llama 3.2 model card"),
    "llama-3_3-nemotron-super-49b-v1": Published(49, None, "NVIDIA NeMo Customizer model docs"),
    "llama-4-scout-17b-16e-instruct": Published(109, 17, "Llama 4 model card"),
    "minimax-m2": Published(230, 10, "MiniMax-M2 README"),
    "nemotron-h-56b-base-8k": Published(56, None, "model card; Megatron-Bridge docs (56B)"),
    "nvidia-nemotron-3-nano-30b-a3b-bf16": Published(30, 3.5, "Megatron-Bridge Nemotron 3 Nano docs (30B / 3.5B)",
                                                     class_size=True, counted_b=31.58),
    "olmo-3.1-32b-instruct": Published(32, None, "Olmo 3 model card (size class; counts give 32.2B)"),
    "phi-4": Published(14, None, "Phi-4 model card (14B)", class_size=True, counted_b=14.7),
    "qwen3-235b-a22b": Published(235, 22, "Qwen3-235B-A22B model card"),
    "qwen3-30b-a3b": Published(30.5, 3.3, "Qwen3-30B-A3B-Instruct-2507 model card"),
    "qwen3-32b": Published(32.8, None, "Qwen3-32B model card"),
    "qwen3-next-80b-a3b-thinking": Published(80, 3, "Qwen3-Next-80B-A3B-Thinking model card (80B / 3B: \"A3B\")",
                                             active_class_size=True),
    "qwen3.5-27b": Published(27, None, "Qwen3.5-27B model card"),
}


def corpus_names() -> list[str]:
    """Every config of the corpus (its folder names); empty when the corpus is not beside the checkout."""
    return sorted(p.parent.name for p in CORPUS.glob("*/config.json"))


def model_dir(tmp_path: Path, name: str) -> Path:
    """A model directory holding only the corpus config's config.json, as after `hf download ... config.json`."""
    target = tmp_path / name
    target.mkdir()
    shutil.copy(CORPUS / name / "config.json", target / "config.json")
    return target
