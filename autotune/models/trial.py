"""A trial and what it teaches: its result and failure, what the engine resolved, learned and accuracy
failures, and the confirmation of the best against the baseline."""

from __future__ import annotations

import json
import statistics
from enum import Enum
from typing import Any, Literal

from pydantic import Field, model_validator

from autotune.models.base import Record, Scalar, utc_now
from autotune.models.energy import TrialEnergy
from autotune.models.launch import Candidate, LaunchSpec, NcclReading
from autotune.models.measurement import CapacityReport, GateOutcome, Measurement, NeedleReport, QevalReport


class FailureCause(str, Enum):
    """What a failure blames, and so what a study may learn from it. Every failure class states one:
    a signature row (autotune/engines/signatures.py) or the code that makes the failure."""

    #: knob values (`FailureInfo.implicates`): learned, and a later candidate holding them is skipped
    KNOB = "knob"
    #: the host, an installed package, the driver, the network (NCCL) or the image: no knob value
    #: explains it, so none is learned; fix it and every candidate may run again
    ENVIRONMENT = "environment"
    #: what the trial had to fit in: memory, time, load, the study's own settings. It depends on the
    #: knobs together, so no single value is learned or isolated
    LIMITS = "limits"
    #: nothing names a cause: isolation launches look for the knob value that broke
    UNEXPLAINED = "unexplained"


class FailureInfo(Record):
    """A classified failure. `implicates` names the knobs whose values caused it: a later
    candidate holding the same values for all of them is skipped without launching. `cause` says
    what the failure blames; an ENVIRONMENT failure teaches no knob value."""

    failure_class: str
    cause: FailureCause = Field(
        FailureCause.UNEXPLAINED, description="what it blames: knob values, the environment, limits, or nothing known"
    )
    feature: str | None = Field(None, description="human name of what failed, e.g. 'nvfp4 KV cache'")
    message: str
    evidence: list[str] = Field(default_factory=list, description="the log lines that show it")
    implicates: list[str] = Field(default_factory=list)
    fix: str | None = None


class EnvironmentFailure(Record):
    """A failure no knob explains, that stops a study: every candidate shared it (the baseline and
    another candidate failed the same way, nothing implicated), or its signature blames the
    environment (FailureCause.ENVIRONMENT: NCCL, a missing package, the driver). Its cause is in
    the model, the engine's install or the host, not a knob value. The study stops on it, exits 3,
    and a resume re-runs those trials, the baseline first."""

    failure_class: str
    message: str
    trials: list[int] = Field(description="the trials that failed for it (re-run on resume)")
    evidence: str | None = Field(None, description="the decisive line of the engine's log")
    fix: str | None = Field(None, description="what to do, where the engine knows the cause on this host")

    def describe(self) -> str:
        """One paragraph: what failed, where, the log line, the fix, and how to resume."""
        listed = ", ".join(map(str, self.trials))
        if len(self.trials) > 1:
            out = (f"every candidate failed the same way, for a cause no knob explains ({self.failure_class} in "
                   f"trials {listed}): {self.message}")
        else:
            out = (f"trial {listed} failed for a cause in the environment, not a knob ({self.failure_class}): "
                   f"{self.message}")
        if self.evidence and self.evidence not in self.message:
            out += f"; log: {self.evidence}"
        out += f"; fix: {self.fix}" if self.fix else "; fix what the model, the engine's install or the host share"
        return out + "; then run the same command: the study retries these trials, the baseline first"


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
# once on resume; a second such attempt counts as a failure of the candidate. environment: it
# failed for a cause every candidate shared (the study stopped on it): kept as history, not as a
# measurement, and re-run on every resume, the baseline first, until the environment is fixed
TrialStatus = Literal["ok", "failed", "skipped", "interrupted", "crashed", "environment"]


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
        "cuda_graphs, kernels (FlashInfer's autotune and attention warm-up), engine_init, and from its lines' "
        "clock api_server, serving, logged); empty when the engine logs none",
    )
    log_path: str | None = None
    capacity: CapacityReport | None = Field(
        None, description="objective capacity_at_slo: every concurrency level probed and the capacity found"
    )
    energy: TrialEnergy | None = Field(
        None, description="energy per measured workload and the GPUs' state (None: trials stored before it)"
    )

    @property
    def served(self) -> bool:
        """Its engine came up and it measured something (a phase past the start ran)."""
        return self.status == "ok" or any(p not in ("start", "teardown") for p in self.phase_s)

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
