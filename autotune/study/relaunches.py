"""The relaunches a study makes beyond its trials, as the progress display is told of them: which
kind (it counts each kind down for the ETA) and what its status line says."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict

from autotune.models import Candidate


class RelaunchKind(str, Enum):
    GATES = "gates"  # the deferred gates of the best by score
    ISOLATION = "isolation"  # a failed gate's class narrowed down, one knob value at a time
    CONFIRMATION = "confirmation"  # a round of the winner against the baseline
    NOISE = "noise"  # the baseline again, for a launch-noise sample

    @property
    def objective_only(self) -> bool:
        """Whether the relaunch measures the objective alone (no gates)."""
        return self in (RelaunchKind.CONFIRMATION, RelaunchKind.NOISE)


class Relaunch(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: RelaunchKind
    label: str  # the status line's while it runs
    detail: str

    @property
    def text(self) -> str:
        return f"{self.label}: {self.detail}"

    @classmethod
    def gates(cls, candidate: Candidate, number: int) -> Relaunch:
        return cls(kind=RelaunchKind.GATES, label=f"gates of trial {number} (best by score, gates deferred)",
                   detail=f"relaunch {candidate.label()}")

    @classmethod
    def isolation(cls, candidate: Candidate, trial: int) -> Relaunch:
        return cls(kind=RelaunchKind.ISOLATION, label=f"isolating class of trial {trial}", detail=candidate.label())

    @classmethod
    def confirmation(cls, round_: int, total: int, trial: int) -> Relaunch:
        return cls(kind=RelaunchKind.CONFIRMATION, label=f"confirmation round {round_}/{total}", detail=f"trial {trial}")

    @classmethod
    def noise(cls, index: int, wanted: int) -> Relaunch:
        return cls(kind=RelaunchKind.NOISE, label=f"noise relaunch {index}/{wanted}", detail="baseline")
