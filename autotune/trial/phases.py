"""Where a trial's seconds go: start, warm-up, decode, prefill, concurrency, needle, qeval, teardown.

The measuring code opens each step by its Phase (trial/run.py): the PhaseClock adds the seconds
until the next phase (or `stop`) to that phase, the request counter (trial/requests.py) starts
counting the step's requests, and the status line shows the step's label.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum

from pydantic import BaseModel, ConfigDict

class Phase(str, Enum):
    """Where a trial's seconds go, in the order a trial runs them."""

    START = "start"
    WARM_UP = "warm-up"
    DECODE = "decode"
    PREFILL = "prefill"
    CONCURRENCY = "concurrency"
    CAPACITY = "capacity"  # the capacity_at_slo search over concurrency levels
    NEEDLE = "needle"
    QEVAL = "qeval"
    TEARDOWN = "teardown"

    def __str__(self) -> str:
        return self.value


PHASES = tuple(p.value for p in Phase)
#: what the status line says when a phase opens, where it is not the phase's own name
LABELS = {Phase.PREFILL: "cold prefill", Phase.CAPACITY: "capacity at the SLO"}


class Step(BaseModel):
    """One step a trial opens: its phase (timed by the PhaseClock) and what the status line says."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    phase: Phase
    label: str

    @classmethod
    def of(cls, phase: Phase) -> Step:
        return cls(phase=phase, label=LABELS.get(phase, phase.value))

    @classmethod
    def decode(cls, prompt_set: str) -> Step:
        return cls(phase=Phase.DECODE, label=f"decode ({prompt_set})")

    @classmethod
    def long_decode(cls) -> Step:
        return cls(phase=Phase.DECODE, label="decode after a long prompt")


class PhaseClock:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self._current: Phase | None = None
        self._since = 0.0

    def enter(self, phase: Phase) -> None:
        self.stop()
        self._current, self._since = phase, self.clock()

    def stop(self) -> None:
        if self._current is not None:
            self.add(self._current, self.clock() - self._since)
            self._current = None

    def add(self, phase: Phase, seconds: float) -> None:
        self.seconds[phase.value] = round(self.seconds.get(phase.value, 0.0) + seconds, 3)

    def ordered(self) -> dict[str, float]:
        return {p: self.seconds[p] for p in PHASES if p in self.seconds}
