"""Was a launch measured at the GPU's usual speed? A launch whose GPU throttled (heat, a hardware
slowdown) or whose SM clocks sat below the host's usual by more than `CLOCK_DROP_SHARE` measured a
slowed GPU, not the config: it is flagged in show, the report and the recipe, and its objective is
left out of the launch-noise estimates (autotune/store/runs_db.py) that judge every ratio.

The host's usual is the median SM clock of the launches measured on it (the trials of a study, the
launch samples of a host and engine) that did not throttle.
"""

from __future__ import annotations

import statistics

from autotune.models import GpuStateFlag, TrialEnergy, TrialResult

#: clocks below the host's usual by more than this share flag a launch (public Spark reports: a
#: clock cap costing 15-35 %; launches that did not throttle vary by a few percent)
CLOCK_DROP_SHARE = 0.10


def usual_clock(clocks: list[float]) -> float | None:
    """The host's usual SM clock: the median of its launches' clocks (None without any)."""
    return statistics.median(clocks) if clocks else None


def flags_of(sm_clock_mhz: float | None, throttled: bool, usual: float | None,
             share: float = CLOCK_DROP_SHARE) -> list[GpuStateFlag]:
    out = [GpuStateFlag.THROTTLED] if throttled else []
    if sm_clock_mhz is not None and usual and sm_clock_mhz < (1.0 - share) * usual:
        out.append(GpuStateFlag.LOW_CLOCKS)
    return out


def study_usual_clock(trials: list[TrialResult]) -> float | None:
    """The usual SM clock over a study's launches that did not throttle."""
    return usual_clock([c for t in trials if t.energy and not t.energy.throttled
                        and (c := t.energy.sm_clock_mhz()) is not None])


def trial_flags(energy: TrialEnergy | None, usual: float | None) -> list[GpuStateFlag]:
    if energy is None:
        return []
    return flags_of(energy.sm_clock_mhz(), energy.throttled, usual)


def describe(flags: list[GpuStateFlag], energy: TrialEnergy, usual: float | None) -> str:
    """The flags in words: what was seen, and what follows from it."""
    parts = []
    if GpuStateFlag.THROTTLED in flags:
        events = sorted({e.value for s in energy.states() if s.throttled for e in s.events})
        parts.append(f"the GPU throttled ({', '.join(events)})")
    if GpuStateFlag.LOW_CLOCKS in flags and usual:
        clock = energy.sm_clock_mhz() or 0.0
        parts.append(f"SM clock {clock:.0f} MHz, {1 - clock / usual:.0%} below the host's usual {usual:.0f} MHz")
    return "; ".join(parts) + ": not the config's speed, left out of the launch-noise estimate" if parts else ""
