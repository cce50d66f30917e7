"""`autotune report`: one self-contained HTML file for a study, read from runs.db.

Sections: the verdict, Pareto fronts (decode vs accuracy, decode vs TTFT), throughput per knob
value, every trial (its boxes, config diff, status, time breakdown), the boxes each trial ran on
and the trials in flight over time, the candidates pruned before launching,
the host's probe matrix, the planner's predicted vs measured decode, and the recipe. Plots are
plotly figures; plotly.js is inlined once, so the file opens with no network.
"""

from __future__ import annotations

import html
import json
import statistics
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from autotune.output.schedule_lines import schedule_lines
from autotune.errors import ConfigError
from autotune.models import Objective, ProbeResult, SearchSpace, Slo, TrialResult, VerdictStatus
from autotune.output.cells import diff_label, fmt_objective, fmt_samples
from autotune.gates.score import verdict
from autotune.output.verdict import compose
from autotune.output.box_timeline import box_figure, box_row, in_flight, spans
from autotune.store import Store
from autotune.study.leases import boxes_label
from autotune.study.outcome import StudyOutcome, outcome_of

PLOT_CONFIG = {"displaylogo": False, "responsive": True}
COLORS = {"ok": "#2a7ab0", "best": "#d62728", "baseline": "#7f7f7f", "rejected": "#ff9f1c", "failed": "#999999"}


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _median(trial: TrialResult, name: str) -> float | None:
    m = trial.measurement(name)
    return m.median if m else None


def accuracy_of(trial: TrialResult) -> float | None:
    """Fraction right: qeval when it ran, else the needle cases passed."""
    if trial.qeval and trial.qeval.total:
        return trial.qeval.correct / trial.qeval.total
    if trial.needle and trial.needle.cases:
        return sum(c.passed for c in trial.needle.cases) / len(trial.needle.cases)
    return None


def pareto(points: list[tuple[float, float, int]], higher_y_better: bool) -> list[tuple[float, float, int]]:
    """Points no other point beats on both axes (x: higher is better), sorted by x."""
    def better_or_equal(a: tuple[float, float, int], b: tuple[float, float, int]) -> bool:
        y_ok = a[1] >= b[1] if higher_y_better else a[1] <= b[1]
        return a[0] >= b[0] and y_ok and (a[0], a[1]) != (b[0], b[1])

    front = [p for p in points if not any(better_or_equal(q, p) for q in points)]
    return sorted(front)


def _role(trial: TrialResult, best: TrialResult | None) -> str:
    if best is not None and trial.number == best.number:
        return "best"
    if trial.number == 0:
        return "baseline"
    return "ok" if trial.feasible else "rejected"


# ------------------------------------------------------------------ figures


def _figure_html(fig: go.Figure, div_id: str, height: int = 420) -> str:
    fig.update_layout(height=height, margin=dict(l=60, r=20, t=50, b=50), template="plotly_white")
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG)


def pareto_figure(ran: list[TrialResult], best: TrialResult | None, objective: Objective | None = None) -> go.Figure:
    objective = objective or Objective()
    short = objective.short
    with_acc = [t for t in ran if accuracy_of(t) is not None]
    with_ttft = [t for t in ran if _median(t, "ttft_ms.prose") is not None]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            f"{objective.unit} {short} vs accuracy (higher, higher)" if with_acc else "no accuracy measured (--no-accuracy)",
            f"{objective.unit} {short} vs TTFT (higher, lower)",
        ),
    )
    for col, trials, y_of, higher in (
        (1, with_acc, accuracy_of, True),
        (2, with_ttft, lambda t: _median(t, "ttft_ms.prose"), False),
    ):
        for role in ("ok", "rejected", "baseline", "best"):
            group = [t for t in trials if _role(t, best) == role]
            if not group:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[t.objective for t in group],
                    y=[y_of(t) for t in group],
                    mode="markers",
                    marker=dict(size=11, color=COLORS[role], symbol="diamond" if role == "best" else "circle"),
                    name=role,
                    legendgroup=role,
                    showlegend=col == 1 or not with_acc,
                    text=[f"#{t.number} {t.candidate.label()}" for t in group],
                    hovertemplate="%{text}<br>%{x:.1f} tok/s, %{y}<extra></extra>",
                ),
                row=1,
                col=col,
            )
        front = pareto([(t.objective or 0.0, y_of(t) or 0.0, t.number) for t in trials if t.feasible], higher)
        if front:
            fig.add_trace(
                go.Scatter(
                    x=[p[0] for p in front],
                    y=[p[1] for p in front],
                    mode="lines",
                    line=dict(color="#444", dash="dot"),
                    name="Pareto front (gates passed)",
                    legendgroup="front",
                    showlegend=col == 1,
                    hoverinfo="skip",
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text=f"{objective.label} (objective)")
    fig.update_yaxes(title_text="accuracy (qeval, else needle)", tickformat=".0%", range=[-0.03, 1.05], row=1, col=1)
    fig.update_yaxes(title_text="TTFT ms (prose, median)", row=1, col=2)
    return fig


def knob_figure(ran: list[TrialResult], space: SearchSpace) -> go.Figure | None:
    """Objective per value of each knob that took more than one value among the trials that ran."""
    knobs = []
    for knob in space.knobs:
        values = {str(t.candidate.params.get(knob.name, t.candidate.env.get(knob.name))) for t in ran}
        if len(values) > 1:
            knobs.append(knob.name)
    if not knobs:
        return None
    cols = min(4, len(knobs))
    rows = (len(knobs) + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=knobs, shared_yaxes=True)
    for i, name in enumerate(knobs):
        xs = [str(t.candidate.params.get(name, t.candidate.env.get(name))) for t in ran]
        fig.add_trace(
            go.Box(
                x=xs,
                y=[t.objective for t in ran],
                boxpoints="all",
                jitter=0.3,
                pointpos=0,
                marker=dict(color=COLORS["ok"], size=7),
                line=dict(color="#9ab"),
                name=name,
                showlegend=False,
                text=[f"#{t.number}" for t in ran],
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
        fig.update_xaxes(type="category", row=i // cols + 1, col=i % cols + 1)
    fig.update_yaxes(title_text=f"{space.objective.unit} {space.objective.short}", col=1)
    return fig


def capacity_figure(launched: list[TrialResult], best: TrialResult | None, slo: Slo) -> go.Figure:
    """capacity_at_slo: attainment against streams in flight, one line per trial (levels in streams
    order, each with its Wilson 95% interval), the target as a dashed line."""
    fig = go.Figure()
    for t in launched:
        if t.capacity is None:
            continue
        levels = sorted(t.capacity.levels, key=lambda lv: lv.streams)
        role = _role(t, best) if t.status == "ok" else "failed"
        fig.add_trace(go.Scatter(
            x=[lv.streams for lv in levels], y=[lv.attainment for lv in levels], mode="lines+markers",
            name=f"#{t.number} ({t.capacity.capacity} streams)",
            marker=dict(size=9 if role == "best" else 7, symbol=["circle" if lv.verdict.value == "pass" else
                        "x" if lv.verdict.value == "fail" else "diamond-open" for lv in levels]),
            line=dict(width=3 if role == "best" else 1.5, color=COLORS["best"] if role == "best" else None),
            error_y=dict(type="data", symmetric=False, array=[lv.interval[1] - lv.attainment for lv in levels],
                         arrayminus=[lv.attainment - lv.interval[0] for lv in levels], thickness=1),
            text=[f"{lv.verdict.value}, {lv.output_tps:.1f} tok/s, P99 TTFT {_fmt(lv.p99_ttft_ms, 0)} ms, "
                  f"P99 ITL {_fmt(lv.p99_itl_ms, 1)} ms, {lv.counts()}" for lv in levels],
            hovertemplate="%{x} streams: attainment %{y:.1%}<br>%{text}<extra>" + f"#{t.number}</extra>",
        ))
    fig.add_hline(y=slo.attainment, line_dash="dash", line_color=COLORS["baseline"],
                  annotation_text=f"SLO: {slo.describe()}", annotation_position="bottom left")
    fig.update_xaxes(title_text="concurrent streams (log scale)", type="log")
    fig.update_yaxes(title_text="attainment (share of good requests)", range=[0, 1.05], tickformat=".0%")
    fig.update_layout(title="Attainment against concurrency (circle pass, x fail, diamond unresolved; bars: Wilson 95%)")
    return fig


def time_figure(launched: list[TrialResult]) -> go.Figure:
    labels = [f"#{t.number}" for t in launched]
    startup = [(_median(t, "startup_s") or 0.0) if t.status == "ok" else 0.0 for t in launched]
    rest = [max(0.0, t.duration_s - s) for t, s in zip(launched, startup)]
    fig = go.Figure(
        [
            go.Bar(x=labels, y=startup, name="engine start to healthy", marker_color="#9467bd"),
            go.Bar(x=labels, y=rest, name="measuring + accuracy (or the failed start)", marker_color="#2a7ab0"),
        ]
    )
    fig.update_layout(barmode="stack", title="wall time per trial", yaxis_title="seconds", xaxis_type="category")
    return fig


def predicted_figure(ran: list[TrialResult]) -> go.Figure | None:
    pairs = [
        (t.predicted["decode_tps"], measured, t.number)
        for t in ran
        if t.predicted.get("decode_tps") and (measured := t.single_stream_decode_tps())
    ]
    if not pairs:
        return None
    top = max(max(p[0], p[1]) for p in pairs) * 1.1
    fig = go.Figure(
        [
            go.Scatter(
                x=[p[0] for p in pairs],
                y=[p[1] for p in pairs],
                mode="markers",
                marker=dict(size=11, color=COLORS["ok"]),
                text=[f"#{p[2]}" for p in pairs],
                name="trial",
                hovertemplate="%{text}: predicted %{x:.1f}, measured %{y:.1f} tok/s<extra></extra>",
            ),
            go.Scatter(x=[0, top], y=[0, top], mode="lines", line=dict(color="#999", dash="dash"), name="measured = predicted"),
        ]
    )
    fig.update_layout(
        title="planner: predicted vs measured decode tok/s",
        xaxis_title="predicted decode tok/s (roofline x fitted efficiency)",
        yaxis_title="measured decode tok/s (1 stream, geomean of prompt sets)",
    )
    return fig


# ------------------------------------------------------------------ sections


def _table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def verdict_section(outcome: StudyOutcome) -> str:
    best, base = outcome.best, outcome.baseline
    if best is None:
        return '<p class="bad">No trial ran and passed its gates: no winner.</p>'
    judged = compose(outcome, best)  # the one verdict the terminal and the recipe carry too
    lines = [
        f"<p><b>best: trial {best.number}</b> <code>{_e(diff_label(best.candidate, base.candidate if base else None))}</code>"
        f" &mdash; {fmt_objective(best.objective, outcome.objective)} {_e(outcome.objective.unit)} {_e(outcome.objective.short)}</p>"
    ]
    if best.capacity is not None:
        lines.append(f"<p>capacity at the SLO: {_e(best.capacity.describe())}; median of per-level P99 TTFT "
                     f"{_fmt(best.capacity.median_p99_ttft_ms, 0)} ms, ITL {_fmt(best.capacity.median_p99_itl_ms, 1)} ms "
                     "(capacities closer than the bisection step are tied, ranked by output tok/s at them)</p>")
    if judged.vs_baseline is not None and base is not None:
        lines.append(
            f"<p>vs baseline (trial {base.number}, engine defaults) {fmt_objective(base.objective, outcome.objective)} "
            f"{_e(outcome.objective.unit)}: <b>{_e(judged.vs_baseline)}</b></p>"
        )
    elif judged.status is VerdictStatus.BASELINE:
        lines.append("<p>The baseline (engine defaults) is the best config measured.</p>")
    c = judged.confirmation
    if c is not None:
        cls = "good" if c.winner else "bad"
        lines.append(
            f'<p class="{cls}">confirmation ({c.rounds} interleaved rounds, baseline and best relaunched '
            f"alternately): {_e(c.verdict)}<br>best {fmt_samples(c.best_samples, outcome.objective)} vs baseline "
            f"{fmt_samples(c.baseline_samples, outcome.objective)} {_e(outcome.objective.unit)}; ratio x{c.ratio:.2f}, noise &plusmn;{c.noise:.1%}</p>"
        )
    elif judged.status is VerdictStatus.BASELINE:
        lines.append("<p>Nothing to confirm: no config beat the baseline.</p>")
    schedule = schedule_lines(outcome.draft_schedule)
    if schedule:
        items = "".join(f"<li>{_e(line)}</li>" for line in schedule[1:])
        lines.append(f'<p class="draft-schedule">{_e(schedule[0])}</p>' + (f"<ul>{items}</ul>" if items else ""))
    if judged.accuracy_failures:
        items = "".join(f"<li>{_e(f.describe())}</li>" for f in judged.accuracy_failures)
        lines.append(f'<p class="bad">Numerics classes that failed accuracy (never the best, not launched '
                     f"again):</p><ul>{items}</ul>")
    warnings = judged.warnings()
    if warnings:
        items = "".join(f"<li>{_e(w)}</li>" for w in warnings)
        lines.append(f'<p class="bad">Warnings (the terminal and the recipe carry them too):</p><ul class="warnings">{items}</ul>')
    gates = "; ".join(f"{g.gate}: {g.status if g.passed else g.status.upper()} ({g.detail})" for g in best.gates)
    if not outcome.accuracy:
        gates = "accuracy unchecked (--no-accuracy)" + (f"; {gates}" if gates else "")
    lines.append(f"<p>gates of the best: {_e(gates or 'none configured or checked')}</p>")
    if outcome.stopped:
        lines.append(f"<p>stopped early: {_e(outcome.stopped)}</p>")
    return "\n".join(lines)


def trials_section(outcome: StudyOutcome) -> str:
    base = outcome.baseline.candidate if outcome.baseline else None
    best = outcome.best
    rows = []
    for t in outcome.trials:
        if t.status == "skipped":
            continue
        startup = _median(t, "startup_s")
        status = t.status if t.status != "failed" else f"failed ({t.failure.failure_class if t.failure else '?'})"
        rows.append(
            [
                f"{t.number}{' &#9733;' if best and best.number == t.number else ''}",
                _e(boxes_label(t.boxes) if t.boxes else "-"),
                f"<code>{_e(diff_label(t.candidate, base))}</code>",
                _e(status),
                fmt_objective(t.objective, outcome.objective),
                _fmt(t.predicted.get("decode_tps"), 0),
                _fmt(_median(t, "ttft_ms.prose"), 0),
                _e("pass" if t.needle and all(c.passed for c in t.needle.cases) else ("FAIL" if t.needle else "-")),
                _e(f"{t.qeval.correct}/{t.qeval.total}" if t.qeval else "-"),
                _fmt(startup),
                _fmt(t.duration_s - (startup or 0.0) if t.status == "ok" else None, 0),
                _fmt(t.duration_s, 0),
                _e(verdict(t)),
            ]
        )
    return _table(
        ["#", "boxes", "config (vs baseline)", "status", outcome.objective.unit, "pred.", "TTFT ms", "needle", "qeval", "start s",
         "measure s", "total s", "verdict"],
        rows,
        "trials",
    )


def boxes_section(outcome: StudyOutcome) -> str:
    """Which box(es) each trial ran on, and how many trials were in flight over time."""
    launched = [t for t in outcome.trials if t.status != "skipped"]
    bars = spans(launched)
    if not bars:
        return "<p>No trial recorded its wall time yet.</p>"
    most = max(n for _, n in in_flight(launched))
    per_box: dict[int | None, int] = {}
    for span in bars:
        per_box[span.box] = per_box.get(span.box, 0) + 1
    counts = ", ".join(f"{box_row(b)}: {n}" for b, n in sorted(per_box.items(), key=lambda x: -1 if x[0] is None else x[0]))
    pool = ("one trial at a time, no box pool" if None in per_box
            else f"at most {most} trial(s) in flight at once; trials per box: {counts}")
    cut = [t for t in launched if t.duration_s <= 0]
    note = f"; {len(cut)} cut attempt(s) (interrupted, crashed) recorded no wall time and are not drawn" if cut else ""
    figure = box_figure(launched, COLORS)
    return (f"<p>{_e(pool)}{_e(note)}.</p>" + (_figure_html(figure, "plot-boxes", 420) if figure else ""))


def learned_section(store: Store, outcome: StudyOutcome, space: SearchSpace, row: dict[str, Any]) -> str:
    """Candidates of the space never tried in this study that a failure learned on this host rules out."""
    from autotune.space.candidates import enumerate_candidates

    failures = store.learned_failures(row["host_key"], space.engine)
    tried = {t.candidate.key() for t in outcome.trials}
    try:
        untried = [c for c in enumerate_candidates(space) if c.key() not in tried] if failures else []
    except ConfigError:  # a space too large to enumerate: the sampled prunes above are what is known
        return ""
    rows = []
    for failure in failures:
        ruled = [c for c in untried if failure.matches(c)]
        if ruled:
            where = f"study {failure.study} trial {failure.trial}"
            rows.append([f"<code>{_e(failure.label())}</code>", _e(f"{failure.failure_class} ({where})"), str(len(ruled))])
    if not rows:
        return ""
    return "<p>Never sampled, ruled out by failures learned on this host:</p>" + _table(
        ["knob values", "learned from", "candidates"], rows
    )


def pruned_section(outcome: StudyOutcome) -> str:
    skipped = [t for t in outcome.trials if t.status == "skipped"]
    if not skipped:
        return "<p>No sampled candidate was pruned before launching.</p>"
    counts = _table(
        ["reason", "candidates"],
        [[_e(r), str(n)] for r, n in sorted(outcome.skipped_reasons.items(), key=lambda x: -x[1])],
    )
    detail = _table(["#", "candidate", "reason"], [[str(t.number), f"<code>{_e(t.candidate.label())}</code>", _e(t.reason)] for t in skipped])
    return counts + "<details><summary>every pruned candidate</summary>" + detail + "</details>"


def probes_section(probes: list[ProbeResult], host: dict[str, Any] | None) -> str:
    who = ""
    if host is not None:
        fp = json.loads(host["fingerprint"])
        facts = ", ".join(f"{k} {v}" for k, v in fp.items() if v)
        who = f"<p>host {_e(facts)}</p>"
    if not probes:
        return who + "<p>No probe results stored for this host: <code>autotune probe</code> fills this matrix.</p>"
    rows = [
        [f"<code>{_e(p.feature)}</code>", f'<span class="st-{_e(p.status)}">{_e(p.status)}</span>', _e(p.signature or ""),
         _e(p.evidence[:240])]
        for p in probes
    ]
    return who + _table(["feature", "status", "failure class", "evidence"], rows, "probes")


def predicted_rows(ran: list[TrialResult]) -> str:
    rows = []
    for t in ran:
        pred = t.predicted.get("decode_tps")
        measured = t.single_stream_decode_tps()
        if pred and measured:
            rows.append([str(t.number), _fmt(pred), _fmt(measured), f"{measured / pred:.2f}"])
    if not rows:
        return "<p>No planner prediction stored with these trials.</p>"
    return _table(["#", "predicted decode tok/s", "measured decode tok/s (1 stream)", "measured / predicted"], rows)


def recipe_section(store: Store, outcome: StudyOutcome, space: SearchSpace, row: dict[str, Any]) -> str:
    from autotune.output.recipe import recipe_from_trial, to_yaml

    best = outcome.best
    if best is None or best.launch is None:
        return "<p>No recipe: no trial ran and passed its gates.</p>"
    recipe = recipe_from_trial(space, best, outcome.baseline, row["hardware"], row["nodes"], str(store.path),
                               trials=outcome.trials)
    return (
        f"<p>What <code>autotune export --study {_e(outcome.name)}</code> writes for trial {best.number}:</p>"
        f"<pre>{_e(to_yaml(recipe))}</pre>"
    )


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:1.6em;margin-bottom:4px} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;font-size:13px;margin:8px 0} th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f4f6f8} td code{white-space:normal;word-break:break-word} pre{background:#f6f8fa;padding:10px;overflow:auto;font-size:12px}
.good{color:#17823b} .bad{color:#b3261e} .st-works{color:#17823b} .st-fails{color:#b3261e} .st-unsupported{color:#a66f00}
.st-untested{color:#888} .meta{color:#555} nav a{margin-right:12px}
"""


def energy_section(outcome: StudyOutcome) -> str:
    """Each trial's energy per workload and its GPUs' state; what is absent says so."""
    from autotune.output import energy

    launched = [t for t in outcome.trials if t.status != "skipped"]
    parts = []
    table_rows = energy.rows(launched)
    if table_rows:
        parts.append(_table(energy.HEADERS, [[_e(c) for c in row] for row in table_rows], "energy"))
        parts.append(f"<p class='meta'>{_e(energy.GPU_ONLY)}. W: mean GPU power over the workload (idle: before "
                     "the launch); active J/token: above idle.</p>")
    for line in filter(None, (energy.absent_line(launched), energy.multi_node_line(launched))):
        parts.append(f"<p>{_e(line)}</p>")
    notes = energy.state_notes(launched)
    if notes:
        parts.append('<p class="bad">Measured on a slowed GPU:</p><ul>'
                     + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    return "\n".join(parts) or "<p>No trial of this study recorded its energy (stored before autotune read it).</p>"


def build_html(store: Store, study: str) -> str:
    row = store.study(study)
    if row is None:
        raise ConfigError(f"no study {study!r} in {store.path}")
    space = SearchSpace.model_validate_json(row["space"])
    outcome = outcome_of(store, study)
    launched = [t for t in outcome.trials if t.status != "skipped"]
    ran = [t for t in launched if t.status == "ok" and t.objective is not None]
    hosts = list(store.db["hosts"].rows_where("key = ?", [row["host_key"]]))
    probes = store.probe_results(row["host_key"])
    knobs = knob_figure(ran, space)
    predicted = predicted_figure(ran)
    sections = [
        ("verdict", "Verdict", verdict_section(outcome)),
        ("pareto", "Pareto fronts", _figure_html(pareto_figure(ran, outcome.best, outcome.objective), "plot-pareto", 440)
         + "<p class='meta'>Each point is a trial that ran; the dotted line joins the trials no other "
           "gate-passing trial beats on both axes.</p>"),
        *([("capacity", "Capacity at the SLO",
            _figure_html(capacity_figure(launched, outcome.best, space.objective.slo), "plot-capacity", 440)
            + f"<p class='meta'>Each line is one trial's search, every level it probed; a level passes when the "
              f"Wilson 95% interval of its attainment lies at or above {space.objective.slo.attainment:.0%}, over at "
              f"least {space.objective.slo.min_requests} determined requests.</p>")]
          if space.objective.slo is not None and any(t.capacity for t in launched) else []),
        ("knobs", "Throughput per knob value (what mattered)",
         _figure_html(knobs, "plot-knobs", 300 * ((len(knobs.layout.annotations) + 3) // 4)) if knobs
         else "<p>Every trial that ran had the same knob values.</p>"),
        ("trials", "Trials", trials_section(outcome)
         + (_figure_html(time_figure(launched), "plot-time", 340) if launched else "")),
        ("boxes", "Boxes: where and when each trial ran", boxes_section(outcome)),
        ("energy", "Energy and GPU state", energy_section(outcome)),
        ("pruned", "Pruned before launching", pruned_section(outcome) + learned_section(store, outcome, space, row)),
        ("probes", "Host probe matrix", probes_section(probes, hosts[0] if hosts else None)),
        ("planner", "Planner: predicted vs measured",
         (_figure_html(predicted, "plot-predicted", 400) if predicted else "") + predicted_rows(ran)),
        ("recipe", "Recipe", recipe_section(store, outcome, space, row)),
    ]
    nav = "".join(f'<a href="#{key}">{_e(title)}</a>' for key, title, _ in sections)
    body = "\n".join(f'<section id="{key}"><h2>{_e(title)}</h2>\n{content}\n</section>' for key, title, content in sections)
    durations = [t.duration_s for t in launched if t.duration_s]
    meta = (
        f"space <code>{_e(space.name)}</code>, engine {_e(space.engine)}, hardware {_e(row['hardware'])} "
        f"x{row['nodes']}, created {_e(row['created_at'])}; {len(launched)} trials launched "
        f"({sum(t.status == 'ok' for t in launched)} ran, {sum(t.status == 'failed' for t in launched)} failed), "
        f"{len(outcome.trials) - len(launched)} pruned; trial wall time median "
        f"{_fmt(statistics.median(durations) if durations else None, 0)} s"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>autotune report: {_e(study)}</title>
<style>{CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>autotune report: {_e(study)}</h1>
<p class="meta">{meta}</p>
<nav>{nav}</nav>
{body}
</body></html>
"""


def write_report(store: Store, study: str, output: Path) -> Path:
    text = build_html(store, study)
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {output}: {exc.strerror}") from exc
    return output
