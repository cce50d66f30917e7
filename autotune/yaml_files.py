"""Reading a YAML file into a pydantic model, with one-line errors that name the file, the line
of a syntax error, or the first wrong keys."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from autotune.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def first_errors(exc: ValidationError, most: int = 3) -> str:
    errors = exc.errors()
    parts = []
    for err in errors[:most]:
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown key {where!r}")
        else:
            parts.append(f"{where}: {err['msg']}")
    more = f" (+{len(errors) - most} more)" if len(errors) > most else ""
    return "; ".join(parts) + more


def load_yaml_model(path: Path, model: type[M], what: str) -> M:
    """`path` parsed as YAML and validated as `model`; ConfigError naming `what` otherwise."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}: malformed YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {what} must be a YAML mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {first_errors(exc)}") from exc
