"""How one value is written in a table cell or a line: objectives, samples, a candidate's difference
from the baseline; shared by the terminal and the HTML report."""

from __future__ import annotations

from typing import TYPE_CHECKING


from autotune.models import (
    Candidate,
    Objective,
    TrialResult,
)

if TYPE_CHECKING:
    pass


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_objective(value: float | None, objective: Objective) -> str:
    """An objective's value as printed: one that reads energy (tokens per joule, about 0.1-10) with 4
    significant digits."""
    if value is None:
        return "-"
    return f"{value:.4g}" if objective.gpu_energy else f"{value:.1f}"


def fmt_samples(values: list[float], objective: Objective) -> str:
    """A confirmation's objectives, one per launch: [49.2, 48.1]."""
    return "[" + ", ".join(fmt_objective(v, objective) for v in values) + "]"


def diff_label(candidate: Candidate, baseline: Candidate | None) -> str:
    """The knobs where a candidate differs from the baseline; the baseline itself says so."""
    if baseline is None:
        return candidate.label()
    changed = {k: v for k, v in candidate.params.items() if baseline.params.get(k) != v}
    changed_env = {k: v for k, v in candidate.env.items() if baseline.env.get(k) != v}
    if not changed and not changed_env:
        return "(engine defaults)"
    return Candidate(engine=candidate.engine, params=changed, env=changed_env).label()


def _median(trial: TrialResult, name: str) -> float | None:
    m = trial.measurement(name)
    return m.median if m else None
