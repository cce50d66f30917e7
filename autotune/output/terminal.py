"""Everything the CLI prints: progress while a study runs, tables after. No measuring here."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status
from rich.table import Table
from rich.text import Text

from autotune.output.draft_schedule import schedule_lines
from autotune.hardware.profiles import describe, describe_node
from autotune.models import (
    Candidate,
    DecodeBound,
    FailureCause,
    FailureInfo,
    LaunchSpec,
    LearnedFailure,
    Objective,
    PlanEstimate,
    PlanReport,
    ResolvedEngine,
    TrialResult,
    VerdictStatus,
)
from autotune.output.verdict import compose
from autotune.study.forecast import RunForecast, eta_s, fmt_duration, gates_time_s
from autotune.study.leases import boxes_label
from autotune.study.relaunch_cost import relaunch_s
from autotune.study.relaunches import Relaunch, RelaunchKind
from autotune.gates.score import Standing, standing, verdict
from autotune.study.outcome import StudyOutcome

if TYPE_CHECKING:
    from autotune.study.plan import QueuedAs, SearchPlan


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
            line = f"  capacity at the SLO: {result.capacity.describe()}"
            if result.needle:
                line += f", {result.needle.summary()}"
            if result.qeval:
                line += f", {result.qeval.summary()}"
            failed_gates = [g.gate for g in result.gates if g.status == "fail"]
            if failed_gates:
                line += f" [red]gates failed: {', '.join(failed_gates)}[/]"
        elif result.status == "ok":
            line = (
                f"  {self.objective.short} {fmt_objective(result.objective, self.objective)} {self.objective.unit} (decode prose {_fmt(_median(result, 'decode_tps.prose'))}, "
                f"structured {_fmt(_median(result, 'decode_tps.structured'))}), "
                f"TTFT {_fmt(_median(result, 'ttft_ms.prose'), 0)} ms"
            )
            if result.needle:
                line += f", {result.needle.summary()}"
            if result.qeval:
                line += f", {result.qeval.summary()}"
            failed_gates = [g.gate for g in result.gates if g.status == "fail"]
            if failed_gates:
                line += f" [red]gates failed: {', '.join(failed_gates)}[/]"
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


QUICK_S = 15 * 60  # longer than this, the forecast says how to get a first answer sooner


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


def table_caption(objective: Objective) -> str:
    return (f"{objective.unit}: the objective, {objective.label}; pred.: the planner's prediction (decode, 1 stream); "
            "prose, struct: decode tok/s of each prompt set; prefill: cold prefill tok/s at the longest prompt")


WIDE_COLUMNS = 130  # below this the table stacks each trial's config and verdict under its numbers


def _cells(t: TrialResult, objective: Objective) -> dict[str, str]:
    prefill = [m.median for m in t.measurements if m.name.startswith("prefill_tps.")]
    return {
        objective.unit: _fmt(t.capacity.capacity, 0) if t.capacity else fmt_objective(t.objective, objective),
        "pred.": _fmt(t.predicted.get("decode_tps"), 0),
        "prose": _fmt(_median(t, "decode_tps.prose")),
        "struct": _fmt(_median(t, "decode_tps.structured")),
        "TTFT ms": _fmt(_median(t, "ttft_ms.prose"), 0),
        "prefill": _fmt(prefill[-1] if prefill else None, 0),
        "needle": ("pass" if all(c.passed for c in t.needle.cases) else "FAIL") if t.needle else "-",
        "qeval": f"{t.qeval.correct}/{t.qeval.total}" if t.qeval else "-",
    }


def _number_cell(t: TrialResult, best: TrialResult | None) -> str:
    """`2 *`, `0 (base)`; with trials side by side the boxes it ran on below (`box 1`)."""
    where = "\n" + boxes_label(t.boxes) if t.boxes else ""
    return f"{t.number}{' *' if best and t.number == best.number else ''}{' (base)' if t.number == 0 else ''}{where}"


def trials_table(outcome: StudyOutcome, width: int | None = None) -> Table:
    """The trials of a study. At `width` < WIDE_COLUMNS (80 columns, or piped) each trial is one
    stacked cell: config, then the numbers, then the verdict, so nothing is ever dropped."""
    best = outcome.best
    base = outcome.baseline.candidate if outcome.baseline else None
    launched = [t for t in outcome.trials if t.status != "skipped"]
    if width is not None and width < WIDE_COLUMNS:
        table = Table(title=f"study {outcome.name}", caption=table_caption(outcome.objective), show_lines=True)
        table.add_column("#", no_wrap=True)
        table.add_column("config / numbers / verdict", overflow="fold")
        for t in launched:
            numbers = "  ".join(f"{k} {v}" for k, v in _cells(t, outcome.objective).items())
            cell = Text()
            cell.append(diff_label(t.candidate, base), style="bold")
            cell.append("\n" + numbers)
            cell.append("\n" + verdict(t), style="green" if standing(t) is Standing.OK else "red")
            table.add_row(_number_cell(t, best), cell)
        return table
    table = Table(title=f"study {outcome.name}", caption=table_caption(outcome.objective), show_lines=False)
    # short cells never wrap: on a narrow terminal config and verdict take the squeeze
    table.add_column("#", no_wrap=True)
    table.add_column("config", overflow="fold", min_width=16)
    for col in (outcome.objective.unit, "pred.", "prose", "struct", "TTFT ms", "prefill", "needle", "qeval"):
        table.add_column(col, no_wrap=True, justify="right")
    table.add_column("verdict", overflow="fold", min_width=8)
    for t in launched:
        table.add_row(_number_cell(t, best), diff_label(t.candidate, base), *_cells(t, outcome.objective).values(),
                      verdict(t))
    return table


def capacity_table(outcome: StudyOutcome) -> Table | None:
    """capacity_at_slo: every level each trial probed, in the order probed (None for other objectives)."""
    searched = [t for t in outcome.trials if t.capacity is not None]
    slo = outcome.objective.slo
    if not searched or slo is None:
        return None
    table = Table(title=f"capacity at the SLO: {slo.describe()}, >= {slo.min_requests} requests per level",
                  caption="streams: the capacity; tok/s: output at it; P99 TTFT/ITL: the median over levels of "
                  "each level's P99 (ms); level: streams in flight, verdict, attainment [Wilson 95% interval], "
                  "output tok/s, P99 TTFT/ITL ms, judged / excluded requests and the window's seconds, in the order probed")
    for column in ("#", "streams", "tok/s", "P99 TTFT/ITL"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("stop", overflow="fold", min_width=8)
    table.add_column("levels", overflow="fold", min_width=30)  # one level a line
    for t in searched:
        report = t.capacity
        assert report is not None
        head = report.at_capacity
        levels = "\n".join(
            f"{lv.streams}: {lv.verdict.value} {lv.attainment:.0%} [{lv.interval[0]:.0%}, {lv.interval[1]:.0%}] "
            f"{lv.output_tps:.0f} tok/s {_fmt(lv.p99_ttft_ms, 0)}/{_fmt(lv.p99_itl_ms, 0)}, {lv.counts()}"
            for lv in report.levels)
        fit = f" (memory fits {report.fit_streams})" if report.fit_streams is not None else ""
        table.add_row(str(t.number), str(report.capacity), _fmt(head.output_tps if head else None),
                      f"{_fmt(report.median_p99_ttft_ms, 0)}/{_fmt(report.median_p99_itl_ms, 1)}", report.stop.value + fit,
                      levels)
    return table


def energy_table(outcome: StudyOutcome) -> Table | None:
    """Each measured workload's GPU energy and the GPUs' state (None when no trial read a GPU)."""
    from autotune.output import energy

    rows = energy.rows([t for t in outcome.trials if t.status != "skipped"])
    if not rows:
        return None
    table = Table(title="energy per workload (GPU only)", caption=f"{energy.GPU_ONLY}. W: mean GPU power (idle: "
                  "before the launch); active J/token: above idle; SM/mem MHz: median per GPU")
    for column in energy.HEADERS:
        table.add_column(column, justify="left" if column in ("#", "workload", "clock events") else "right",
                         overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def print_energy(console: Console, outcome: StudyOutcome) -> None:
    """The energy table, what was not measured, and the trials measured on a slowed GPU."""
    from autotune.output import energy

    launched = [t for t in outcome.trials if t.status != "skipped"]
    table = energy_table(outcome)
    if table is not None:
        console.print(table)
    for line in filter(None, (energy.absent_line(launched), energy.multi_node_line(launched))):
        console.print(line, markup=False, highlight=False)
    for note in energy.state_notes(launched):
        console.print(f"[yellow]slowed GPU[/] {note}", highlight=False)


def print_trials(console: Console, outcome: StudyOutcome) -> None:
    console.print(trials_table(outcome, console.width))
    searched = capacity_table(outcome)
    if searched is not None:
        console.print(searched)
    print_energy(console, outcome)
    if outcome.skipped_reasons:
        console.print("[bold]pruned before launching[/] (reason: count)")
        for reason, count in sorted(outcome.skipped_reasons.items(), key=lambda x: -x[1]):
            console.print(f"  {reason}: {count}")


def phases_table(outcome: StudyOutcome) -> Table | None:
    """Seconds per phase of each launched trial (None when no trial recorded its phases)."""
    from autotune.trial.phases import PHASES

    timed = [t for t in outcome.trials if t.status != "skipped" and t.phase_s]
    if not timed:
        return None
    used = [p for p in PHASES if any(p in t.phase_s for t in timed)]
    table = Table(title="seconds per phase", caption="start: launch to healthy; teardown: stopping the engine")
    table.add_column("#", no_wrap=True)
    for phase in [*used, "total"]:
        table.add_column(phase, no_wrap=True, justify="right")
    for t in timed:
        table.add_row(str(t.number), *(_fmt(t.phase_s.get(p)) if p in t.phase_s else "-" for p in used), _fmt(t.duration_s))
    return table


def start_table(outcome: StudyOutcome) -> Table | None:
    """Where each start went, from the engine's log (None when no trial's engine logged it):
    weights, torch.compile, CUDA graphs, the rest of the engine's init (profiling, KV cache, warm-up),
    and what lies outside the engine's init (process start, imports, the API server)."""
    timed = [t for t in outcome.trials if t.start_parts_s and t.phase_s.get("start") is not None]
    if not timed:
        return None
    table = Table(title="where the start went (s)", caption="from the engine's log; outside init: process "
                  "start, imports, API server")
    for column in ("#", "start", "weights", "compile", "graphs", "rest of init", "outside init"):
        table.add_column(column, no_wrap=True, justify="left" if column == "#" else "right")
    for t in timed:
        p, start = t.start_parts_s, t.phase_s["start"]
        init = p.get("engine_init")
        rest = init - p.get("compile", 0.0) - p.get("cuda_graphs", 0.0) if init is not None else None
        outside = start - p.get("weights", 0.0) - init if init is not None else None
        table.add_row(str(t.number), _fmt(start), _fmt(p.get("weights")), _fmt(p.get("compile")),
                      _fmt(p.get("cuda_graphs")), _fmt(rest), _fmt(outside))
    return table


def capture_sizes_cell(sizes: list[int] | None) -> str:
    """CUDA graph capture sizes for a table cell: `-` (not logged), `none` ([]), `51 (1..512)`."""
    if sizes is None:
        return "-"
    if not sizes:
        return "none"
    return f"{len(sizes)} ({sizes[0]}..{sizes[-1]})" if len(sizes) > 1 else str(sizes[0])


def resolved_table(outcome: StudyOutcome) -> Table | None:
    """What each trial's engine resolved at start, from its log (None when no trial's log stated
    any). The version goes in the title when every trial ran the same; a column no trial's log
    filled (MoE on a dense model) is left out."""
    read = [(t.number, t.resolved) for t in outcome.trials if t.resolved is not None]
    if not read:
        return None
    cells: dict[str, Callable[[ResolvedEngine], str]] = {
        "version": lambda r: r.engine_version or "-",
        "max seqs": lambda r: _count(r.max_num_seqs),
        "attention": lambda r: r.attention_backend or "-",
        "MoE": lambda r: r.moe_backend or "-",
        "compile": lambda r: r.compilation_mode or "-",
        "graph sizes": lambda r: capture_sizes_cell(r.cudagraph_capture_sizes),
        "KV tokens": lambda r: _count(r.kv_cache_tokens),
    }
    versions = {r.engine_version for _, r in read}
    title = "what the engine resolved at start"
    if len(versions) == 1:
        title += f" (version {versions.pop() or 'not logged'})"
        del cells["version"]
    shown = {name: cell for name, cell in cells.items() if name != "MoE" or any(r.moe_backend for _, r in read)}
    table = Table(title=title, caption="from the engine's log; -: not in this version's log (vLLM logs a "
                  "max_num_seqs it chose itself only at DEBUG)")
    table.add_column("#", no_wrap=True)
    for name in shown:
        table.add_column(name, no_wrap=True, justify="right" if name in ("max seqs", "KV tokens") else "left")
    for number, r in read:
        table.add_row(str(number), *(cell(r) for cell in shown.values()))
    return table


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def print_phases(console: Console, outcome: StudyOutcome) -> None:
    for table in (phases_table(outcome), start_table(outcome), resolved_table(outcome)):
        if table is not None:
            console.print(table)


def print_best(console: Console, outcome: StudyOutcome) -> None:
    best, base = outcome.best, outcome.baseline
    if best is None:
        console.print("[red]no trial ran and passed every gate with evidence: no winner[/]")
        unchecked = [t for t in outcome.trials if standing(t) is Standing.UNCHECKED]
        if unchecked:
            console.print(f"  {len(unchecked)} trial(s) ran but have unchecked gates: {verdict(unchecked[0])}")
        return
    judged = compose(outcome, best)  # the one verdict the report and the recipe carry too
    console.print(f"[bold green]best: trial {best.number}[/] {diff_label(best.candidate, base.candidate if base else None)}")
    if not outcome.accuracy:
        console.print("  [yellow]accuracy unchecked: the study runs with --no-accuracy (throughput only)[/]")
    if judged.vs_baseline is not None and base is not None:
        console.print(
            f"  {fmt_objective(best.objective, outcome.objective)} vs baseline "
            f"{fmt_objective(base.objective, outcome.objective)} {outcome.objective.unit} {outcome.objective.short}: "
            f"{judged.vs_baseline}"
        )
    elif judged.status is VerdictStatus.BASELINE:
        console.print(f"  {judged.summary}")
    if best.capacity is not None:
        console.print(f"  capacity at the SLO: {best.capacity.describe()}; median of per-level P99 TTFT "
                      f"{_fmt(best.capacity.median_p99_ttft_ms, 0)} ms, ITL {_fmt(best.capacity.median_p99_itl_ms, 1)} ms"
                      + (" (tied capacities rank by output tok/s at them)" if outcome.objective.capacity else ""))
    skipped = {t.number for t in outcome.trials if t.dominated or t.deferred}
    if judged.tied_with:
        tied = [f"{n}{' (gates skipped)' if n in skipped else ''}" for n in judged.tied_with]
        console.print(f"  tied with the best within the launch noise: trial(s) {', '.join(tied)}")
    if judged.unchecked_faster:  # e.g. the time budget ended the study before their deferred gates ran
        console.print(f"  [yellow]faster by score, gates never run (unchecked): trial(s) "
                      f"{', '.join(map(str, judged.unchecked_faster))}[/]")
    c = judged.confirmation
    if c is not None:
        console.print(
            f"  confirmation: {c.verdict}; best {fmt_samples(c.best_samples, outcome.objective)} vs "
            f"baseline {fmt_samples(c.baseline_samples, outcome.objective)} {outcome.objective.unit}"
        )
    elif judged.status is VerdictStatus.NOT_CONFIRMED:
        console.print("  [yellow]not confirmed[/]: no confirmation rounds for this trial (--confirm-rounds 2 or more)")
    for i, line in enumerate(schedule_lines(outcome.draft_schedule)):
        console.print(f"  {line}" if i == 0 else f"    {line}", highlight=False, markup=False)
    for failed in judged.accuracy_failures:
        console.print(f"  [yellow]numerics class failed accuracy[/]: {failed.describe()}", highlight=False)
    for i, t in enumerate(judged.tradeoffs):
        if i == 0:
            console.print("  [yellow]trades away[/] (worse than the baseline beyond the launch noise, one launch each):")
        console.print(f"    {t.describe()}", highlight=False)


def print_outcome(console: Console, plan: SearchPlan, outcome: StudyOutcome) -> None:
    print_trials(console, outcome)
    print_best(console, outcome)
    if outcome.exhausted:
        console.print("every candidate that survives pruning has been measured")
    if outcome.stopped:
        console.print(f"stopped early: {outcome.stopped}")
    console.print(f"results in {plan.db_path}; `autotune export --db {plan.db_path} --study {outcome.name}` writes the recipe")


def print_launch(console: Console, launch: LaunchSpec) -> None:
    """Each node's environment and argv as one shell line, under a `# node N (role)` line."""
    from autotune.output.recipe import shell_lines

    for line in shell_lines(launch):
        for part in line.splitlines():
            console.print(f"  {part}", markup=False, highlight=False)


def print_dry_run(
    console: Console, plan: SearchPlan, rows: list[tuple[Candidate, str | None]],
    first: list[tuple[Candidate, QueuedAs]], every: bool,
) -> None:
    """The launches a new study starts with (baseline, --try, the planner's), in its order, marked;
    with `every`, the other surviving candidates' launches after them."""
    from autotune.launchers.cluster import is_placeholder, placeholder_note
    from autotune.output.recipe import portable_launch

    kept = [c for c, why in rows if why is None]
    console.print(
        f"space {plan.space.name}: {plan.candidates_total} candidates, {len(kept)} survive pruning "
        f"(hardware {plan.hardware.name} x{plan.nodes}); nothing is launched"
    )
    console.print(f"hardware {describe(plan.hardware)}", markup=False, highlight=False)
    cluster = plan.ctx.cluster
    if cluster is not None and is_placeholder(cluster):
        console.print(placeholder_note(len(cluster.nodes)), markup=False, highlight=False)
    console.print(parallel_plan(plan), markup=False, highlight=False)
    pruned = {c.key(): why for c, why in rows if why}
    shown = {c.key() for c, _ in first}
    rest = [c for c in kept if c.key() not in shown]
    listed = [(c, f"({why.value}) ") for c, why in first] + ([(c, "") for c in rest] if every else [])
    for i, (candidate, mark) in enumerate(listed):
        why = pruned.get(candidate.key())
        console.print(f"[bold]#{i}[/] {mark}{candidate.label()}", markup=True, highlight=False)
        if why:
            console.print(f"  [dim]pruned: {why}[/]")
            continue
        print_launch(console, portable_launch(plan.ctx.render(candidate)))
    if rest and not every:
        console.print(f"then the sampler picks among the other {len(rest)} that survive pruning; "
                      "--all-candidates shows every launch", markup=False, highlight=False)
    dropped: dict[str, int] = {}
    for why in pruned.values():
        dropped[why] = dropped.get(why, 0) + 1
    for why, count in sorted(dropped.items(), key=lambda x: -x[1]):
        console.print(f"[dim]pruned {count}: {why}[/]")


def parallel_plan(plan: SearchPlan) -> str:
    """How the trials share the boxes: boxes, boxes per trial, trials in flight."""
    where = "the cluster file's nodes" if plan.pool_cluster is not None else (
        "on this host" if plan.boxes > 1 else "this host")
    if plan.boxes <= plan.nodes:
        return "trials: one at a time, each on every box (more side by side: --boxes N or a cluster file, --parallel K)"
    return (f"trials: {plan.parallel} in flight at once, each leasing {plan.nodes} of {plan.boxes} boxes ({where}) "
            "through Ray; no two trials share a box")


#: what a failure's cause means for a study, as `probe --classify` says it
CAUSE_TEXT = {
    FailureCause.KNOB: "knob values: a study skips every later candidate holding them",
    FailureCause.ENVIRONMENT: "the environment (host, package, driver, NCCL, image): no knob value explains it, "
                              "so a study learns none; fix it and run again",
    FailureCause.LIMITS: "memory, time or load: the knobs together, no single value",
    FailureCause.UNEXPLAINED: "nothing named: a study isolates the knob value with short launches",
}


def print_classification(console: Console, path: Path, found: FailureInfo | None) -> None:
    if found is None:
        console.print(f"{path}: the log shows no failure (no traceback, exception, ERROR line, CUDA error, "
                      "fatal signal or non-zero exit)", markup=False, highlight=False)
        return
    headline = found.message.removeprefix(f"{found.failure_class}: ")
    console.print(f"[bold]{found.failure_class}[/]: {escape(headline)}")
    console.print(f"  blames: {CAUSE_TEXT[found.cause]}")
    if found.feature:
        console.print(f"  feature: {found.feature}")
    if found.implicates:
        console.print(f"  implicates knobs: {', '.join(found.implicates)}")
    if found.fix:
        console.print(f"  fix: {found.fix}")
    for line in found.evidence:
        console.print(f"  > {line}", markup=False, highlight=False)


def print_probe(console: Console, result: Any) -> None:
    dev = result.device
    console.print(f"[bold]host[/] {dev.hostname}: {dev.cpu_model or 'cpu'} ({dev.cpu_cores} cores), "
                  f"{dev.memory_total_gb:.1f} GB RAM")
    for gpu in dev.gpus:
        console.print(
            f"  GPU {gpu.index}: {gpu.name} {gpu.compute_capability}, "
            f"{_fmt(gpu.total_memory_gb)} GB{' unified' if gpu.unified_memory else ''}"
        )
    for note in dev.notes:
        console.print(f"  [dim]{note}[/]")
    table = Table(title=f"capabilities ({result.engine} {result.engine_version or ''})".strip())
    for col in ("feature", "status", "class", "evidence"):
        table.add_column(col, overflow="fold")
    colors = {"works": "green", "fails": "red", "unsupported": "yellow", "untested": "dim"}
    for p in result.results:
        table.add_row(p.feature, f"[{colors[p.status]}]{p.status}[/]", p.signature or "", p.evidence[:200])
    console.print(table)
    if result.resumed:
        console.print(f"resumed: {result.resumed} cell(s) an earlier probe left untested were launched now")
    if result.reused:
        console.print("[dim]stored results reused (same host fingerprint); --refresh probes again[/]")
    print_untested(console, result.results)


def print_untested(console: Console, results: list[Any]) -> None:
    from autotune.probe.order import untested_summary

    untested = untested_summary(r for r in results if r.params)
    if not untested:
        return
    console.print(f"[yellow]{sum(untested.values())} launch cell(s) stayed untested[/]; `autotune probe` again launches them:")
    for why, count in sorted(untested.items(), key=lambda x: -x[1]):
        console.print(f"  {count}: {why}")


def print_learned(console: Console, learned: list[LearnedFailure]) -> None:
    """The knob values failures taught this study to skip, with the class and the trial."""
    if not learned:
        return
    console.print("[bold]learned from failures[/] (skipped from now on, on this host)")
    for failure in learned:
        console.print(f"  {failure.label()}: {failure.failure_class} in trial {failure.trial}", markup=False, highlight=False)


def print_isolations(console: Console, isolations: list[Any]) -> None:
    """What isolating unexplained failures found (autotune/failures/learning.py), and what it cost."""
    if not isolations:
        return
    launches = sum(i.launches for i in isolations)
    console.print(f"[bold]isolated failures[/] ({launches} extra launch{'es' if launches != 1 else ''} in all)")
    for isolation in isolations:
        console.print(f"  {isolation.summary()}", markup=False, highlight=False)


PLAN_MIN_WIDTH = 120


def plan_hardware_line(report: PlanReport) -> str | None:
    """What a node of the plan is (a report read back from older JSON may not say)."""
    if report.gpus_per_node is None or report.memory_gb_per_gpu is None:
        return None
    return "hardware " + describe_node(report.hardware, report.gpus_per_node, report.memory_gb_per_gpu,
                                       report.detected_on)


PLAN_TOP = 20  # candidate rows `autotune plan` shows unless --top says otherwise


def print_plan(console: Console, plan_report: PlanReport, top: int = PLAN_TOP) -> None:
    """The plan's table (the `top` fastest-predicted kept and the first `top` dropped; 0: all),
    then the best-predicted candidate's launch."""
    line = plan_hardware_line(plan_report)
    if line:
        console.print(line, markup=False, highlight=False)
    # never narrower than PLAN_MIN_WIDTH: squeezed below it (a pipe is 80 columns) rich drops the
    # candidate and note columns whole; wider lines overflow instead, as soft-wrapped text does
    width = console.width
    console.width = max(width, PLAN_MIN_WIDTH)
    try:
        console.print(render_plan_table(plan_report, top))
    finally:
        console.width = width
    if plan_report.launch is not None:
        console.print("[bold]launch of the best-predicted candidate[/] (nothing is started):")
        print_launch(console, plan_report.launch)
    if plan_report.hosts_note:
        console.print(plan_report.hosts_note, markup=False, highlight=False)
    for line in plan_report.choices.notes() if plan_report.choices else []:
        console.print(f"note: {line}", markup=False, highlight=False)


# ---------------------------------------------------------------- the plan's table


def _plan_fmt(value: float | None, digits: int = 1) -> str:
    return "?" if value is None else f"{value:,.{digits}f}"


def _common(lists: list[list[str]]) -> list[str]:
    """Items every list has, in the first list's order."""
    if not lists:
        return []
    shared = set(lists[0]).intersection(*map(set, lists[1:]))
    return [item for item in lists[0] if item in shared]


_BOUND_WORDS = {
    DecodeBound.WEIGHTS: "weights",
    DecodeBound.KV_READ: "KV read",
    DecodeBound.COMMUNICATION: "TP comm",
    DecodeBound.STEP_OVERHEAD: "per-step",
    DecodeBound.COMPUTE: "compute",
    DecodeBound.STREAM_OVERHEAD: "per-stream",
}


def _wave_levels(report: PlanReport) -> list[int]:
    """The concurrency levels any kept candidate has a wave prediction for (none: no cN columns)."""
    return sorted({n for est in report.kept if est.streams for n in est.streams.waves})


def _plan_wave(est: PlanEstimate, level: int) -> str:
    """`4,692`, or `1,050 (B=4)` when the engine or the KV pool decodes fewer than `level` at once."""
    wave = est.streams.waves.get(level) if est.streams else None
    if wave is None:
        return "?"
    return _plan_fmt(wave.output_tps, 0) + (f" (B={wave.batch})" if wave.batch < level else "")


def plan_bound(est: PlanEstimate) -> str:
    """`weights 64%`: the decode step's largest term and its share of the step ("-" when unknown)."""
    if est.decode_bound is None:
        return "-"
    step = sum(v for k, v in est.decode_terms_ms.items() if k is not DecodeBound.COMPUTE)
    share = est.decode_terms_ms[est.decode_bound] / step if step else 0.0
    return f"{_BOUND_WORDS[est.decode_bound]} {share:.0%}"


def _shown_line(report: PlanReport, top: int) -> str | None:
    """What a table cut to `top` rows of each kind leaves out, and how to see it (None: nothing)."""
    kept, dropped = len(report.kept), len(report.dropped)
    if not top or (kept <= top and dropped <= top):
        return None
    parts = [f"the {min(top, kept)} fastest-predicted of {kept} kept"]
    if dropped:
        parts.append(f"{min(top, dropped)} of {dropped} dropped")
    return f"shown: {' and '.join(parts)}; --top N shows N of each, --top 0 every candidate, --json all of them"


def render_plan_table(report: PlanReport, top: int = 0) -> Table:
    """Kept candidates (fastest first), then dropped ones with their reasons; with `top`, only the
    first `top` of each. Settings and unknown terms shared by every candidate (shown or not) go to
    the caption; rows show what differs."""
    shared = _common([est.label.split(" ") for est in report.kept + report.dropped])
    rows = (report.kept[:top] + report.dropped[:top]) if top else report.kept + report.dropped
    tokens = [est.label.split(" ") for est in rows]
    shared_unknown = _common([est.unknown for est in report.kept])
    # a note every row shown shares (MoE verify cost on every drafting row of the flagship plan) is
    # said once under the table, not in each row
    shown_kept = [est for est in rows if est.fits]
    shown_unknown = [u for u in _common([est.unknown for est in shown_kept]) if u not in shared_unknown]
    said_once = set(shared_unknown) | set(shown_unknown)
    caption = [
        "memory in GB per GPU (= per node on one-GPU boxes); decode and prefill in tok/s, decode = one stream; ? = unknown",
        "usable: what the KV pool is carved from (vLLM: gpu_memory_utilization x GPU memory, pool = usable - "
        "weights - overhead; else the memory less the OS reserve)",
        "bound: the largest term of the decode step and its share (weights, KV read, TP comm, per-step: the fixed time a step takes; "
        "compute: FLOPs at peak, an upper-bound warning)",
    ]
    levels = _wave_levels(report)
    if levels:
        caption.append("cN: predicted output tok/s of a wave of N streams (B=b: the engine's max_num_seqs or the KV "
                       "pool decodes only b at once, the rest queue)")
    if shared:
        caption.append("every candidate: " + " ".join(shared))
    if shared_unknown:
        caption.append("unknown for every candidate: " + "; ".join(shared_unknown))
    if shown_unknown and len(shown_kept) > 1:
        caption.append("unknown for every row shown: " + "; ".join(shown_unknown))
    elif shown_unknown:
        said_once -= set(shown_unknown)
    shown = _shown_line(report, top)
    if shown:
        caption.append(shown)
    table = Table(
        title=f"plan: {report.space} on {report.nodes} x {report.hardware} "
        f"({len(report.kept)} kept, {len(report.dropped)} dropped)",
        caption="\n".join(caption),
        caption_justify="left",
    )
    cells: list[tuple[list[str], str | None]] = []
    for est, words in zip(rows, tokens):
        label = " ".join(w for w in words if w not in shared) or "(shared settings only)"
        layout = f"{est.tp}x{est.pp}" if est.tp else "-"
        usable = est.engine_budget_gb if est.engine_budget_gb is not None else est.usable_gb
        memory = [_plan_fmt(v) for v in (est.weights_gb, est.kv_gb, est.overhead_gb, est.total_gb, usable)]
        if est.fits:
            notes = [u for u in est.unknown if u not in said_once]
            if est.kv_pool_tokens is not None:
                notes.insert(0, f"KV pool {est.kv_pool_tokens:,} tokens")
            cells.append(([label, layout, *memory, _plan_fmt(est.decode_tps), plan_bound(est),
                           *(_plan_wave(est, n) for n in levels), _plan_fmt(est.prefill_tps, 0), "; ".join(notes)], None))
        else:
            cells.append(([label, layout, *memory, "-", "-", *("-" for _ in levels), "-", f"dropped: {est.reason}"], "dim"))
    with_notes = any(row[-1] for row, _ in cells)  # a note column only where a row has a note of its own
    # numbers never wrap: on a narrow terminal the candidate and note columns take the squeeze
    table.add_column("candidate", overflow="fold", min_width=24 if not with_notes else 16)
    for name in ("TPxPP", "weights", "KV", "overhead", "total", "usable", "decode", "bound",
                 *(f"c{n}" for n in levels), "prefill"):
        table.add_column(name, justify="right", no_wrap=True)
    if with_notes:
        table.add_column("note", overflow="fold", min_width=12)
    for row, style in cells:
        table.add_row(*(row if with_notes else row[:-1]), style=style)
    return table
