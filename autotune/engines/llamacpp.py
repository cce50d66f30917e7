"""llama.cpp through llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`).

Knob names follow the server's own options (`--type_k`, `--n_ubatch`, ...). Two are translated:
KV cache types are given by name (f16, q8_0, q4_0) and passed as ggml type numbers, and `draft_k`
(0 = off) turns on prompt-lookup decoding with that many drafted tokens.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Annotated, ClassVar

from autotune.engines.base import Engine, Knobs, PlanNotes, ready_request
from autotune.errors import ConfigError, EngineUnavailable
from autotune.models import Candidate, FailureInfo, LaunchSpec, ModelSpec, NodeLaunch, Scalar, SearchSpace

# ggml_type enum values (ggml.h); stable across releases because GGUF files store them.
GGML_TYPES: dict[str, int] = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 6,
    "q5_1": 7,
    "q8_0": 8,
    "bf16": 30,
}
# llama.cpp --cache-type-k / -v: ggml block sizes (q8_0 = 34 bytes per 32 values, ...).
KV_BYTES: dict[str, float] = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
}
# Memory beyond weights and KV: stated, not fitted.
FIXED_GB = 0.25  # context + scratch
DEFAULT_UBATCH = 512
#: a start that died on a fault a CPU build unfit for the host raises (SIGILL, SIGBUS, SIGFPE, SIGSEGV)
CPU_FAULT = re.compile(r"exited with code -(4|7|8|11)\b|Illegal instruction|Segmentation fault")
#: the install that builds llama-cpp-python for any CPU of its architecture (run from the project root)
PORTABLE_INSTALL = "bash scripts/install_llama_cpp.sh"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The flags this CPU advertises (Linux); empty where they cannot be read."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    line = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    return frozenset(line.partition(":")[2].split())


@cache
def build_features() -> str:
    """What the installed llama-cpp-python was compiled with (ggml's system info: "AVX2 = 1 | AMX_INT8
    = 1 | ..."), read in a process of its own (loading the library is safe; running it may not be)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
            capture_output=True, text=True, timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def cpu_fault_fix(failure: FailureInfo, flags: frozenset[str], built: str) -> str | None:
    """The fix for a start that every candidate failed on a CPU fault: the portable build; and why,
    where the build has AMX kernels on a CPU that advertises AMX (a native build on such a host:
    cloud VMs advertise AMX and fault on its first instruction)."""
    if not CPU_FAULT.search(" ".join([failure.message, *failure.evidence])):
        return None
    amx = sorted(f for f in flags if f.startswith("amx"))
    if amx and "AMX" in built:
        return (f"llama-cpp-python here was compiled natively with ggml's AMX kernels, and this CPU advertises AMX "
                f"({', '.join(amx)}) but faults on it (cloud VMs do): install the portable build into this "
                f"environment with `{PORTABLE_INSTALL}` (from the project root)")
    return (f"the engine died on a CPU fault at start: the llama-cpp-python build may not suit this CPU; "
            f"`{PORTABLE_INSTALL}` (from the project root) installs a portable build")


PLAIN_OPTIONS = (
    "n_ctx",
    "n_batch",
    "n_ubatch",
    "n_threads",
    "n_threads_batch",
    "n_gpu_layers",
    "chat_format",
    "use_mmap",
    "use_mlock",
    "offload_kqv",
    "flash_attn",
    "cache",
    "seed",
)


def _arg(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def space_values(space: SearchSpace) -> list[tuple[str, Scalar]]:
    """(option, value) for every value of every arg knob and every fixed setting."""
    pairs = [(name, value) for name, value in space.fixed.items()]
    pairs += [(k.name, v) for k in space.knobs if k.kind == "arg" for v in k.values]
    return pairs


class LlamaCppEngine(Engine):
    name = "llamacpp"
    knobs: ClassVar[frozenset[str]] = frozenset({*PLAIN_OPTIONS, "type_k", "type_v", "draft_k"})
    health_path = "/v1/models"
    tokenize_path = "/extras/tokenize"
    feature_probes_entry = "autotune.probe.features.llamacpp:feature_probes"
    context_knob = "n_ctx"
    cheap_params: ClassVar[Mapping[str, Scalar]] = {"n_ctx": 512}
    default_spec_method = "ngram"  # llama-cpp-python drafts by prompt lookup
    needs_gpu = False
    gates_at_end = True  # a relaunch takes ~2 s here (docs/measurements.md), a needle + qeval run ~210 s
    startup_guess_s = 5.0
    queue_requests = False  # set by use_space where the workload or qeval sends requests in parallel

    def use_space(self, space: SearchSpace) -> LlamaCppEngine:
        super().use_space(space)
        # llama-cpp-python's server ends a stream when another request waits for the model
        # (interrupt_requests, on by default): a wave of N requests would measure cut-short streams.
        # Off, they queue for its one model lock and the wave measures what this server delivers
        # (a capacity search keeps several streams in flight too).
        qeval = space.gates.qeval
        self.queue_requests = (any(level > 1 for level in space.workload.concurrency) or bool(qeval and qeval.concurrency > 1)
                               or space.objective.capacity)
        return self

    def version(self) -> str | None:
        try:
            return metadata.version("llama-cpp-python")
        except metadata.PackageNotFoundError:
            return None

    def check_available(self) -> None:
        if self.version() is None:
            raise EngineUnavailable(
                "llama-cpp-python is not installed; install the embedded engine with "
                "`pip install -e '.[llamacpp]'`"
            )
        try:
            metadata.version("uvicorn")
        except metadata.PackageNotFoundError as exc:
            raise EngineUnavailable(
                "llama-cpp-python's server extra is missing; run `pip install 'llama-cpp-python[server]'`"
            ) from exc

    def environment_fix(self, failure: FailureInfo) -> str | None:
        return cpu_fault_fix(failure, cpu_flags(), build_features())

    def validate_space(self, space: SearchSpace) -> None:
        """Knob names (base class), then the values autotune itself translates: KV cache type
        names and draft_k (a count of drafted tokens, 0 = off)."""
        super().validate_space(space)
        for name, value in space_values(space):
            if name in ("type_k", "type_v") and value is not None and value not in GGML_TYPES:
                raise ConfigError(f"knob {name}: {value!r} is not a KV cache type; use one of {sorted(GGML_TYPES)}")
            if name == "draft_k" and value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ConfigError(f"knob draft_k: {value!r} is not a number of drafted tokens (an integer >= 0)")

    def preflight(self, space: SearchSpace) -> None:
        """Every value of every server option, as rendered on the command line, checked against
        the type and range of that option in the installed server (its pydantic ModelSettings)."""
        from pydantic import TypeAdapter, ValidationError

        from llama_cpp.server.settings import ModelSettings

        for name, value in space_values(space):
            field = ModelSettings.model_fields.get(name) if name in PLAIN_OPTIONS else None
            if field is None or value is None:
                continue
            kind = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
            adapter = TypeAdapter(kind)
            try:
                adapter.validate_python(_arg(value))
            except ValidationError as exc:
                why = exc.errors()[0]["msg"]
                raise ConfigError(
                    f"knob {name}: value {value!r} is not valid for llama.cpp's --{name} ({why})"
                ) from None

    def render(self, candidate: Candidate, model: ModelSpec, port: int, host: str = "127.0.0.1") -> LaunchSpec:
        if not model.path:
            raise ConfigError(f"model {model.name!r} has no resolved path")
        argv = [sys.executable, "-m", "llama_cpp.server", "--model", model.path]
        argv += ["--model_alias", model.served_name or model.name, "--host", host, "--port", str(port)]
        params = candidate.params
        for name in PLAIN_OPTIONS:
            value = params.get(name)
            if value is not None:
                argv += [f"--{name}", _arg(value)]
        for name in ("type_k", "type_v"):
            value = params.get(name)
            if value is not None:
                if value not in GGML_TYPES:
                    raise ConfigError(f"{name}={value!r} is not a KV cache type; use one of {sorted(GGML_TYPES)}")
                argv += [f"--{name}", str(GGML_TYPES[str(value)])]
        draft_k = params.get("draft_k")
        if draft_k:
            argv += ["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", str(draft_k)]
        argv += self.plugin_args(dict(params))
        if self.queue_requests:
            argv += ["--interrupt_requests", "False"]
        return LaunchSpec(
            engine=self.name,
            nodes=[NodeLaunch(argv=argv, env=dict(candidate.env))],
            port=port,
            health_path=self.health_path,
            ready=ready_request(model),
        )

    def decode_threads(self, params: Knobs, cpu_cores: int) -> int | None:
        # llama-cpp-python's server default: half the host's cores, at least one
        threads = params.get("n_threads")
        return int(threads) if isinstance(threads, int | float) and threads > 0 else max(cpu_cores // 2, 1)

    def max_batch(self, params: Knobs) -> int:
        return 1  # llama-cpp-python's server decodes one request at a time: the rest queue for its model lock

    def kv_element_bytes(self, params: Knobs, model_dtype_bits: float | None, notes: PlanNotes) -> float | None:
        types = [params.get("type_k") or "f16", params.get("type_v") or "f16"]
        unknown = [t for t in types if t not in KV_BYTES]
        if unknown:
            notes.missing("KV cache", f"llama.cpp cache type {unknown[0]!r} not in the table")
            return None
        return sum(KV_BYTES[str(t)] for t in types) / 2

    def memory_overhead(self, params: Knobs) -> tuple[float, float]:
        return FIXED_GB, params.number("n_ubatch") or DEFAULT_UBATCH

    def selected(self, log_text: str) -> dict[str, str]:
        """What llama.cpp reports when it builds the context (verbose log)."""
        found: dict[str, str] = {}
        patterns = {
            "flash_attn": r"llama_context:\s+flash_attn\s+=\s+(\S+)",
            "n_ctx": r"llama_context:\s+n_ctx\s+=\s+(\d+)",
            "n_batch": r"llama_context:\s+n_batch\s+=\s+(\d+)",
            "n_ubatch": r"llama_context:\s+n_ubatch\s+=\s+(\d+)",
            "kv_cache_k": r"llama_kv_cache: size = .*K \((\w+)\)",
            "kv_cache_v": r"llama_kv_cache: size = .*V \((\w+)\)",
            "chat_format": r"Using (?:fallback )?chat format: (\S+)",
            "system_info": r"(?m)^system_info: (.*)$",
        }
        for key, pattern in patterns.items():
            matches = re.findall(pattern, log_text)
            if matches:
                found[key] = matches[-1].strip()
        sizes = re.findall(r"llama_kv_cache: size =\s+([\d.]+) MiB", log_text)
        if sizes:
            found["kv_cache_mib"] = f"{sum(float(s) for s in sizes):.2f}"
        return found
