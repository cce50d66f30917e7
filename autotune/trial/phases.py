"""Where a trial's seconds go: start, warm-up, decode, prefill, concurrency, needle, qeval, teardown.

The measuring code already names each phase as it enters it (the progress events); a PhaseClock
listens to those events and adds the seconds until the next phase (or `stop`) to that phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable

PHASES = ("start", "warm-up", "decode", "prefill", "concurrency", "needle", "qeval", "teardown")

#: the start of a progress event -> the phase it opens
_EVENT_PHASES = (
    ("warm-up", "warm-up"),
    ("decode", "decode"),  # "decode (prose)", "decode (structured)", "decode after a long prompt"
    ("cold prefill", "prefill"),
    ("concurrency", "concurrency"),
    ("needle", "needle"),
    ("qeval", "qeval"),
)


def phase_of(event: str) -> str | None:
    """The phase an event opens; None for an event inside a phase ("decode (prose): 2/4 requests done")."""
    if ": " in event:
        return None
    return next((phase for prefix, phase in _EVENT_PHASES if event.startswith(prefix)), None)


class PhaseClock:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self._current: str | None = None
        self._since = 0.0

    def enter(self, phase: str) -> None:
        self.stop()
        self._current, self._since = phase, self.clock()

    def stop(self) -> None:
        if self._current is not None:
            self.add(self._current, self.clock() - self._since)
            self._current = None

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = round(self.seconds.get(phase, 0.0) + seconds, 3)

    def listen(self, events: Callable[[str], None]) -> Callable[[str], None]:
        """`events`, timing the phases its texts name."""

        def timed(text: str) -> None:
            phase = phase_of(text)
            if phase is not None:
                self.enter(phase)
            events(text)

        return timed

    def ordered(self) -> dict[str, float]:
        return {p: self.seconds[p] for p in PHASES if p in self.seconds}
