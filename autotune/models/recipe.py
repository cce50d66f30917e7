"""The exported recipe: its numbers, verdict and provenance, and the draft schedule per batch size."""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import Field, model_validator

from autotune.models.base import Record, Scalar
from autotune.models.launch import (
    SYNTHETIC_ACCEPTANCE_WHY,
    LaunchSpec,
    synthetic_acceptance,
    synthetic_in_argv,
)
from autotune.models.measurement import CapacityReport
from autotune.models.space import Better
from autotune.models.trial import AcceptanceSource, Confirmation, FailedClass, ResolvedEngine, VerdictStatus


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
    vs_baseline: str | None = Field(
        None, description="this trial against the baseline, one launch each, judged by the launch noise"
    )
    tied_with: list[int] = Field(
        default_factory=list, description="trials whose one launch lies within the launch noise of this one's"
    )
    unchecked_faster: list[int] = Field(
        default_factory=list,
        description="trials faster by score whose gates never ran (the study ended before they did): unchecked",
    )

    def warnings(self) -> list[str]:
        """What a reader of the terminal, the report or the recipe must be told, one line each."""
        out = []
        if self.status in (VerdictStatus.NO_WINNER, VerdictStatus.NOT_CONFIRMED):
            out.append(f"not a confirmed winner ({self.status.value}): {self.summary}")
        if self.accuracy not in ("pass", "not applicable"):
            out.append(f"accuracy {self.accuracy}: the gates did not all pass with evidence")
        if self.tradeoffs:
            out.append("it trades away, against the baseline beyond the launch noise: "
                       + "; ".join(t.describe() for t in self.tradeoffs))
        if self.unchecked_faster:
            out.append(f"faster by score, gates never run (unchecked): trial(s) {', '.join(map(str, self.unchecked_faster))}")
        if self.tied_with:
            out.append(f"tied within the launch noise with trial(s) {', '.join(map(str, self.tied_with))}: one launch "
                       "each cannot tell them apart")
        return out


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
