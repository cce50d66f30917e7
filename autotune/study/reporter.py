"""What the study tells while it runs: the Reporter a study reports to (the terminal's
RichReporter in autotune/output/progress.py), and one that says nothing."""

from __future__ import annotations

from typing import Protocol

from autotune.models import Candidate, TrialResult
from autotune.study.relaunches import Relaunch


class Reporter(Protocol):
    def trial_started(self, number: int, launched: int, total: int, candidate: Candidate) -> None: ...

    def trial_event(self, text: str) -> None: ...

    def trial_finished(self, result: TrialResult, best: TrialResult | None) -> None: ...

    def trial_skipped(self, result: TrialResult) -> None: ...

    def relaunch_started(self, relaunch: Relaunch) -> None: ...

    def learned(self, text: str) -> None: ...

    def in_flight(self, text: str) -> None: ...


class SilentReporter:
    def trial_started(self, number: int, launched: int, total: int, candidate: Candidate) -> None:
        pass

    def trial_event(self, text: str) -> None:
        pass

    def trial_finished(self, result: TrialResult, best: TrialResult | None) -> None:
        pass

    def trial_skipped(self, result: TrialResult) -> None:
        pass

    def relaunch_started(self, relaunch: Relaunch) -> None:
        pass

    def learned(self, text: str) -> None:
        pass

    def in_flight(self, text: str) -> None:
        pass
