"""The plan in the terminal: `plan`'s table of predictions per candidate and `search --dry-run`'s
queue; nothing launched."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from autotune.hardware.profiles import describe, describe_node
from autotune.output.terminal import print_launch
from autotune.models import (
    Candidate,
    DecodeBound,
    PlanEstimate,
    PlanReport,
)

if TYPE_CHECKING:
    from autotune.study.prepared import QueuedAs, PreparedStudy


PLAN_MIN_WIDTH = 120


PLAN_TOP = 20  # candidate rows `autotune plan` shows unless --top says otherwise


_BOUND_WORDS = {
    DecodeBound.WEIGHTS: "weights",
    DecodeBound.KV_READ: "KV read",
    DecodeBound.COMMUNICATION: "TP comm",
    DecodeBound.STEP_OVERHEAD: "per-step",
    DecodeBound.COMPUTE: "compute",
    DecodeBound.STREAM_OVERHEAD: "per-stream",
}


def print_dry_run(
    console: Console, plan: PreparedStudy, rows: list[tuple[Candidate, str | None]],
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


def parallel_plan(plan: PreparedStudy) -> str:
    """How the trials share the boxes: boxes, boxes per trial, trials in flight."""
    where = "the cluster file's nodes" if plan.pool_cluster is not None else (
        "on this host" if plan.boxes > 1 else "this host")
    if plan.boxes <= plan.nodes:
        return "trials: one at a time, each on every box (more side by side: --boxes N or a cluster file, --parallel K)"
    return (f"trials: {plan.parallel} in flight at once, each leasing {plan.nodes} of {plan.boxes} boxes ({where}) "
            "through Ray; no two trials share a box")


def plan_hardware_line(report: PlanReport) -> str | None:
    """What a node of the plan is (a report read back from older JSON may not say)."""
    if report.gpus_per_node is None or report.memory_gb_per_gpu is None:
        return None
    return "hardware " + describe_node(report.hardware, report.gpus_per_node, report.memory_gb_per_gpu,
                                       report.detected_on)


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
