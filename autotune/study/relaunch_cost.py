"""What one relaunch costs, for the time budget and the forecast.

A confirmation, noise or gates relaunch measures the objective alone (no cold prefill, no other
concurrency, no long-context decode), so a whole trial's time overprices it: on a dense 32B shape
on the H200 a round of two decode-only relaunches took ~225 s where the median trial priced it at
~496 s. Measured relaunches of the study price it best; else the phases its trials spent on what a
relaunch repeats (start, warm-up, decode, the objective's wave, teardown). The first launch of a
study pays the one-time compilation (torch.compile, CUDA graphs, FlashInfer JIT) that a relaunch
finds cached, so its start is left out when a warm one exists.
"""

from __future__ import annotations

import statistics

from autotune.models import Objective, TrialResult
from autotune.trial.phases import Phase

#: phases of a trial that an objective-only relaunch runs again
RELAUNCH_PHASES = tuple(p.value for p in (Phase.START, Phase.WARM_UP, Phase.DECODE, Phase.TEARDOWN))
GATE_PHASES = (Phase.NEEDLE.value, Phase.QEVAL.value)


def gates_time_s(trial: TrialResult) -> float:
    """Seconds the trial's own launch spent on its gates (phase_s; 0 where they did not run)."""
    return sum(trial.phase_s.get(p, 0.0) for p in GATE_PHASES)


def _phases_s(trial: TrialResult, phases: tuple[str, ...]) -> float:
    return sum(trial.phase_s.get(p, 0.0) for p in phases)


def warm_trials(trials: list[TrialResult]) -> list[TrialResult]:
    """The launched trials with their phases timed, the study's first (cold) launch left out when
    another exists."""
    timed = sorted((t for t in trials if t.status == "ok" and t.phase_s.get(Phase.START.value)), key=lambda t: t.started_at)
    return timed[1:] if len(timed) > 1 else timed


def relaunch_s(trials: list[TrialResult], objective: Objective, measured: list[float] | None = None) -> float | None:
    """Seconds of one objective-only relaunch: the median of `measured` relaunches, else of the warm
    trials' relaunch phases (with the concurrency phase where the objective is a wave of N streams),
    else None (nothing known: no basis to cut)."""
    done = [s for s in (measured or []) if s and s > 0]
    if done:
        return statistics.median(done)
    phases = RELAUNCH_PHASES + ((Phase.CONCURRENCY.value,) if objective.waves else ()) + (
        (Phase.CAPACITY.value,) if objective.capacity else ())
    priced = [_phases_s(t, phases) for t in warm_trials(trials)]
    priced = [s for s in priced if s > 0]
    return statistics.median(priced) if priced else None


def gates_relaunch_s(
    trials: list[TrialResult], objective: Objective, measured: list[float] | None = None
) -> float | None:
    """Seconds of one gates relaunch: a relaunch plus what needle and qeval took where they ran."""
    base = relaunch_s(trials, objective, measured)
    gates = [s for s in map(gates_time_s, trials) if s > 0]
    if base is None:
        return None
    return base + (statistics.median(gates) if gates else 0.0)
