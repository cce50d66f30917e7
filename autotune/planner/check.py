"""The planner against measured trials: bytes per token, roofline fraction, and held-out error.

A point is one ok trial of runs.db: its measured single-stream decode and cold prefill, and what
the planner computes for the same candidate. Fitting always happens on one set of points and the
error is reported on the others (never on a point that was fitted on).

Decode step models compared (t = seconds per token at one stream):
  shipped    the planner as the profile has it (no fit on these points): stored with the trial,
             and recomputed by this checkout
  planner    the planner's own form refitted: t = bytes / (bandwidth x efficiency) + overhead
  per_layer  t = fixed + n_layers x per_layer (bytes left out: kernel latency bound)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune.engines import Knobs, get_engine
from autotune.planner.calibration import bare_roofline
from autotune.hardware.profiles import get_profile
from autotune.models import SearchSpace, TrialResult
from autotune.checkpoint.config import model_facts
from autotune.planner.roofline import DECODE_PROMPT_TOKENS, estimate

GB = 1e9


@dataclass(frozen=True)
class Point:
    study: str
    shape: str
    trial: int
    label: str
    n_layers: int
    eager: bool
    speculative: bool  # drafts tokens: a step yields more than one token, another regime
    bytes_per_token: float  # planner's weights + KV read per decode step at the short-prompt context
    kv_bytes_per_token: float  # KV bytes one cached token adds to every later step
    bandwidth: float  # bytes/s
    decode_tps: float
    shipped_decode_tps: float | None  # what the study stored when it ran
    current_decode_tps: float | None  # this checkout's planner with the profile's fitted numbers
    prefill_tps: float | None
    bare_prefill_tps: float | None
    extras: dict[str, float]

    @property
    def step_s(self) -> float:
        return 1.0 / self.decode_tps

    @property
    def roofline_fraction(self) -> float:
        """Measured decode / what the bandwidth allows for the bytes one step reads."""
        return self.decode_tps * self.bytes_per_token / self.bandwidth


class _Unnoted:
    """The planner's notes, not kept: this check reads numbers only."""

    def assume(self, text: str) -> None:
        pass

    def missing(self, term: str, why: str) -> None:
        pass


def _kv_bytes_per_token(space: SearchSpace, params: dict) -> float:
    facts = model_facts(space.model)
    layers = facts.kv_layers or facts.n_layers or 0
    elem = get_engine(space.engine).kv_element_bytes(Knobs(params), facts.dtype_bits, _Unnoted()) or 2.0
    return 2.0 * layers * (facts.n_kv_heads or 0) * (facts.head_dim or 0) * elem


def point(space: SearchSpace, trial: TrialResult, hardware: str = "h200") -> Point | None:
    """The planner's view of one ok trial next to what it measured; None when it measured no decode."""
    decode = trial.measurement(f"decode_tps.{space.workload.prompt_sets[0]}")
    if trial.status != "ok" or decode is None:
        return None
    profile = get_profile(hardware)
    est = estimate(space, trial.candidate, bare_roofline(profile), 1)
    current = estimate(space, trial.candidate, profile, 1)
    bandwidth = profile.mem_bandwidth_gbps * GB
    prefill = [m for m in trial.measurements if m.name.startswith("prefill_tps.")]
    extras = {m.name: m.median for m in trial.measurements}
    return Point(
        study=trial.study,
        shape=space.model.name,
        trial=trial.number,
        label=trial.candidate.label(),
        n_layers=model_facts(space.model).n_layers or 0,
        eager=trial.candidate.params.get("enforce_eager") is True,
        speculative=bool(trial.candidate.params.get("draft_k")),
        bytes_per_token=bandwidth / est.decode_tps if est.decode_tps else 0.0,
        kv_bytes_per_token=_kv_bytes_per_token(space, trial.candidate.params),
        bandwidth=bandwidth,
        decode_tps=decode.median,
        shipped_decode_tps=trial.predicted.get("decode_tps"),
        current_decode_tps=current.decode_tps,
        prefill_tps=prefill[-1].median if prefill else None,
        bare_prefill_tps=est.prefill_tps,
        extras=extras,
    )


def context_bytes_per_token(p: Point, prompt_tokens: int, decode_tokens: int) -> float:
    """Bytes one decode step reads after a prompt of `prompt_tokens` (mean over the decode)."""
    extra_ctx = prompt_tokens + decode_tokens / 2 - (DECODE_PROMPT_TOKENS + decode_tokens / 2)
    return p.bytes_per_token + p.kv_bytes_per_token * extra_ctx


# ---------------------------------------------------------------- step models

StepModel = Callable[[Point], float]  # predicted seconds per token
Fitter = Callable[[Sequence[Point]], StepModel]


def _regression(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(slope, intercept) by least squares; slope 0 when every x is the same."""
    if len(set(xs)) < 2:
        return 0.0, statistics.fmean(ys)
    fit = statistics.linear_regression(xs, ys)
    return fit.slope, fit.intercept


def fit_planner_form(points: Sequence[Point]) -> StepModel:
    """t = bytes x slope + overhead: slope = 1 / (bandwidth x efficiency)."""
    slope, intercept = _regression([p.bytes_per_token for p in points], [p.step_s for p in points])
    return lambda p: slope * p.bytes_per_token + intercept


def fit_per_layer(points: Sequence[Point]) -> StepModel:
    """t = fixed + n_layers x per_layer."""
    slope, intercept = _regression([float(p.n_layers) for p in points], [p.step_s for p in points])
    return lambda p: slope * p.n_layers + intercept


def errors(model: StepModel, points: Sequence[Point]) -> list[float]:
    """Relative error of predicted decode tok/s: predicted / measured - 1."""
    return [(1.0 / model(p)) / p.decode_tps - 1.0 for p in points]


def held_out(points: Sequence[Point], fitter: Fitter, fit_on: Callable[[Point], bool]) -> list[tuple[Point, float]]:
    """Fit on the points `fit_on` selects, error on every other point."""
    train = [p for p in points if fit_on(p)]
    test = [p for p in points if not fit_on(p)]
    if not train or not test:
        return []
    model = fitter(train)
    return list(zip(test, errors(model, test)))


def leave_one_out(points: Sequence[Point], fitter: Fitter) -> list[tuple[Point, float]]:
    """Each point predicted by a model fitted on all the others."""
    out = []
    for i, p in enumerate(points):
        rest = [q for j, q in enumerate(points) if j != i]
        if rest:
            out.append((p, errors(fitter(rest), [p])[0]))
    return out


def median_abs(errs: Sequence[float]) -> float | None:
    return statistics.median(abs(e) for e in errs) if errs else None
