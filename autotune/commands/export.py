"""`autotune export`: a study's winner (or a chosen trial) as a recipe, with the verdict it carries
and the warnings a user must see (no winner, accuracy unchecked, trade-offs)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from autotune.commands.show import pick_study
from autotune.errors import ConfigError
from autotune.gates.score import accuracy_status
from autotune.model.shapes import dummy_weights
from autotune.models import (
    RecipeVerdict,
    SearchSpace,
    TrialResult,
    VerdictStatus,
)
from autotune.output.draft_schedule import with_schedule
from autotune.output.recipe import recipe_from_trial, render_recipe
from autotune.store import Store
from autotune.study.outcome import StudyOutcome, outcome_of


class Export(BaseModel):
    """An exported recipe: its YAML, and what the user must be told about its verdict."""

    model_config = ConfigDict(extra="forbid")

    text: str
    warnings: list[str] = []


def recipe_verdict(space: SearchSpace, outcome: StudyOutcome, chosen: TrialResult) -> RecipeVerdict:
    """Whether the exported trial is a confirmed winner, and on what evidence."""
    accuracy = accuracy_status(chosen) if outcome.accuracy else "unchecked"
    if dummy_weights(space):
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
    return RecipeVerdict(
        status=status,
        summary=summary,
        accuracy=accuracy,
        launch_noise=outcome.noise.describe() if outcome.noise else "unknown: no config was launched twice on this host",
        objective=space.objective.label,
        confirmation=confirmation,
        tradeoffs=outcome.tradeoffs_of(chosen),
        accuracy_failures=outcome.failed_classes(),
    )


def export_warnings(verdict: RecipeVerdict) -> list[str]:
    out = []
    if verdict.status in (VerdictStatus.NO_WINNER, VerdictStatus.NOT_CONFIRMED):
        out.append(f"this recipe is not a confirmed winner ({verdict.status.value}): {verdict.summary}")
    if verdict.accuracy not in ("pass", "not applicable"):
        out.append(f"accuracy {verdict.accuracy}: the recipe's gates did not all pass with evidence")
    if verdict.tradeoffs:
        out.append("it trades away, against the baseline beyond the launch noise: "
                   + "; ".join(t.describe() for t in verdict.tradeoffs))
    return out


def export_recipe(store: Store, study: str | None, trial_number: int | None, output: Path | None) -> Export:
    name = pick_study(store, study)
    row = store.study(name)
    assert row is not None
    space = SearchSpace.model_validate_json(row["space"])
    result = outcome_of(store, name)
    if trial_number is None:
        chosen: TrialResult | None = result.best
        if chosen is None:
            raise ConfigError(f"study {name!r} has no trial that ran and passed its gates; nothing to export")
    else:
        chosen = next((t for t in result.trials if t.number == trial_number), None)
        if chosen is None:
            raise ConfigError(f"study {name!r} has no trial {trial_number}")
        if chosen.status != "ok":
            raise ConfigError(f"trial {trial_number} did not run ({chosen.status}: {chosen.reason}); nothing to export")
    verdict = recipe_verdict(space, result, chosen)
    recipe = recipe_from_trial(
        space, chosen, result.baseline, row["hardware"], row["nodes"], str(store.path), verdict=verdict,
        accuracy_on=result.accuracy, trials=result.trials,
    )
    recipe = with_schedule(recipe, result.draft_schedule, chosen.number)
    text = render_recipe(recipe, output)
    store.save_recipe(name, chosen.number, recipe.kind, text)
    return Export(text=text, warnings=export_warnings(verdict))
