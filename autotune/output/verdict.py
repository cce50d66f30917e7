"""The verdict of a study, composed once from its outcome: whether a trial (the best, or one chosen
for export) is a confirmed winner, on what evidence, and every warning a reader must see. The
terminal (`terminal.print_best`), the HTML report (`html.verdict_section`) and the recipe
(`commands/export.py`) all render this one record, so a warning reaches all three."""

from __future__ import annotations

from autotune.gates.score import accuracy_status
from autotune.checkpoint.shapes import dummy_weights
from autotune.models import RecipeVerdict, TrialResult, VerdictStatus
from autotune.study.outcome import StudyOutcome
from autotune.verdict.noise import single_launch_inside, single_launch_verdict


def compose(outcome: StudyOutcome, chosen: TrialResult) -> RecipeVerdict:
    """The verdict on `chosen` (a trial of `outcome`)."""
    accuracy = accuracy_status(chosen) if outcome.accuracy else "unchecked"
    if outcome.space is not None and dummy_weights(outcome.space):
        accuracy = "not applicable"
    base = outcome.baseline
    confirmation = outcome.confirmation if outcome.confirmation and outcome.confirmation.best_trial == chosen.number else None
    if base is not None and chosen.candidate.key() == base.candidate.key():
        status, summary = VerdictStatus.BASELINE, "the baseline (engine defaults) is the best config measured"
    elif confirmation is not None:
        status, summary = confirmation.status, confirmation.verdict
    else:
        status = VerdictStatus.NOT_CONFIRMED
        summary = "not confirmed: no confirmation rounds ran for this trial (autotune search --confirm-rounds 2 or more)"
    noise = outcome.noise
    vs_baseline = None
    if base is not None and base.objective and chosen.objective and chosen.number != base.number:
        ratio = chosen.objective / base.objective
        noise_text = noise.describe() if noise else "launch-to-launch noise unknown (no config launched twice here yet)"
        vs_baseline = f"x{ratio:.2f}, one launch each ({single_launch_verdict(ratio, noise)}; {noise_text})"
    # trials that skipped or deferred their gates count too: below the chosen's score, maybe not beyond the noise
    skipped = [t for t in outcome.trials if t.status == "ok" and (t.dominated or t.deferred)]
    others = [*(t for t in outcome.ranked if t.number != chosen.number),
              *(t for t in skipped if t.number != chosen.number and (t.score or 0.0) <= (chosen.score or 0.0))]
    tied = sorted({t.number for t in others if t.objective and chosen.objective
                   and single_launch_inside(chosen.objective / t.objective, noise)})
    faster = sorted(t.number for t in skipped if (t.score or 0.0) > (chosen.score or 0.0))
    return RecipeVerdict(
        status=status,
        summary=summary,
        accuracy=accuracy,
        launch_noise=noise.describe() if noise else "unknown: no config was launched twice on this host",
        objective=outcome.objective.label,
        confirmation=confirmation,
        tradeoffs=outcome.tradeoffs_of(chosen),
        accuracy_failures=outcome.failed_classes(),
        vs_baseline=vs_baseline,
        tied_with=tied,
        unchecked_faster=faster,
    )
