"""What vLLM's start-up log says it selected and resolved, and where its start's seconds went.

Every pattern matches a line's message, never its `[file.py:NNN]` prefix: the prefix moves between
versions (0.26.0 `[api_utils.py:273] non-default args:`, 0.33.0 `[startup.py:96]`). Checked on the
recorded logs of both versions under tests/logs/.
"""

from __future__ import annotations

import re
from datetime import datetime

from autotune.models import ResolvedEngine

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DRAFTER_MARKER = "Loading drafter model"

# Each pattern: key -> regex with one group, first match wins (vLLM logs most of these once).
_LINE_PATTERNS: dict[str, re.Pattern[str]] = {
    "engine_version": re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)|vLLM API server version (\S+)"),
    "flash_attn_version": re.compile(r"Using FlashAttention version (\d+)"),
    "max_model_len": re.compile(r"Using max model len (\d+)"),
    "max_num_batched_tokens": re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"),
    "async_scheduling": re.compile(r"Asynchronous scheduling is (enabled|disabled)"),
    "model_weights_gib": re.compile(r"Model loading took ([\d.]+) ?GiB"),
    "kv_cache_memory_gib": re.compile(r"Available KV cache memory: ([\d.]+) ?GiB"),
    "kv_cache_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "cuda_graph_gib": re.compile(r"Graph capturing finished in \d+ secs?, took ([-\d.]+) GiB"),
}
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
# Auto selection, then an explicitly requested backend ("Using AttentionBackendEnum.X backend."),
# then the pre-selector V1 wording ("Using Flash Attention backend on V1 engine.").
_ATTENTION = (
    re.compile(r"Using (\w+) attention backend out of potential backends"),
    re.compile(r"Using (?:AttentionBackendEnum|_Backend)\.(\w+) backend\b"),
    re.compile(r"Using (\w+) backend \(selected via --attention-backend\)"),
    re.compile(r"Using ([\w ]+?) backend on V1 engine"),
)
_MOE = re.compile(r"Using '?([\w ]+?)'? (\w+) MoE backend(?: out of potential backends|\.)")
_LINEAR = (
    re.compile(r"Selected (\w+) for \S+"),
    re.compile(r"Using (\w+) for (?:NVFP4 GEMM|MXFP8 GEMM|MXFP4 GEMM|mixed-precision linear)"),
)
_INIT_LINE = re.compile(r"Initializing a V1 LLM engine .*? with config: (.*)")
_INIT_FIELDS: dict[str, re.Pattern[str]] = {
    "kv_cache_dtype": re.compile(r"\bkv_cache_dtype=([\w.]+)"),
    "dtype": re.compile(r"\bdtype=(?:torch\.)?(\w+)"),
    "quantization": re.compile(r"\bquantization=([\w-]+)"),
    "enforce_eager": re.compile(r"\benforce_eager=(True|False)"),
    "tensor_parallel_size": re.compile(r"\btensor_parallel_size=(\d+)"),
    "pipeline_parallel_size": re.compile(r"\bpipeline_parallel_size=(\d+)"),
    "max_seq_len": re.compile(r"\bmax_seq_len=(\d+)"),
    "speculative_config": re.compile(r"\bspeculative_config=(None|SpeculativeConfig\([^)]*\))"),
    "cudagraph_mode": re.compile(r"['\"]?cudagraph_mode['\"]?\s*[:=]\s*[<'\"]?(?:CUDAGraphMode\.)?([A-Z_]+)"),
}


# Where a start's seconds went, as vLLM logs them (first match each). engine_init is vLLM's
# "init engine (profile, create kv cache, warmup model)": it holds compile and CUDA graphs, not the weights.
_START_PARTS: dict[str, re.Pattern[str]] = {
    "weights": re.compile(r"Model loading took [\d.]+ ?GiB(?: memory)? and ([\d.]+) ?s"),
    "compile": re.compile(r"torch\.compile took ([\d.]+) ?s in total"),
    "profile": re.compile(r"Initial profiling/warmup run took ([\d.]+) ?s"),
    "cuda_graphs": re.compile(r"Graph capturing finished in (\d+) secs?"),
    "engine_init": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) ?s"),
}


# The parts vLLM does not time itself, read from its lines' own clock ("INFO 12-07 01:44:58 [...]",
# whole seconds): api_server from its first line to the engine core's first (config, tokenizer, the
# core's process), serving from the core's init done to "Starting vLLM server", logged from the first
# line to that one. What a start spends before the first line (process start, Python imports) is the
# launcher's start time less `logged`.
_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ")
_CORE_FIRST = "Initializing a V1 LLM engine"
_INIT_DONE = "init engine (profile, create kv cache, warmup model) took"
_SERVING = "Starting vLLM server on"


def _stamp_s(line: str) -> float | None:
    """Seconds of a line's stamp on one calendar (the log states no year: a leap year holds 02-29;
    a start across New Year reads end < begin and its spans are left out)."""
    m = _STAMP.search(line)
    if not m:
        return None
    month, day, hour, minute, second = (int(g) for g in m.groups())
    return datetime(2000, month, day, hour, minute, second).timestamp()


def _clock_parts(text: str) -> dict[str, float]:
    first: float | None = None
    marks: dict[str, float] = {}
    for line in text.splitlines():
        stamp = _stamp_s(line)
        if stamp is None:
            continue
        first = stamp if first is None else first
        for key, marker in (("core", _CORE_FIRST), ("init_done", _INIT_DONE), ("serving", _SERVING)):
            if marker in line and key not in marks:
                marks[key] = stamp
    spans = {"api_server": (first, marks.get("core")), "serving": (marks.get("init_done"), marks.get("serving")),
             "logged": (first, marks.get("serving"))}
    return {key: float(end - begin) for key, (begin, end) in spans.items()
            if begin is not None and end is not None and end >= begin}


# FlashInfer's kernel steps inside the engine's init: its autotune step, stamped by FlashInfer's own
# logger ("2026-12-07 21:49:09,154 - INFO - autotuner.py:651 - ... Autotuning process starts"), and the
# attention warm-up vLLM runs for a FLASHINFER model, from its line to the next stamped one. Where no
# kernel for the GPU is on disk (no prebuilt cubin, an empty JIT cache) they compile it: 100 s or more
# of an H100's start, a few seconds once compiled.
_FI_AUTOTUNE = re.compile(
    r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d),(\d{3}) - \w+ - autotuner\.py:\d+ - .*Autotuning process (starts|ends)"
)
_FI_WARMUP = "Warming up FlashInfer attention"


def _kernel_part(text: str) -> dict[str, float]:
    """{"kernels": seconds of FlashInfer's autotune steps and attention warm-ups}, or {} when neither is logged."""
    autotune, began, found = 0.0, None, False
    for m in _FI_AUTOTUNE.finditer(text):
        year, month, day, hour, minute, second, ms = (int(g) for g in m.groups()[:7])
        stamp = datetime(year, month, day, hour, minute, second, ms * 1000).timestamp()
        found = True
        if m.group(8) == "starts":
            began = stamp
        elif began is not None:
            autotune, began = autotune + stamp - began, None
    warmup = 0.0
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _FI_WARMUP in line and (begin := _stamp_s(line)) is not None:
            end = next((t for later in lines[i + 1:] if (t := _stamp_s(later)) is not None), None)
            if end is not None and end >= begin:
                warmup, found = warmup + end - begin, True
    return {"kernels": round(autotune + warmup, 2)} if found else {}


def parse_start_parts(log_text: str) -> dict[str, float]:
    """Seconds per part of a vLLM start, from its log (keys absent when not logged)."""
    text = _ANSI.sub("", log_text)
    found = {key: pattern.search(text) for key, pattern in _START_PARTS.items()}
    return {**{key: round(float(m.group(1)), 2) for key, m in found.items() if m}, **_clock_parts(text),
            **_kernel_part(text)}


def parse_selected(log_text: str) -> dict[str, str]:
    """What vLLM reports it actually used, from its startup log (keys absent when not logged)."""
    text = _ANSI.sub("", log_text)
    main_part, _, drafter_part = text.partition(_DRAFTER_MARKER)
    found: dict[str, str] = {}

    init = _INIT_LINE.search(text)
    if init:
        for key, pattern in _INIT_FIELDS.items():
            m = pattern.search(init.group(1))
            if m:
                found[key] = m.group(1)
        if "max_seq_len" in found:
            found.setdefault("max_model_len", found.pop("max_seq_len"))
    for key, pattern in _LINE_PATTERNS.items():
        m = pattern.search(text)
        if m:
            found[key] = next(g for g in m.groups() if g is not None).replace(",", "")
    m = _CONCURRENCY.search(text)
    if m:
        found["max_concurrency"] = m.group(2)
        found["max_concurrency_at_tokens"] = m.group(1).replace(",", "")
    for key, part in (("attention_backend", main_part), ("drafter_attention_backend", drafter_part)):
        for pattern in _ATTENTION:
            m = pattern.search(part)
            if m:
                found[key] = m.group(1).strip()
                break
    m = _MOE.search(text)
    if m:
        found["moe_backend"] = m.group(1).strip()
        found["moe_quant"] = m.group(2)
    kernels: list[str] = []
    for pattern in _LINEAR:
        for km in pattern.finditer(text):
            if km.group(1) not in kernels:
                kernels.append(km.group(1))
    if kernels:
        found["linear_kernels"] = ", ".join(kernels)
    if "Cudagraph is disabled under eager mode" in text:
        found["cudagraph_mode"] = "NONE"
    return found


# What vLLM resolved, from its config line ("Initializing a V1 LLM engine ... compilation_config={...}")
# and its "non-default args: {...}" line. vLLM logs the max_num_seqs it chose itself only at DEBUG
# ("Defaulting max_num_seqs to %d ..."), so at INFO only a value that was set is known.
_NON_DEFAULT_SEQS = re.compile(r"non-default args: \{.*?'max_num_seqs': (\d+)")
_COMPILATION_MODE = re.compile(r"'mode': <CompilationMode\.(\w+): -?\d+>")
_CAPTURE_SIZES = re.compile(r"'cudagraph_capture_sizes': \[([\d, ]*)\]")


def _number(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def parse_resolved(log_text: str) -> ResolvedEngine | None:
    """The values vLLM resolved at start (None where its log does not state one); None when the
    log states none of them."""
    text = _ANSI.sub("", log_text)
    picked = parse_selected(text)
    init = _INIT_LINE.search(text)
    config = init.group(1) if init else ""
    seqs = _NON_DEFAULT_SEQS.search(text)
    mode = _COMPILATION_MODE.search(config)
    sizes = _CAPTURE_SIZES.search(config)
    resolved = ResolvedEngine(
        engine_version=picked.get("engine_version"),
        max_num_seqs=int(seqs.group(1)) if seqs else None,
        attention_backend=picked.get("attention_backend"),
        moe_backend=picked.get("moe_backend"),
        compilation_mode=mode.group(1) if mode else None,
        cudagraph_capture_sizes=[int(s) for s in sizes.group(1).split(",") if s.strip()] if sizes else None,
        kv_cache_tokens=_number(picked.get("kv_cache_tokens")),
    )
    return resolved if resolved.model_dump(exclude_none=True) else None
