"""vLLM: render a Candidate into `vllm serve` argv + env, read what vLLM says it selected.

Flag names, log lines and metric names were checked against vLLM's source (v0.2x era, the
`vllm/engine/arg_utils.py` dataclass-driven CLI); `supported_flags()` re-checks the flags against
the vLLM that is actually installed, because every one of them is version-dependent.

Launch form: `python -m vllm.entrypoints.cli.main serve MODEL ...`. It is what the `vllm` console
script runs, and it works where vLLM is importable from PYTHONPATH without the script on PATH.

One module of ~670 lines on purpose: a knob's flag and the log line that says what vLLM selected
for it are kept side by side (argv and the reading of the log change together with each vLLM).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from autotune.engines.base import Engine, Knobs, PlanNotes, ready_request
from autotune.errors import ConfigError, EngineUnavailable
from autotune.launchers.cluster import Cluster, rank_env
from autotune.checkpoint.shapes import dummy_weights
from autotune.engines.vllm_choices import EngineChoices, cached_choices
from autotune.engines.vllm_values import check_values, schedule_refusal
from autotune.engines.vllm_log import parse_resolved, parse_selected, parse_start_parts
from autotune.models import (
    Candidate,
    ChoicesCheck,
    SCHEDULE_KEY,
    ChoicesStatus,
    DraftSchedule,
    LaunchSpec,
    ModelSpec,
    NodeLaunch,
    ResolvedEngine,
    Scalar,
    SearchSpace,
)

log = logging.getLogger(__name__)

CLI_MODULE = "vllm.entrypoints.cli.main"
INSTALL_HINT = "pip install 'autotune[vllm]' (vLLM needs a CUDA GPU and a matching torch)"
DEFAULT_SEED = 1234

# knob -> option that takes the knob's value. Knob names are vLLM's own option dest names.
VALUE_FLAGS: dict[str, str] = {
    "quantization": "--quantization",
    "dtype": "--dtype",
    "kv_cache_dtype": "--kv-cache-dtype",
    "attention_backend": "--attention-backend",
    "moe_backend": "--moe-backend",
    "linear_backend": "--linear-backend",
    "max_model_len": "--max-model-len",
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "distributed_executor_backend": "--distributed-executor-backend",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "block_size": "--block-size",
    "load_format": "--load-format",
    "performance_mode": "--performance-mode",
}

#: backends for sm_12x (DGX Spark's GB10, the b12x kernels) by knob, tried where the installed
#: version lists them (B12X attention and plain b12x from 0.33.0; flashinfer_b12x 0.26.0 lists too).
#: None has run on a Spark yet: a space, the probe matrix and `space new` say UNVERIFIED of them.
SM12X_BACKENDS: dict[str, tuple[str, ...]] = {
    "attention_backend": ("B12X",),
    "moe_backend": ("b12x", "flashinfer_b12x"),
    "linear_backend": ("b12x", "flashinfer_b12x"),
}
UNVERIFIED = "unverified until a Spark runs it"

# Boolean knobs. vLLM builds these with argparse.BooleanOptionalAction, so each has a --no- form:
# True -> --flag, False -> --no-flag, None -> left out.
BOOL_FLAGS: dict[str, str] = {
    "enforce_eager": "--enforce-eager",
    "enable_chunked_prefill": "--enable-chunked-prefill",
    "enable_prefix_caching": "--enable-prefix-caching",
    "async_scheduling": "--async-scheduling",
    "disable_custom_all_reduce": "--disable-custom-all-reduce",
    "skip_tokenizer_init": "--skip-tokenizer-init",
}

# Knobs rendered together into one JSON option.
SPEC_KNOBS = frozenset(
    {"spec_method", "draft_k", "draft_schedule", "spec_model", "spec_prompt_lookup_max", "spec_prompt_lookup_min"}
)
COMPILATION_KNOBS = frozenset({"cudagraph_mode"})
OTHER_KNOBS = frozenset({"seed"})

NGRAM_METHODS = frozenset({"ngram", "ngram_gpu"})
# vLLM's own ngram default is min = max = 5 ("arbitrarily chosen" in its source). 4/2 matches the
# docs' ngram example (lookup up to 4 tokens) and also proposes on shorter 2-token matches.
NGRAM_LOOKUP_MAX = 4
NGRAM_LOOKUP_MIN = 2

# Env vars vLLM removed; setting them does nothing but warn, so they are refused with the fix.
# KV bytes per element. --kv-cache-dtype (capabilities.md §2.2); "auto" = the model dtype.
KV_CACHE_DTYPE_BYTES: dict[str, float] = {
    "float16": 2.0,
    "bfloat16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
    "fp8_ds_mla": 1.0,  # scales and the bf16 rope part ignored
    "nvfp4": 0.5625,  # e2m1 + one fp8 scale per 16
    "turboquant_k8v4": 0.75,  # 8-bit K, 4-bit V
    "turboquant_4bit_nc": 0.5,
    "turboquant_k3v4_nc": 0.4375,
    "turboquant_3bit_nc": 0.375,
    "int8_per_token_head": 1.0,
    "fp8_per_token_head": 1.0,
    "int4_per_token_head": 0.5,
    "int2_per_token_head": 0.25,
}
# ExLlamaV3/TabbyAPI `cache_mode` (used by EXL3 forks; not a vLLM dtype). Assumed: the stated
# bits plus one 16-bit scale per 32 values.
CACHE_MODE_BYTES: dict[str, float] = {"fp16": 2.0, "q8": 8.5 / 8, "q6": 6.5 / 8, "q4": 4.5 / 8}
# Memory per GPU beyond weights and KV: stated, not fitted.
FIXED_GB = 1.5  # CUDA context, torch/NCCL buffers, sampler
CUDA_GRAPHS_GB = 0.5  # graph pools; 0 with enforce_eager
DEFAULT_BATCHED_TOKENS = 8192
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9

REMOVED_ENV: dict[str, str] = {
    "VLLM_ATTENTION_BACKEND": "removed from vLLM (Jan 2026); use the attention_backend knob (--attention-backend)",
    "VLLM_USE_V1": "removed from vLLM; the V1 engine is the only engine",
}

_OPTION = re.compile(r"^--?[A-Za-z][\w.-]*$")


class VllmEngine(Engine):
    name = "vllm"
    knobs: ClassVar[frozenset[str]] = (
        frozenset(VALUE_FLAGS) | frozenset(BOOL_FLAGS) | SPEC_KNOBS | COMPILATION_KNOBS | OTHER_KNOBS
    )
    health_path = "/health"
    metrics_path = "/metrics"
    tokenize_path: ClassVar[str] = "/tokenize"
    feature_probes_entry = "autotune.probe.features.vllm:feature_probes"
    context_knob = "max_model_len"
    startup_guess_s = 120.0
    cheap_params: ClassVar[Mapping[str, Scalar]] = {
        "enforce_eager": True, "max_model_len": 1024, "max_num_seqs": 8, "gpu_memory_utilization": 0.3,
    }

    def __init__(self, python: str | None = None) -> None:
        #: the interpreter that runs vLLM (default: this one)
        self.python = python or sys.executable

    # ------------------------------------------------------------------ availability

    def version(self) -> str | None:
        return _version_in(self.python)

    def check_available(self) -> None:
        if self.version() is None:
            raise EngineUnavailable(f"vLLM is not installed for {self.python}; install it with: {INSTALL_HINT}")

    # ------------------------------------------------------------------ rendering

    def preflight(self, space: SearchSpace) -> None:
        check_space_flags(space, self.python)

    def engine_choices(self, host_key: str) -> EngineChoices | ChoicesCheck:
        """What the installed version accepts (cached per version and host fingerprint `host_key`),
        or the check that says why it cannot be asked."""
        version = self.version()
        if version is None:
            return ChoicesCheck(status=ChoicesStatus.NOT_INSTALLED, engine=self.name)
        try:
            return cached_choices(self.python, version, host_key)
        except EngineUnavailable as exc:
            return ChoicesCheck(status=ChoicesStatus.UNREADABLE, engine=self.name, engine_version=version, detail=str(exc))

    def check_values(self, space: SearchSpace, host_key: str) -> ChoicesCheck:
        choices = self.engine_choices(host_key)
        if isinstance(choices, ChoicesCheck):
            return choices
        gone = check_values(space, choices, VALUE_FLAGS)
        return ChoicesCheck(status=ChoicesStatus.CHECKED, engine=self.name, engine_version=choices.version,
                            takes_draft_schedule=schedule_refusal(choices) is None, left_out=gone)

    def render(self, candidate: Candidate, model: ModelSpec, port: int, host: str = "127.0.0.1") -> LaunchSpec:
        if candidate.engine != self.name:
            raise ConfigError(f"candidate is for engine {candidate.engine!r}, not {self.name!r}")
        argv = [self.python, "-m", CLI_MODULE, "serve", model_source(model)]
        argv += ["--served-model-name", model.served_name or model.name, "--host", host, "--port", str(port)]
        argv += ["--enable-prompt-tokens-details"]
        known = {k: v for k, v in candidate.params.items() if k not in self.plugin_flags}
        argv += option_args(known) + self.plugin_args(candidate.params)
        env = checked_env(candidate.env)
        node = NodeLaunch(argv=argv, env=env)
        return LaunchSpec(engine=self.name, nodes=[node], port=port, health_path=self.health_path,
                          ready=ready_request(model))

    def render_cluster(
        self, candidate: Candidate, model: ModelSpec, port: int, cluster: Cluster
    ) -> LaunchSpec:
        """The multi-node launch on Ray (NVIDIA's DGX Spark playbook): node 0 `ray start --head`,
        every other node `ray start --address=<head>`, then `vllm serve` on node 0 with
        `--distributed-executor-backend ray` and tensor parallelism over the whole cluster."""
        params = cluster_params(candidate.params, cluster)
        single = self.render(candidate.model_copy(update={"params": params}), model, port, host=cluster.bind_host)
        env = checked_env(candidate.env)
        nodes = [
            NodeLaunch(
                node=i,
                role="head" if i == 0 else "worker",
                argv=ray_start_argv(self.python, cluster, i),
                env={**rank_env(cluster, i), **env},
            )
            for i in range(len(cluster.nodes))
        ]
        server_env = {**rank_env(cluster, 0), **env, "RAY_ADDRESS": cluster.ray_address}
        nodes.append(NodeLaunch(node=0, role="server", argv=single.server.argv, env=server_env))
        return LaunchSpec(engine=self.name, nodes=nodes, port=port, health_path=self.health_path,
                          ready=ready_request(model))

    def validate_space(self, space: SearchSpace) -> None:
        """Knob names (base class), then: every value of every knob renders, no removed env var is set."""
        super().validate_space(space)
        check_dummy_space(space)
        checked_env(space.env)
        for knob in space.knobs:
            if knob.kind == "env":
                checked_env({knob.name: "1"})
                continue
            if knob.name in space.plugin_flags:
                continue
            for value in knob.values:
                option_args({k: v for k, v in {**space.fixed, knob.name: value}.items() if k not in space.plugin_flags})

    # ------------------------------------------------------------------ what the planner asks

    def kv_element_bytes(self, params: Knobs, model_dtype_bits: float | None, notes: PlanNotes) -> float | None:
        mode = params.get("cache_mode")
        if mode is not None:
            key = str(mode).lower()
            if key not in CACHE_MODE_BYTES:
                notes.missing("KV cache", f"cache_mode {mode!r} not in the table")
                return None
            notes.assume(f"main KV in the fork's cache_mode={mode} ({CACHE_MODE_BYTES[key]:.3f} bytes/value, assumed)")
            return CACHE_MODE_BYTES[key]
        dtype = params.get("kv_cache_dtype")
        if dtype in (None, "auto"):
            if not model_dtype_bits:
                notes.assume("KV dtype auto = the model dtype, assumed 16-bit")
            return (model_dtype_bits or 16) / 8
        if dtype not in KV_CACHE_DTYPE_BYTES:
            notes.missing("KV cache", f"kv_cache_dtype {dtype!r} not in the table")
            return None
        return KV_CACHE_DTYPE_BYTES[str(dtype)]

    def memory_overhead(self, params: Knobs) -> tuple[float, float]:
        fixed = FIXED_GB + (0.0 if self.eager(params) else CUDA_GRAPHS_GB)
        return fixed, params.number("max_num_batched_tokens") or DEFAULT_BATCHED_TOKENS

    def memory_budget_gb(self, params: Knobs, gpu_memory_gb: float) -> float | None:
        return (params.number("gpu_memory_utilization") or DEFAULT_GPU_MEMORY_UTILIZATION) * gpu_memory_gb

    def eager(self, params: Knobs) -> bool:
        return params.get("enforce_eager") is True

    def max_batch(self, params: Knobs) -> int | None:
        # unset: vLLM picks its own default by GPU and logs it at DEBUG only (vllm_log.py); the planner
        # takes it as no cap, which holds for the waves the shipped spaces send (32 streams at most)
        seqs = params.number("max_num_seqs")
        return int(seqs) if seqs else None

    def cuda_graphs(self, params: Knobs) -> bool:
        mode = params.get("cudagraph_mode")
        return not self.eager(params) and not (isinstance(mode, str) and mode.upper() == "NONE")

    # ------------------------------------------------------------------ reading logs and metrics

    def selected(self, log_text: str) -> dict[str, str]:
        return parse_selected(log_text)

    def start_parts(self, log_text: str) -> dict[str, float]:
        return parse_start_parts(log_text)

    def resolved(self, log_text: str) -> ResolvedEngine | None:
        return parse_resolved(log_text)

    def spec_decode_counters(self, metrics_text: str) -> dict[str, float]:
        """The base class's names (drafts, draft_tokens, accepted, accepted_pos<i>) from /metrics."""
        names = {"num_drafts": "drafts", "num_draft_tokens": "draft_tokens", "num_accepted_tokens": "accepted"}
        return {
            names.get(key, key.replace("num_accepted_tokens_pos", "accepted_pos")): value
            for key, value in parse_spec_metrics(metrics_text).items()
        }


# ---------------------------------------------------------------------- dummy weights


def check_dummy_space(space: SearchSpace) -> None:
    """Random weights emit random tokens: a dummy space decodes fixed lengths, checks no accuracy,
    and has no speculative decoding (acceptance on random text says nothing about real text)."""
    if not dummy_weights(space):
        return
    where = f"search space {space.name!r} (load_format dummy)"
    if space.fixed.get("load_format") != "dummy":
        raise ConfigError(f"{where}: put load_format: dummy in `fixed`; a study cannot mix dummy and real weights")
    if space.gates.needle is not None or space.gates.qeval is not None:
        raise ConfigError(f"{where}: random weights cannot pass accuracy gates; set gates: {{needle: null, qeval: null}}")
    if not space.workload.fixed_length:
        raise ConfigError(f"{where}: set workload.fixed_length: true (a random model may stop at any token)")
    drafts = [v for k in space.knobs if k.name == "draft_k" for v in k.values if v not in (None, 0)]
    if drafts or space.fixed.get("draft_k") not in (None, 0):
        raise ConfigError(f"{where}: leave draft_k out; draft acceptance on random text says nothing about real text")


# ---------------------------------------------------------------------- argv pieces


def model_source(model: ModelSpec) -> str:
    """What `vllm serve` loads: a Hugging Face checkpoint directory (or hub id)."""
    if not model.path:
        raise ConfigError(
            f"model {model.name!r} has no `path`; vLLM serves a Hugging Face checkpoint directory "
            "(set model.path or pass --model DIR)"
        )
    if model.path.endswith(".gguf"):
        raise ConfigError(
            f"{model.path} is a GGUF file; vLLM 0.2x serves GGUF only through an out-of-tree plugin. "
            "Convert it to a Hugging Face directory first (scripts/gpu/convert_gemma_gguf.py)"
        )
    return model.path


def option_args(params: Mapping[str, Scalar]) -> list[str]:
    """The option part of the argv for these knob values, in a fixed order (None = left out)."""
    unknown = sorted(set(params) - VllmEngine.knobs)
    if unknown:
        raise ConfigError(
            f"engine 'vllm' has no knob {', '.join(map(repr, unknown))}; "
            f"known knobs: {', '.join(sorted(VllmEngine.knobs))}"
        )
    seed = params.get("seed")
    args = ["--seed", str(DEFAULT_SEED if seed is None else _int("seed", seed))]
    for knob, flag in VALUE_FLAGS.items():
        value = params.get(knob)
        if value is None:
            continue
        if isinstance(value, bool):
            raise ConfigError(f"knob {knob} takes a value for {flag}, got the boolean {value}")
        args += [flag, str(value)]
    for knob, flag in BOOL_FLAGS.items():
        value = params.get(knob)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise ConfigError(f"knob {knob} is a switch ({flag}); use true, false or null, got {value!r}")
        args.append(flag if value else "--no-" + flag.removeprefix("--"))
    spec = speculative_config(params)
    if spec is not None:
        args += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    if params.get("cudagraph_mode") is not None:
        mode = str(params["cudagraph_mode"]).upper()
        args += ["--compilation-config", json.dumps({"cudagraph_mode": mode}, separators=(",", ":"))]
    return args


RAY_CLI_MODULE = "ray.scripts.scripts"  # what the `ray` console script runs


def cluster_params(params: Mapping[str, Scalar], cluster: Cluster) -> dict[str, Scalar]:
    """The candidate's knobs for a Ray launch over `cluster`: executor `ray`, and TP x PP equal to
    the cluster's devices (TP fills what the candidate leaves unset)."""
    backend = params.get("distributed_executor_backend")
    if backend not in (None, "ray"):
        raise ConfigError(
            f"a Ray cluster launch needs distributed_executor_backend=ray, the candidate has {backend!r}"
        )
    out = {**params, "distributed_executor_backend": "ray"}
    tp, pp = params.get("tensor_parallel_size"), params.get("pipeline_parallel_size")
    pp_size = 1 if pp is None else _int("pipeline_parallel_size", pp)
    if len(cluster.nodes) == 1:  # one box: the single-process launch's layout (TP 1 unless asked), on Ray
        tp_size = 1 if tp is None else _int("tensor_parallel_size", tp)
        if tp_size * pp_size > cluster.devices:
            raise ConfigError(
                f"tensor_parallel_size {tp_size} x pipeline_parallel_size {pp_size} = {tp_size * pp_size} ranks, "
                f"but the one-node cluster holds {cluster.devices}"
            )
        out["tensor_parallel_size"] = tp_size
        return out
    tp_size = cluster.devices // max(pp_size, 1) if tp is None else _int("tensor_parallel_size", tp)
    if tp_size * pp_size != cluster.devices:
        raise ConfigError(
            f"tensor_parallel_size {tp_size} x pipeline_parallel_size {pp_size} = {tp_size * pp_size} ranks, "
            f"but the cluster holds {cluster.devices} ({len(cluster.nodes)} nodes x {max(cluster.gpus_per_node, 1)})"
        )
    out["tensor_parallel_size"] = tp_size
    return out


def ray_start_argv(python: str, cluster: Cluster, index: int) -> list[str]:
    """`ray start` for node `index`: the head on node 0, a worker joining it elsewhere. `--block`
    keeps it in the foreground, so the launcher owns it and SIGTERM stops that node's Ray."""
    node = cluster.nodes[index]
    argv = [python, "-m", RAY_CLI_MODULE, "start"]
    if index == 0:
        argv += ["--head", "--port", str(cluster.ray_port)]
    else:
        argv += [f"--address={cluster.ray_address}"]
    argv += ["--node-ip-address", node.ip, "--num-gpus", str(cluster.gpus_per_node)]
    if node.num_cpus is not None:
        argv += ["--num-cpus", str(node.num_cpus)]
    if node.temp_dir is not None:
        argv += ["--temp-dir", node.temp_dir]
    return argv + ["--disable-usage-stats", "--block"]


def draft_schedule(params: Mapping[str, Scalar]) -> DraftSchedule | None:
    """The candidate's draft_schedule knob (`1:4/4:2`), parsed; None when unset."""
    text = params.get("draft_schedule")
    if text is None:
        return None
    try:
        return DraftSchedule.parse(str(text))
    except ValueError as exc:
        raise ConfigError(f"knob draft_schedule: {exc}") from None


def speculative_config(params: Mapping[str, Scalar]) -> dict[str, Any] | None:
    """`--speculative-config` JSON from spec_method + draft_k (+ draft_schedule: vLLM's
    num_speculative_tokens_per_batch_size, with num_speculative_tokens its largest K); None when
    draft_k is 0 or unset and no schedule is given."""
    schedule = draft_schedule(params)
    draft_k = params.get("draft_k")
    k = 0 if draft_k is None else _int("draft_k", draft_k)
    if schedule is not None:
        if k not in (0, schedule.max_k):
            raise ConfigError(f"draft_k {k} with draft_schedule {schedule.text()}: draft_k must be its largest K "
                              f"({schedule.max_k}) or unset")
        k = schedule.max_k
    if k == 0:
        return None
    if k < 0:
        raise ConfigError(f"draft_k must be >= 0, got {k}")
    method = params.get("spec_method")
    if method is None:
        raise ConfigError("draft_k > 0 needs spec_method (e.g. ngram, eagle3, mtp, draft_model)")
    config: dict[str, Any] = {"method": str(method), "num_speculative_tokens": k}
    if schedule is not None:
        config[SCHEDULE_KEY] = schedule.vllm_entries()
    if params.get("spec_model") is not None:
        config["model"] = str(params["spec_model"])
    lookup_max = params.get("spec_prompt_lookup_max")
    lookup_min = params.get("spec_prompt_lookup_min")
    if method in NGRAM_METHODS:
        lookup_max = NGRAM_LOOKUP_MAX if lookup_max is None else _int("spec_prompt_lookup_max", lookup_max)
        if lookup_min is None:
            lookup_min = min(NGRAM_LOOKUP_MIN, lookup_max)
        else:
            lookup_min = _int("spec_prompt_lookup_min", lookup_min)
        if lookup_min > lookup_max:
            raise ConfigError(f"spec_prompt_lookup_min {lookup_min} > spec_prompt_lookup_max {lookup_max}")
    if lookup_max is not None:
        config["prompt_lookup_max"] = lookup_max
    if lookup_min is not None:
        config["prompt_lookup_min"] = lookup_min
    return config


def _int(knob: str, value: Scalar) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"knob {knob} needs an integer, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"knob {knob} needs an integer, got {value!r}") from None
    if number != int(number):
        raise ConfigError(f"knob {knob} needs an integer, got {value!r}")
    return int(number)


def option_names(argv: Iterable[str]) -> list[str]:
    """The option names in an argv (values such as JSON or numbers are skipped)."""
    return [a.split("=", 1)[0] for a in argv if _OPTION.match(a.split("=", 1)[0])]


# ---------------------------------------------------------------------- environment


def checked_env(env: Mapping[str, str], known: set[str] | None = None) -> dict[str, str]:
    """Pass env vars through, refusing removed VLLM_* names (and, with `known`, unknown ones)."""
    for name in env:
        if name in REMOVED_ENV:
            raise ConfigError(f"env {name}: {REMOVED_ENV[name]}")
        if known is not None and name.startswith("VLLM_") and name not in known:
            raise ConfigError(
                f"env {name} is not a vLLM environment variable in this vLLM version "
                "(vLLM would only warn 'Unknown vLLM environment variable detected'); remove it"
            )
    return {str(k): str(v) for k, v in env.items()}


_ENV_SCRIPT = (
    "import json, vllm.envs as e\n"
    "names = getattr(e, 'environment_variables', None)\n"
    "names = sorted(names) if names is not None else sorted(n for n in dir(e) if n.isupper())\n"
    "print('AUTOTUNE_ENV ' + json.dumps(names))\n"
)
_env_cache: dict[tuple[str, str | None], frozenset[str]] = {}


def known_env_vars(python: str = sys.executable) -> frozenset[str]:
    """Every env var the installed vLLM reads (`vllm.envs.environment_variables`), cached per version."""
    key = (python, _version_in(python))
    if key[1] is None:
        raise EngineUnavailable(f"vLLM is not installed for {python}; install it with: {INSTALL_HINT}")
    if key not in _env_cache:
        out = _run([python, "-c", _ENV_SCRIPT], timeout_s=120, what="list vLLM's environment variables")
        line = next((ln for ln in out.splitlines() if ln.startswith("AUTOTUNE_ENV ")), None)
        if line is None:
            raise EngineUnavailable(f"could not list vLLM's environment variables; output: {out[-500:]}")
        _env_cache[key] = frozenset(json.loads(line.removeprefix("AUTOTUNE_ENV ")))
    return _env_cache[key]


# ---------------------------------------------------------------------- flag check against the install

_flags_cache: dict[tuple[str, str | None], frozenset[str]] = {}


def parse_help_options(help_text: str) -> frozenset[str]:
    """Option strings from argparse help (`serve --help=all`): lines indented two spaces that start
    with '-'; each comma-separated invocation contributes its first word."""
    options: set[str] = set()
    for line in help_text.splitlines():
        if not line.startswith("  -") or line.startswith("   "):
            continue
        invocation = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        for part in invocation.split(", "):
            word = part.split(" ", 1)[0].split("=", 1)[0]
            if _OPTION.match(word):
                options.add(word)
    return frozenset(options)


def supported_flags(python: str = sys.executable) -> frozenset[str]:
    """The options `vllm serve` accepts in the vLLM installed for `python`, cached per version."""
    version = _version_in(python)
    if version is None:
        raise EngineUnavailable(f"vLLM is not installed for {python}; install it with: {INSTALL_HINT}")
    key = (python, version)
    if key not in _flags_cache:
        argv = [python, "-m", CLI_MODULE, "serve", "--help=all"]
        text = _run(argv, timeout_s=240, what="read `vllm serve --help=all`")
        flags = parse_help_options(text)
        if "--port" not in flags or "--max-model-len" not in flags:
            raise EngineUnavailable(f"`vllm serve --help=all` did not list the usual options; output: {text[-800:]}")
        _flags_cache[key] = flags
    return _flags_cache[key]


def required_flags(space: SearchSpace) -> dict[str, str]:
    """option -> knob that needs it, for every value of every arg knob (plus the fixed ones)."""
    needed: dict[str, str] = {flag: knob for knob, flag in space.plugin_flags.items()}
    base = {k: v for k, v in space.fixed.items() if k not in space.plugin_flags}
    for flag in option_names(["--served-model-name", "--host", "--port", "--enable-prompt-tokens-details"]):
        needed[flag] = "(always rendered)"
    for flag in option_names(option_args(base)):
        needed.setdefault(flag, "(fixed)")
    for knob in space.knobs:
        if knob.kind != "arg" or knob.name in space.plugin_flags:
            continue
        for value in knob.values:
            for flag in option_names(option_args({**base, knob.name: value})):
                needed.setdefault(flag, knob.name)
    return needed


def check_space_flags(space: SearchSpace, python: str = sys.executable) -> None:
    """Refuse a space that needs an option (or VLLM_* env var) this vLLM version does not have."""
    supported = supported_flags(python)
    missing = {flag: knob for flag, knob in required_flags(space).items() if flag not in supported}
    if missing:
        version = _version_in(python)
        listed = "; ".join(f"{flag} (knob {knob})" for flag, knob in sorted(missing.items()))
        raise ConfigError(f"vLLM {version} has no option {listed}; drop those knob values or use another vLLM")
    env_names = set(space.env) | {k.name for k in space.knobs if k.kind == "env"}
    if any(n.startswith("VLLM_") for n in env_names):
        try:
            known = set(known_env_vars(python))
        except EngineUnavailable as exc:  # the flags were checked; an unlisted env var only warns in vLLM
            log.warning("VLLM_* env names not checked: %s", exc)
            return
        checked_env(dict.fromkeys(env_names, ""), known=known)


def _version_in(python: str) -> str | None:
    if python == sys.executable:
        try:
            return importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            return None
    try:
        out = subprocess.run(
            [python, "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
            capture_output=True, text=True, timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def _run(argv: list[str], timeout_s: float, what: str) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EngineUnavailable(f"could not {what}: no answer after {timeout_s:.0f} s") from None
    except OSError as exc:
        raise EngineUnavailable(f"could not {what}: {exc}") from None
    if out.returncode != 0:
        raise EngineUnavailable(f"could not {what} (exit {out.returncode}): {(out.stderr or out.stdout)[-800:]}")
    return out.stdout


# ---------------------------------------------------------------------- spec-decode counters

SPEC_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
_METRIC_LINE = re.compile(r"^(vllm:spec_decode_(\w+?))(?:_total)?(\{[^}]*\})?\s+(\S+)(?:\s+\d+)?\s*$")
_POSITION = re.compile(r'position="(\d+)"')


def parse_spec_metrics(text: str) -> dict[str, float]:
    """Spec-decode counters from Prometheus text, summed over label sets (engines, models).

    Keys: num_drafts, num_draft_tokens, num_accepted_tokens, and num_accepted_tokens_pos<i>
    per draft position. Counters may or may not carry the `_total` suffix; `_created` samples
    (the counter's creation time) are ignored.
    """
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:spec_decode_"):
            continue
        m = _METRIC_LINE.match(line.strip())
        if not m:
            continue
        base, labels, raw = m.group(2), m.group(3) or "", m.group(4)
        if base.endswith("_created"):
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        if base == "num_accepted_tokens_per_pos":
            pos = _POSITION.search(labels)
            if not pos:
                continue
            key = f"num_accepted_tokens_pos{pos.group(1)}"
        elif base in SPEC_COUNTERS:
            key = base
        else:
            continue
        totals[key] = totals.get(key, 0.0) + value
    return totals
