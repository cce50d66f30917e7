"""Where and when each trial ran, from what runs.db records: a trial's boxes, start and wall time.

`spans` turns the launched trials into one bar per box each trial held; `in_flight` counts the
trials running at each moment (a step line). `box_figure` draws both for the HTML report. Attempts
cut short (interrupted, crashed) record no wall time and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autotune.models import TrialResult
from autotune.study.leases import boxes_label


@dataclass(frozen=True)
class Span:
    """One trial on one box: seconds from the study's first start."""

    trial: int
    box: int | None  # None: no box pool (one trial at a time on the launch's own nodes)
    start_s: float
    end_s: float
    status: str


def _start(trial: TrialResult) -> float:
    return datetime.fromisoformat(trial.started_at).timestamp()


def timed(trials: list[TrialResult]) -> list[TrialResult]:
    """The launched trials that recorded a wall time, in start order."""
    return sorted((t for t in trials if t.status != "skipped" and t.duration_s > 0), key=_start)


def spans(trials: list[TrialResult]) -> list[Span]:
    """A span per box per timed trial (one span on no box for a trial without boxes)."""
    ran = timed(trials)
    if not ran:
        return []
    origin = _start(ran[0])
    out = []
    for t in ran:
        start = _start(t) - origin
        for box in t.boxes or [None]:
            out.append(Span(trial=t.number, box=box, start_s=start, end_s=start + t.duration_s, status=t.status))
    return out


def in_flight(trials: list[TrialResult]) -> list[tuple[float, int]]:
    """(seconds, trials running from then on) at each start and end, from 0 back to 0."""
    ran = timed(trials)
    if not ran:
        return []
    origin = _start(ran[0])
    events = sorted([(_start(t) - origin, 1) for t in ran] + [(_start(t) - origin + t.duration_s, -1) for t in ran],
                    key=lambda e: (e[0], e[1]))  # an end before a start at the same moment
    steps: list[tuple[float, int]] = []
    running = 0
    for at, change in events:
        running += change
        if steps and steps[-1][0] == at:
            steps[-1] = (at, running)
        else:
            steps.append((at, running))
    return steps


def box_row(box: int | None) -> str:
    return "this host" if box is None else boxes_label([box])


def box_figure(trials: list[TrialResult], colors: dict[str, str]) -> go.Figure | None:
    """Per box, a bar for each trial while it ran; under it, the trials in flight over time."""
    bars = spans(trials)
    if not bars:
        return None
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.7, 0.3], vertical_spacing=0.08,
                        subplot_titles=("trials per box", "trials in flight"))
    for status in sorted({s.status for s in bars}):
        group = [s for s in bars if s.status == status]
        fig.add_trace(go.Bar(
            y=[box_row(s.box) for s in group], x=[s.end_s - s.start_s for s in group], base=[s.start_s for s in group],
            orientation="h", name=status, marker_color=colors.get(status, colors["ok"]),
            text=[f"#{s.trial}" for s in group], textposition="inside",
            hovertemplate="%{text} on %{y}: %{base:.0f} s to %{x:.0f} s long<extra></extra>",
        ), row=1, col=1)
    steps = in_flight(trials)
    fig.add_trace(go.Scatter(x=[s[0] for s in steps], y=[s[1] for s in steps], mode="lines", line_shape="hv",
                             name="in flight", line=dict(color=colors["baseline"])), row=2, col=1)
    rows = sorted({s.box for s in bars}, key=lambda b: -1 if b is None else b)
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=[box_row(b) for b in reversed(rows)],
                     row=1, col=1)
    fig.update_yaxes(title_text="trials", dtick=1, rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="seconds since the first trial started", row=2, col=1)
    fig.update_layout(barmode="overlay", title="where and when each trial ran")
    return fig
