"""A study of a tiny llama.cpp space whose launches are stand-ins: the plan `autotune search`
would make, with a placeholder model file (the stand-in never reads it)."""

from __future__ import annotations

from pathlib import Path


def stand_in_plan(tmp_path: Path, space_template: str, *, accuracy: bool, tries: list[str] | None = None):
    """The study 's' in tmp_path/runs.db of the space `space_template` (a str.format template with
    {model}); patch commands.search.Tuner / study.confirm.run_trial before running it."""
    from autotune.commands.setup import prepare

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    space = tmp_path / "s.yaml"
    space.write_text(space_template.format(model=model))
    return prepare(space_name=str(space), model_path=None, db_path=tmp_path / "runs.db", study="s",
                          hardware="cpu", nodes=1, accuracy=accuracy, logs_dir=tmp_path, tries=tries)
