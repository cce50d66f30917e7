"""`autotune export`: a study's winner (or a chosen trial) as a recipe, with the verdict it carries
and the warnings a user must see (no winner, accuracy unchecked, trade-offs)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from autotune.commands.show import pick_study
from autotune.errors import ConfigError
from autotune.models import SearchSpace, TrialResult
from autotune.output.schedule_lines import with_schedule
from autotune.output.recipe import recipe_from_trial, render_recipe
from autotune.output.verdict import compose
from autotune.store import Store
from autotune.study.outcome import outcome_of


class Export(BaseModel):
    """An exported recipe: its YAML, and what the user must be told about its verdict."""

    model_config = ConfigDict(extra="forbid")

    text: str
    warnings: list[str] = []


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
    verdict = compose(result, chosen)
    recipe = recipe_from_trial(
        space, chosen, result.baseline, row["hardware"], row["nodes"], str(store.path), verdict=verdict,
        accuracy_on=result.accuracy, trials=result.trials,
    )
    recipe = with_schedule(recipe, result.draft_schedule, chosen.number)
    text = render_recipe(recipe, output)
    store.save_recipe(name, chosen.number, recipe.kind, text)
    return Export(text=text, warnings=verdict.warnings())
