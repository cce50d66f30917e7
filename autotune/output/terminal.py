"""What the CLI prints after the work: a study's trials, capacity, energy, phases and the verdict;
probe results, classified logs, learned failures. Progress lives in output/progress.py, the plan
in output/plan_text.py. No measuring here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from autotune.output.schedule_lines import schedule_lines
from autotune.models import (
    FailureCause,
    FailureInfo,
    GpuHolder,
    LaunchSpec,
    LearnedFailure,
    Objective,
    ResolvedEngine,
    TrialResult,
    VerdictStatus,
)
from autotune.output.verdict import compose
from autotune.study.leases import boxes_label
from autotune.gates.score import Standing, standing, verdict
from autotune.study.outcome import StudyOutcome

if TYPE_CHECKING:
    from autotune.study.prepared import PreparedStudy
from autotune.output.cells import _fmt, _median, diff_label, fmt_objective, fmt_samples




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


#: the parts of a vLLM engine's init the start table names; the rest of the init is what is left
_INIT_STEPS = ("compile", "cuda_graphs", "kernels")


def start_table(outcome: StudyOutcome) -> Table | None:
    """Where each start went, from the engine's log (None when no trial's engine logged it): before
    its first line (process start, Python imports; the launcher's start less the log's span), the API
    server (config, tokenizer, the engine core's process), weights, torch.compile, CUDA graphs,
    FlashInfer's kernel steps (its autotune and attention warm-up: compiling where no kernel is on
    disk), the rest of the engine's init (profiling, KV cache, warm-up), serving (core ready to the
    server listening) and the rest. A part the log does not state is '-'."""
    timed = [t for t in outcome.trials if t.start_parts_s and t.phase_s.get("start") is not None]
    if not timed:
        return None
    table = Table(title="where the start went (s)", caption="from the engine's log and its lines' clock; before "
                  "log: process start and imports")
    columns = ("#", "start", "before log", "API server", "weights", "compile", "graphs", "kernels", "rest of init",
               "serving", "other")
    for column in columns:
        table.add_column(column, no_wrap=True, justify="left" if column == "#" else "right")
    for t in timed:
        p, start = t.start_parts_s, t.phase_s["start"]
        init, logged = p.get("engine_init"), p.get("logged")
        rest = init - sum(p.get(k, 0.0) for k in _INIT_STEPS) if init is not None else None
        before = start - logged if logged is not None else None
        named = sum(p.get(k, 0.0) for k in ("api_server", "weights", "engine_init", "serving"))
        other = (logged if logged is not None else start) - named if init is not None else None
        table.add_row(str(t.number), _fmt(start), _fmt(before), _fmt(p.get("api_server")), _fmt(p.get("weights")),
                      _fmt(p.get("compile")), _fmt(p.get("cuda_graphs")), _fmt(p.get("kernels")), _fmt(rest),
                      _fmt(p.get("serving")), _fmt(other))
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


def print_outcome(console: Console, plan: PreparedStudy, outcome: StudyOutcome) -> None:
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


def _holder(h: GpuHolder) -> str:
    used = "memory not reported" if h.used_gib is None else f"{h.used_gib:.1f} GiB"
    return f"pid {h.pid} ({h.command}, {used})"


def holders_note(holders: list[GpuHolder]) -> str | None:
    """One line naming who holds which GPU (autotune/bench/occupancy.py) and what to do; None where
    nobody else does. A note, not a refusal: an engine with a lower gpu_memory_utilization may still
    fit beside them."""
    if not holders:
        return None
    parts = []
    for gpu in sorted({h.gpu for h in holders}):
        own = [h for h in holders if h.gpu == gpu]
        known = [h.used_gib for h in own if h.used_gib is not None]
        total = own[0].total_gib
        of_total = "" if total is None else f" of {total:.1f}"
        amount = f"{sum(known):.1f}{of_total} GiB " if known else ""  # no figure at all: no amount made up
        parts.append(f"GPU {gpu}: {amount}held by other processes: " + ", ".join(_holder(h) for h in own))
    pids = " ".join(str(p) for p in dict.fromkeys(h.pid for h in holders))
    return ("; ".join(parts) + f"; an engine may not start beside them: stop them first (kill {pids}; an "
            "EngineCore left behind is usually the one), or lower gpu_memory_utilization")
