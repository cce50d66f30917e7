"""A study of a tiny llama.cpp space whose launches are stand-ins: the plan `autotune search`
would make, with a placeholder model file (the stand-in never reads it)."""

from __future__ import annotations

from pathlib import Path

#: the tiny llama.cpp space: two n_threads values (a str.format template with {model})
TINY_LLAMACPP = (
    "name: tiny\nengine: llamacpp\nmodel: {{name: m, path: {model}}}\n"
    "knobs:\n  - {{name: n_threads, values: [1, 2], default: 1}}\n"
)


def placeholder_gguf(tmp_path: Path) -> Path:
    """A model file that is only its four magic bytes: enough for a space to load and a plan to be
    made, never for an engine to serve."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    return model


def tiny_llamacpp_space(tmp_path: Path, template: str = TINY_LLAMACPP) -> Path:
    """tmp_path/s.yaml: the space `template` (a str.format template with {model}) on a placeholder GGUF."""
    space = tmp_path / "s.yaml"
    space.write_text(template.format(model=placeholder_gguf(tmp_path)))
    return space


def stand_in_plan(tmp_path: Path, space_template: str, *, accuracy: bool, tries: list[str] | None = None):
    """The study 's' in tmp_path/runs.db of the space `space_template` (a str.format template with
    {model}); patch commands.search.Tuner / study.confirm.run_trial before running it."""
    from autotune.commands.setup import prepare

    space = tiny_llamacpp_space(tmp_path, space_template)
    return prepare(space_name=str(space), model_path=None, db_path=tmp_path / "runs.db", study="s",
                   hardware="cpu", nodes=1, accuracy=accuracy, logs_dir=tmp_path, tries=tries)
