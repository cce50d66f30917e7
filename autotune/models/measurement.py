"""What a launch measured: requests, measurements with their samples, a capacity search's levels,
the needle and qeval reports, gate outcomes."""

from __future__ import annotations

import statistics
from enum import Enum
from typing import Any, Literal

from pydantic import Field, model_validator

from autotune.models.base import Record, Scalar
from autotune.models.space import Slo


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
    """One concurrency level: `streams` requests kept in flight, judged over the requests sent once
    every stream had sent its first (at least one full turn, and `min_requests`)."""

    streams: int
    good: int = Field(description="requests that met every limit of the SLO")
    slow: int = Field(description="requests that completed but missed a limit")
    failed: int = Field(description="requests that failed (an error, a short fixed-length reply): misses")
    excluded: int = Field(description="requests not judged: each stream's first (the burst that fills the level) "
                                      "and those sent after the judged ones (cut); before 2026-12-07, only the cut")
    attainment: float = Field(description="good / (good + slow + failed)")
    interval: tuple[float, float] = Field(description="Wilson 95% interval of the attainment")
    verdict: LevelVerdict
    output_tps: float = Field(description="output tokens every request streamed inside the level's window / its seconds")
    p99_ttft_ms: float | None = None
    p99_itl_ms: float | None = None
    seconds: float = Field(description="the level's window: the first judged request's send to the last one's end")
    unawaited: int = Field(0, description="requests of the judged range the level did not wait for (sent or not): it "
                                          "failed whatever they did, as even all of them good would have left the "
                                          "interval below the target, and so did the judged ones alone; 0 before 2026-12-08")

    @property
    def determined(self) -> int:
        return self.good + self.slow + self.failed

    def counts(self) -> str:
        """What the level was judged on: its judged and excluded requests and its window's seconds."""
        unawaited = f", {self.unawaited} not awaited (failed whatever they did)" if self.unawaited else ""
        return f"{self.determined} judged / {self.excluded} excluded{unawaited}, {self.seconds:.1f} s"


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
