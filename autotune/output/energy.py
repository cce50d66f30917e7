"""A trial's energy and GPU state as people read them: the rows `show` and the report print, and
the recipe's lines. Every GPU figure says it is GPU-only; an absent reading says "not measured".
"""

from __future__ import annotations

from autotune.models import EnergyReading, GpuState, TrialEnergy, TrialResult, WorkloadEnergy
from autotune.verdict.gpu_state import describe, study_usual_clock, trial_flags

NOT_MEASURED = "not measured (no counter)"
GPU_ONLY = ("GPU energy only, the trial's GPUs on this host: not the box's (CPU, memory, fans, power supply; "
            "on a DGX Spark's GB10 the GPU is about 30 % of the box)")
HEADERS = ["#", "workload", "GPU J", "s", "W (idle)", "J/token", "tok/J", "active J/token", "CPU J", "SM/mem MHz",
           "max C", "clock events"]


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _sig(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _clocks(states: list[GpuState]) -> str:
    parts = [f"{_fmt(s.sm_clock_mhz, 0)}/{_fmt(s.mem_clock_mhz, 0)}" for s in states]
    return ", ".join(parts) or "-"


def _events(states: list[GpuState]) -> str:
    seen = sorted({e.value for s in states for e in s.events})
    return ", ".join(seen) or "none"


NOT_AT_REST = "idle not read: the GPU was still at full clock before the launch"


def _active(energy: TrialEnergy, w: WorkloadEnergy) -> float | None:
    """Active J/token, only where the idle was read on a GPU at rest."""
    return w.active_gpu_j_per_token if energy.idle_at_rest else None


def workload_row(number: int, energy: TrialEnergy, w: WorkloadEnergy) -> list[str]:
    gpu = w.gpu
    idle = ("" if not gpu or gpu.idle_power_w is None
            else f" ({_fmt(gpu.idle_power_w, 0)})" if energy.idle_at_rest else " (not at rest)")
    temps = [s.temperature_c for s in w.gpu_state if s.temperature_c is not None]
    return [
        str(number), w.workload,
        _fmt(gpu.joules) if gpu else NOT_MEASURED,
        _fmt(gpu.seconds if gpu else None),
        f"{_fmt(gpu.mean_power_w, 0)}{idle}" if gpu else "-",
        _sig(w.gpu_j_per_token), _sig(w.tokens_per_gpu_joule), _sig(_active(energy, w)),
        _fmt(w.cpu.joules) if w.cpu else "-",
        _clocks(w.gpu_state), _fmt(max(temps), 0) if temps else "-", _events(w.gpu_state) if w.gpu_state else "-",
    ]


def rows(trials: list[TrialResult]) -> list[list[str]]:
    """One row per measured workload of every trial with GPU readings (absent ones in `absent_lines`)."""
    return [workload_row(t.number, t.energy, w) for t in trials if t.energy and (t.energy.gpu_method or t.energy.gpus)
            for w in t.energy.workloads]


def absent_line(trials: list[TrialResult]) -> str | None:
    """The one line for trials whose GPU energy was not read (None when every one was, or none has a record)."""
    absent = [t for t in trials if t.energy is not None and t.energy.gpu_method is None]
    if not absent:
        return None
    reasons = sorted({t.energy.absent or "" for t in absent if t.energy})
    cpu = any(w.cpu for t in absent if t.energy for w in t.energy.workloads)
    numbers = ", ".join(str(t.number) for t in absent)
    return (f"GPU energy {NOT_MEASURED} in trial(s) {numbers}: {'; '.join(r for r in reasons if r)}"
            + ("; CPU package energy (RAPL) was read" if cpu else "; no CPU package energy (RAPL) readable either"))


def multi_node_line(trials: list[TrialResult]) -> str | None:
    """The one line for multi-node trials: each node's part of the GPU energy where every node was
    read, else how many nodes were counted."""
    partial = [t for t in trials if t.energy and t.energy.nodes_counted < t.energy.nodes]
    if partial:
        e = partial[0].energy
        assert e is not None
        return (f"energy counts the GPUs of {e.nodes_counted} of {e.nodes} nodes (those on this host; a node on another "
                "host is not read): no J/token is reported for those trials")
    parts = [f"trial {t.number} {w.workload}: {node_parts(w.gpu)}" for t in trials if t.energy and t.energy.nodes > 1
             for w in t.energy.workloads if w.gpu and w.gpu.nodes]
    if not parts:
        return None
    return "GPU energy per node, every node read in the same pass at each window boundary: " + "; ".join(parts)


def node_parts(reading: EnergyReading) -> str:
    """A multi-node window's parts: node 0 (GPUs 0) 120.0 J, node 1 (GPUs 1) 80.0 J, reads 0.02 ms apart."""
    parts = ", ".join(f"node {p.node} (GPUs {','.join(map(str, p.devices)) or '-'}) {p.joules:.1f} J"
                      for p in reading.nodes)
    return parts + (f", reads {reading.skew_ms:.2f} ms apart at most" if reading.skew_ms is not None else "")


def state_notes(trials: list[TrialResult]) -> list[str]:
    """`trial N: <why>` for every trial measured on a slowed GPU (throttled, or clocks below the usual)."""
    usual = study_usual_clock(trials)
    out = []
    for t in trials:
        flags = trial_flags(t.energy, usual)
        if flags and t.energy is not None:
            out.append(f"trial {t.number}: {describe(flags, t.energy, usual)}")
    return out


def recipe_lines(trial: TrialResult, trials: list[TrialResult]) -> list[str]:
    """What the recipe says of the trial's energy and GPU state (empty for a trial stored before it)."""
    energy = trial.energy
    if energy is None:
        return []
    if energy.gpu_method is None:
        lines = [f"GPU energy {NOT_MEASURED}: {energy.absent or 'no NVML reading'}"]
    else:
        idle = ("" if energy.idle_gpu_power_w is None else f"; {NOT_AT_REST}" if not energy.idle_at_rest
                else f", idle {energy.idle_gpu_power_w:.0f} W before the launch")
        lines = [f"{GPU_ONLY}; GPUs {','.join(map(str, energy.gpus))}, {energy.gpu_method.value}{idle}"]
        for w in energy.workloads:
            if w.gpu is None:
                lines.append(f"{w.workload}: {NOT_MEASURED}")
                continue
            per_token = (f", {w.gpu_j_per_token:.4g} J/token ({w.tokens_per_gpu_joule:.4g} tok/J"
                         + (f", {active:.4g} J/token above idle" if (active := _active(energy, w)) is not None
                            else "") + ")" if w.gpu_j_per_token and w.tokens_per_gpu_joule else "")
            nodes = f"; {node_parts(w.gpu)}" if w.gpu.nodes else ""
            lines.append(f"{w.workload}: {w.gpu.joules:.1f} J over {w.gpu.seconds:.1f} s, mean {w.gpu.mean_power_w:.0f} W"
                         f"{per_token}{nodes}; SM/mem {_clocks(w.gpu_state)} MHz, clock events {_events(w.gpu_state)}")
    cpu = [w for w in energy.workloads if w.cpu]
    lines.append("CPU package energy (RAPL): " + ("; ".join(f"{w.workload} {w.cpu.joules:.1f} J" for w in cpu if w.cpu)
                                                   if cpu else NOT_MEASURED))
    usual = study_usual_clock(trials)
    flags = trial_flags(energy, usual)
    if flags:
        lines.append(f"GPU state: {describe(flags, energy, usual)}")
    return lines
