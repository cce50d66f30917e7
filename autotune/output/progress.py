"""Progress while a study runs: the forecast before the first launch, the live status line, the ETA
after each trial and each relaunch (RichReporter)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.status import Status
from rich.text import Text

from autotune.models import (
    Candidate,
    Objective,
    TrialResult,
)
from autotune.study.forecast import RunForecast, eta_s, fmt_duration, gates_time_s
from autotune.study.relaunch_cost import relaunch_s
from autotune.study.relaunches import Relaunch, RelaunchKind
from autotune.gates.score import verdict

if TYPE_CHECKING:
    pass
from autotune.output.cells import _fmt, _median, fmt_objective


QUICK_S = 15 * 60  # longer than this, the forecast says how to get a first answer sooner

def last_log_line(log_dir: Path | None) -> str | None:
    """The last non-empty line of the newest engine log in `log_dir` (read from its tail only)."""
    if log_dir is None or not log_dir.is_dir():
        return None
    logs = sorted(log_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)
    if not logs:
        return None
    with logs[-1].open("rb") as f:
        f.seek(max(0, logs[-1].stat().st_size - 4096))
        lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:160] if lines else None


def _gates_said(result: TrialResult) -> str:
    """A finished trial's needle and qeval, and the gates it failed, as the end of its line."""
    said = "".join(f", {gate.summary()}" for gate in (result.needle, result.qeval) if gate)
    failed = [g.gate for g in result.gates if g.status == "fail"]
    return said + (f" [red]gates failed: {', '.join(failed)}[/]" if failed else "")


class ProgressLine:
    """The live status line; rich re-renders it several times a second, so its clocks keep moving."""

    def __init__(self, label: str, log_dir: Path | None, eta: Callable[[float], float | None], clock=time.monotonic):
        self.label = label
        self.log_dir = log_dir
        self.eta = eta
        self.clock = clock
        self.started = clock()
        self.phase = "starting"
        self.phase_started = self.started

    def update(self, text: str) -> None:
        # counts inside a phase ("decode (prose): 3/9 requests done") keep the phase clock running
        if text.split(":")[0] != self.phase.split(":")[0]:
            self.phase_started = self.clock()
        self.phase = text

    def text(self) -> str:
        now = self.clock()
        parts = [f"{self.label}: {self.phase} ({now - self.phase_started:.0f} s)", f"trial {now - self.started:.0f} s"]
        eta = self.eta(now - self.started)
        if eta is not None:
            parts.append(f"ETA {fmt_duration(eta)}" if eta > 0 else "ETA: running past the typical trial time")
        line = ", ".join(parts)
        if self.phase.startswith("starting"):
            last = last_log_line(self.log_dir)
            if last:
                line += f"\n  log: {last}"
        return line

    def __rich__(self) -> Text:
        return Text(self.text())


class RichReporter:
    """Progress of a running study: what will run and how long; trial n of N, its phase with a
    moving clock, the engine log while it starts, requests done; the ETA; last result and best."""

    def __init__(self, console: Console, log_dir: Path | None = None, objective: Objective | None = None) -> None:
        self.console = console
        self.log_dir = log_dir
        self.objective = objective or Objective()
        self.status: Status | None = None
        self.line: ProgressLine | None = None
        self.t0 = time.monotonic()
        self.label = ""
        self.durations: list[float] = []  # launched trials of this run whose engine served, without their gates
        self.finished: list[TrialResult] = []  # their results: what a relaunch repeats is priced from them
        self.estimate_s: float | None = None  # the forecast's, until a trial of this run finishes
        self.total = 0
        self.launched = 0
        self.confirm_launches = 0
        self.relaunches = 0  # gates relaunches still to come (gates at the end)
        self.noise_launches = 0  # the baseline's noise relaunches still to come
        self.gates_s = 0.0  # what the gates add to a launch: the forecast's, then the median of those run
        self.gated_left = 0  # trials still to run their gates in their own launch (the forecast's count)
        self.gate_runs: list[float] = []  # seconds the gates took where they ran in this run
        self.relaunch_s: float | None = None  # one objective-only relaunch, where the forecast priced it
        self.confirming = False
        self.launch_started = self.t0
        self.parallel = 1  # trials in flight at once: the trials left take ceil(left / parallel) trial times
        self.planned_s: float | None = None  # the forecast's whole run
        self.revised = False  # the whole run re-estimated once, after the first trial measured here

    def study_planned(self, plan: RunForecast) -> None:
        self.total = plan.measured + plan.trials
        self.launched = plan.measured
        self.confirm_launches = 2 * plan.confirm_rounds
        self.relaunches, self.gates_s = plan.relaunches, plan.gates_s or 0.0
        self.gated_left = max(0, plan.gated - plan.relaunches)
        self.noise_launches = plan.noise_relaunches
        self.estimate_s = plan.trial_s
        self.relaunch_s = plan.relaunch_s
        self.parallel = plan.parallel
        self.planned_s = plan.wall_s
        self.revised = plan.measured > 0  # a resume's plan is priced from this study's own trials already
        self.console.print(forecast_text(plan))

    def _typical(self) -> list[float]:
        return self.durations or ([self.estimate_s] if self.estimate_s else [])

    def _eta_for(self, trials_left: int, current_s: float = 0.0) -> float | None:
        """Launches left at the median trial time (objective-only relaunches at their own price where
        it is known), plus the gates of the gates relaunch to come."""
        typical = self._typical()
        objective_only = self.confirm_launches + self.noise_launches
        each = relaunch_s(self.finished, self.objective) or self.relaunch_s
        priced = each is not None and bool(typical) and each < statistics.median(typical)
        waves = -(-trials_left // self.parallel)  # the trials left, `parallel` at a time
        eta = eta_s(typical, waves, self.relaunches + (0 if priced else objective_only), current_s)
        if eta is None:
            return None
        gated = self.relaunches + min(self.gated_left, trials_left)
        return eta + gated * self._gates_each() + (objective_only * (each or 0.0) if priced else 0.0)

    def _gates_each(self) -> float:
        """What the gates add to a launch: the median where they ran in this run, else the forecast's."""
        return statistics.median(self.gate_runs) if self.gate_runs else self.gates_s

    def _eta(self, current_s: float) -> float | None:
        if self.confirming:
            return self._eta_for(1, time.monotonic() - self.launch_started)
        return self._eta_for(self.total - self.launched + 1, current_s)

    def _start_status(self, label: str) -> None:
        self._stop_status()
        self.line = ProgressLine(label, self.log_dir, self._eta)
        self.status = self.console.status(self.line, refresh_per_second=4)
        self.status.start()

    def _stop_status(self) -> None:
        if self.status:
            self.status.stop()
        self.status, self.line = None, None

    def trial_started(self, number: int, launched: int, total: int, candidate: Candidate) -> None:
        self.label = f"trial {launched} of {total} (#{number})"
        self.launched, self.total = launched, total
        self.console.print(f"[bold]{self.label}[/] {candidate.label()}")
        self._start_status(self.label)

    def trial_event(self, text: str) -> None:
        if self.line is None:  # an objective-only relaunch reports through events only
            self.confirming = True
            self._start_status("confirmation")
        assert self.line is not None
        self.line.update(text)

    def trial_finished(self, result: TrialResult, best: TrialResult | None) -> None:
        self._stop_status()
        if result.duration_s > 1.0 and not result.accuracy_relaunched:  # a relaunch is not another trial
            gates = gates_time_s(result)
            if gates > 0:  # priced apart: most launches skip or defer them
                self.gate_runs.append(gates)
                self.gated_left = max(0, self.gated_left - 1)
            if result.served:  # a start that died in seconds is not what the next launch takes
                self.durations.append(result.duration_s - gates)
            self.finished.append(result)
        if result.status == "ok" and result.capacity is not None:
            line = f"  capacity at the SLO: {result.capacity.describe()}" + _gates_said(result)
        elif result.status == "ok":
            line = (
                f"  {self.objective.short} {fmt_objective(result.objective, self.objective)} {self.objective.unit} (decode prose {_fmt(_median(result, 'decode_tps.prose'))}, "
                f"structured {_fmt(_median(result, 'decode_tps.structured'))}), "
                f"TTFT {_fmt(_median(result, 'ttft_ms.prose'), 0)} ms"
            ) + _gates_said(result)
            unchecked_gates = [g.gate for g in result.gates if g.status == "unchecked"]
            if unchecked_gates and result.dominated:
                line += f"; [dim]{', '.join(unchecked_gates)} skipped, dominated: {result.dominated}[/]"
            elif unchecked_gates and result.deferred:
                line += f"; [dim]{', '.join(unchecked_gates)} deferred: {result.deferred}[/]"
            elif unchecked_gates:
                line += f" [yellow]unchecked: {', '.join(unchecked_gates)}[/]"
        else:
            line = f"  [red]{verdict(result)}[/]"
        gates_relaunch = result.phase_s.get("gates relaunch") if result.accuracy_relaunched else None
        took = f"gates relaunch {gates_relaunch:.0f} s" if gates_relaunch is not None else f"{result.duration_s:.0f} s"
        line += f" [dim]({took})[/]"
        self.console.print(line)
        if best is not None:
            self.console.print(f"  best so far: trial {best.number}, {fmt_objective(best.objective, self.objective)} {self.objective.unit} {self.objective.short} "
                               f"({best.candidate.label()})")
        left = self.total - self.launched
        eta = self._eta_for(left)
        if eta is not None and self.durations:
            gated = min(self.gated_left, left)
            relaunch = f" + gates in {gated} of them ({fmt_duration(self._gates_each())} each)" if gated else ""
            relaunch += f" + {self.relaunches} gates relaunch" if self.relaunches else ""
            relaunch += f" + {self.noise_launches} noise relaunch" if self.noise_launches else ""
            self.console.print(
                f"  [dim]{self.launched} of {self.total} trials done, {fmt_duration(time.monotonic() - self.t0)} "
                f"elapsed; ETA {fmt_duration(eta)} (median trial without gates "
                f"{fmt_duration(statistics.median(self.durations))} x {left} left"
                f"{f', {self.parallel} at a time' if self.parallel > 1 else ''}{relaunch} + "
                f"{self.confirm_launches} confirmation launches)[/]"
            )
            if len(self.durations) == 1 and not self.revised:  # the first launch measured on this host
                self.revised = True
                whole = time.monotonic() - self.t0 + eta
                self.console.print(f"  revised estimate for the whole run: ~{fmt_duration(whole)} (the plan's "
                                   f"~{fmt_duration(self.planned_s)}), from this host's first measured trial")

    def trial_skipped(self, result: TrialResult) -> None:
        self.console.print(f"[dim]skipped #{result.number}: {result.reason}[/]")

    def learned(self, text: str) -> None:
        self.console.print(f"  [yellow]{text}[/]", highlight=False)

    def in_flight(self, text: str) -> None:
        self.console.print(f"  [dim]{text}[/]", highlight=False)

    def relaunch_started(self, relaunch: Relaunch) -> None:
        if relaunch.kind.objective_only:  # one launch of the ETA's objective-only relaunches
            if relaunch.kind is RelaunchKind.CONFIRMATION:
                self.confirm_launches = max(0, self.confirm_launches - 1)
            else:
                self.noise_launches = max(0, self.noise_launches - 1)
            self.launch_started = time.monotonic()
            self.trial_event(relaunch.text)
            return
        if relaunch.kind is RelaunchKind.GATES:
            self.relaunches = max(0, self.relaunches - 1)
        self.console.print(f"[bold]{relaunch.text}[/]")
        self._start_status(relaunch.label)

    def close(self) -> None:
        self._stop_status()


def forecast_text(plan: RunForecast) -> str:
    resumed = f", {plan.measured} already measured" if plan.measured else ""
    confirm = (
        f" + {plan.confirm_rounds} confirmation rounds ({2 * plan.confirm_rounds} launches, decode only)"
        if plan.confirm_rounds
        else ""
    )
    sooner = (
        "; a first answer sooner: --trials 3 --confirm-rounds 0 --no-accuracy, or --time-budget MIN"
        if plan.total_s is not None and plan.total_s > QUICK_S
        else ""
    )
    relaunch = f" + {plan.relaunches} gates relaunch of the final best" if plan.relaunches else ""
    if plan.noise_relaunches:
        relaunch += f" + {plan.noise_relaunches} noise relaunch(es) of the baseline (decode only)"
    gates = (
        f"; needle and qeval in {plan.gated} of them (+{fmt_duration(plan.gates_s)} each)"
        if plan.gated and plan.gates_s is not None
        else ""
    )
    return (
        f"[bold]plan[/] study {plan.study}: {plan.candidates_total} candidates, {plan.candidates_left} left to try "
        f"after pruning{resumed}; this run: {plan.trials} trials{relaunch}{confirm}\n"
        f"  estimate: ~{fmt_duration(plan.total_s)} ({fmt_duration(plan.trial_s)} per launch without gates: "
        f"{plan.basis}{gates}){sooner}"
        + (f"\n  {plan.parallel} trials in flight: ~{fmt_duration(plan.wall_s)} of wall time (trials in waves of "
           f"{plan.parallel}, each priced as alone; the rest one at a time)" if plan.parallel > 1 else "")
        + (f"\n  hardware {plan.hardware}" if plan.hardware else "")
        + (f"\n  retrying {plan.retried} candidate(s), the baseline first: the last run ended with "
           f"{plan.retried_because}" if plan.retried else "")
    )
