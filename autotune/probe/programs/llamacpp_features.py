"""llama.cpp feature probe program: one context, a few greedy tokens, reported as token ids.

`python -m autotune.probe.programs.llamacpp_features --model FILE --type-k q8_0 --type-v q8_0 --flash-attn on`
creates a real llama.cpp context (through llama-cpp-python) with those settings, generates
greedily for fixed prompts and prints a ProbeResult whose evidence is the token ids, texts and
timings (JSON). The parent (autotune/probe/features/llamacpp.py) judges them against the f16/f16
reference run. The prompts have one obvious continuation (counting, the days of the week), so
quantized KV (even q4_0) keeps them, while open prompts would flip near-tied tokens and fail
configurations that work. Garbage output from a broken kernel does not keep them.

A context that cannot be created fails with llama.cpp's own log line as evidence (the child runs
with verbose=True, so llama.cpp logs to its stderr, which the runner classifies).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from autotune.models import ProbeResult
from autotune.probe.programs import emit

KV_TYPES = ("f16", "q8_0", "q4_0")  # the ggml cache types this program can create
GOLDEN_PROMPTS = (
    "Count: 1, 2, 3, 4, 5, 6,",
    "The days of the week are Monday, Tuesday,",
)
MAX_TOKENS = 8
N_CTX = 256


def _child(args: argparse.Namespace) -> ProbeResult:
    """Create the context (llama.cpp logs to stderr), generate greedily, report token ids."""
    import llama_cpp  # imported here: the parent must work without llama-cpp-python

    ggml_types = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0,
                  "q4_0": llama_cpp.GGML_TYPE_Q4_0}
    draft = None
    if args.draft_k:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        draft = LlamaPromptLookupDecoding(num_pred_tokens=args.draft_k)
    started = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=args.model,
        n_ctx=N_CTX,
        n_threads=args.threads,
        type_k=ggml_types[args.type_k],
        type_v=ggml_types[args.type_v],
        flash_attn=args.flash_attn == "on",
        draft_model=draft,
        seed=0,
        verbose=True,
    )
    loaded = time.perf_counter()
    tokens: list[list[int]] = []
    texts: list[str] = []
    for prompt in GOLDEN_PROMPTS:
        out: list[int] = []
        for token in llm.generate(llm.tokenize(prompt.encode()), temp=0.0, top_k=1):
            if token == llm.token_eos() or len(out) >= args.max_tokens:
                break
            out.append(int(token))
        tokens.append(out)
        texts.append(llm.detokenize(out).decode("utf-8", errors="replace"))
        llm.reset()
    done = time.perf_counter()
    report = {"tokens": tokens, "texts": texts, "load_s": round(loaded - started, 3),
              "generate_s": round(done - loaded, 3)}
    return ProbeResult(feature="llamacpp", status="works", evidence=json.dumps(report))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m autotune.probe.programs.llamacpp_features")
    parser.add_argument("--model", required=True)
    parser.add_argument("--type-k", choices=KV_TYPES, default="f16")
    parser.add_argument("--type-v", choices=KV_TYPES, default="f16")
    parser.add_argument("--flash-attn", choices=("on", "off"), default="off")
    parser.add_argument("--draft-k", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    # a failure propagates as a traceback on stderr, next to llama.cpp's own log line
    emit(_child(parser.parse_args(argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
