"""Engine registry: name -> Engine class. The CLI's --engine choices and space validation use it."""

from __future__ import annotations

from importlib import import_module

from autotune.engines.base import Engine, Knobs, PlanNotes, ProbeRequest
from autotune.errors import ConfigError

ENGINES: dict[str, str] = {
    "llamacpp": "autotune.engines.llamacpp:LlamaCppEngine",
    "vllm": "autotune.engines.vllm:VllmEngine",
}


def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise ConfigError(f"unknown engine {name!r}; known engines: {', '.join(sorted(ENGINES))}")
    module, _, cls = ENGINES[name].partition(":")
    return getattr(import_module(module), cls)()


__all__ = ["ENGINES", "Engine", "Knobs", "PlanNotes", "ProbeRequest", "get_engine"]
