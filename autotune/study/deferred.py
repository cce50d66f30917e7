"""Gates at the end of the study, for engines whose relaunch costs seconds (llama.cpp).

A trial faster than the incumbent does not run needle and qeval in its own launch: its gates are
`deferred`. Only the qeval reference runs qeval at once (every later qeval compares with it); its
needle waits like the others' gates. When the study's trials are done, the
best by score among the trials that may still rank first is relaunched to run its gates
(`gate_the_head`); if they fail, the next one is, until the head of the ranking passed its gates
or nothing is left. The pick is the one gating every trial would make, since a trial ranks only
with its gates passed and only the head's gates decide it; what is saved is the needle and qeval
run of every incumbent a faster trial replaced. The relaunch is a launch of its own, measuring
decode once and then the gates: its throughput joins the host's launch-noise samples, the trial
keeps the numbers of its first launch, and its gates say where their evidence comes from
(`accuracy_relaunched`). A trial that can reuse a numerics-neutral sibling's accuracy does so at
once instead of deferring.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autotune.gates.dominated import DominatedCheck, GatesSkipped, SkipKind
from autotune.gates.score import by_score as score_order
from autotune.models import TrialResult
from autotune.trial.context import TrialContext, objective_only

#: why a faster trial's gates did not run in its own launch
DEFERRED = "faster than the incumbent: its gates run at the end of the study, if it is then the best by score"


#: why the qeval reference's needle did not run in its own launch
REFERENCE_NEEDLE = (
    "the qeval reference: its qeval ran at once (later trials compare with it), its needle runs at the "
    "end of the study, if it is then the best by score"
)


def reference_context(ctx: TrialContext) -> TrialContext:
    """The qeval reference's own launch: qeval only, its needle waits like any trial's gates."""
    gates = ctx.space.gates.model_copy(update={"needle": None})
    return ctx.model_copy(update={"space": ctx.space.model_copy(update={"gates": gates})})


def lazy(check: DominatedCheck | None) -> DominatedCheck:
    """The skip rule with gates at the end: dominated where `check` says so, else deferred."""

    def skip(objective: float, score: float) -> GatesSkipped:
        return (check(objective, score) if check else None) or GatesSkipped(kind=SkipKind.DEFERRED, why=DEFERRED)

    return skip


def pending(trial: TrialResult) -> bool:
    """Its gates were skipped (deferred or dominated), no relaunch has run them yet, and no gate it
    has already fails (an SLO, or a numerics class learned to fail accuracy): running the rest
    could not make it eligible."""
    return (bool(trial.deferred or trial.dominated) and not trial.accuracy_relaunched
            and not any(g.status == "fail" for g in trial.gates))


def by_score(trials: list[TrialResult]) -> list[TrialResult]:
    return score_order([t for t in trials if t.status == "ok" and t.score is not None])


def optimistic_incumbent(trials: list[TrialResult]) -> TrialResult | None:
    """The best by score among the trials that passed their gates or still have them to run."""
    return next((t for t in by_score(trials) if t.feasible or (t.deferred and pending(t))), None)


def head_to_gate(trials: list[TrialResult]) -> TrialResult | None:
    """The trial whose gates decide the pick now: the best by score that passed them (nothing to
    do) or still has them to run; None when no such trial is left."""
    return next((t for t in by_score(trials) if t.feasible or pending(t)), None)


def gates_relaunch_context(ctx: TrialContext) -> TrialContext:
    """The relaunch measures what the gates need: its throughput is not the trial's (that stays its
    own launch's), so it decodes one pass at one stream, no prefill or concurrency. That one-pass
    sample is noisier than a trial's median of three, so in the pooled launch noise it widens the
    spread in expectation (the verdict's side of caution)."""
    return objective_only(ctx, repeats=1)


def merge_relaunch(trial: TrialResult, relaunch: TrialResult) -> TrialResult:
    """The trial with the accuracy evidence of its relaunch (or the relaunch's failure)."""
    ok = relaunch.status == "ok"
    return trial.model_copy(
        update={
            "needle": relaunch.needle if ok else None,
            "qeval": relaunch.qeval if ok else None,
            "accuracy_from": relaunch.accuracy_from if ok else None,
            "dominated": None,
            "deferred": None if ok else f"the relaunch that was to run its gates failed: {relaunch.reason}",
            "accuracy_relaunched": True,
            "phase_s": {**trial.phase_s, "gates relaunch": round(relaunch.duration_s, 1)},
        }
    )


def gate_the_head(
    trials: Callable[[], list[TrialResult]],
    relaunch: Callable[[TrialResult, Path], TrialResult],
    save: Callable[[TrialResult, TrialResult], None],
    refusal: Callable[[], str | None],
    logs_dir: Path,
) -> str | None:
    """Relaunch the head of the ranking until its gates are known to pass or no candidate is left.

    `trials()` returns the study's trials with their gates judged; `relaunch(trial, logs)` runs the
    trial's config with its gates in a launch of its own; `save(merged, relaunch)` stores the
    result. Returns why it stopped before the head was checked (the time budget), else None."""
    while True:
        head = head_to_gate(trials())
        if head is None or not pending(head):
            return None
        why = refusal()
        if why:
            return f"{why}; the deferred gates of trial {head.number}, the best by score, did not run"
        result = relaunch(head, logs_dir / "gates-relaunch")
        save(merge_relaunch(head, result), result)


