"""The rows of vLLM's probe launch matrix (KV-cache dtype x attention backend), from what the
installed version accepts where that is known.

The usual rows are the ones written for vLLM 0.26.0; with the engine's choices (cached per
version and host fingerprint, autotune/engines/vllm_choices.py) a row this version does not list
is dropped, a backend a later version adds for the hardware autotune is for (B12X, sm_12x, from
0.33.0) is added where it is listed, and so is every KV dtype and backend the space uses that the
version accepts. Without the choices (no host fingerprint, an unreadable engine) the rows are the
ones written for 0.26.0, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from autotune.engines.base import ProbeRequest
from autotune.engines.vllm import SM12X_BACKENDS, VllmEngine
from autotune.engines.vllm_choices import EngineChoices, cached_choices
from autotune.errors import EngineUnavailable
from autotune.models import SearchSpace

#: the rows written for vLLM 0.26.0 ("auto" backend = vLLM chooses; it is always a row)
KV_DTYPES = ("auto", "fp8", "fp8_e5m2", "nvfp4")
BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")
#: backends later versions add for DGX Spark (sm_12x), tried where the version lists them; unverified
#: until a Spark runs them (on other GPUs vLLM's selector refuses them before any launch)
LATER_BACKENDS = SM12X_BACKENDS["attention_backend"]


class RowsSource(str, Enum):
    ENGINE = "engine"  # the installed version's choices
    WRITTEN = "written"  # the rows written for vLLM 0.26.0 (its choices were not known)


@dataclass(frozen=True)
class MatrixRows:
    kv_dtypes: tuple[str, ...]
    backends: tuple[str, ...]  # besides "auto"
    source: RowsSource


def _space_values(space: SearchSpace | None, knob: str) -> list[str]:
    if space is None:
        return []
    values = [space.fixed.get(knob)] + [v for k in space.knobs if k.name == knob for v in k.values]
    return [str(v) for v in values if v is not None]


def _listed(wanted: Iterable[str], known: list[str], any_case: bool = False) -> tuple[str, ...]:
    """`wanted` in order, once each, kept where `known` lists it (by name in any case for backends)."""
    names = {k.upper(): k for k in known} if any_case else {k: k for k in known}
    out = [names[w.upper() if any_case else w] for w in wanted if (w.upper() if any_case else w) in names]
    return tuple(dict.fromkeys(out))


def matrix_rows(choices: EngineChoices | None, space: SearchSpace | None = None) -> MatrixRows:
    """The KV dtypes and attention backends the launch matrix crosses (see the module doc)."""
    if choices is None:
        return MatrixRows(KV_DTYPES, BACKENDS, RowsSource.WRITTEN)
    kv = _listed([*KV_DTYPES, *_space_values(space, "kv_cache_dtype")], ["auto", *choices.kv_cache_dtypes])
    wanted = [*BACKENDS, *LATER_BACKENDS, *_space_values(space, "attention_backend")]
    return MatrixRows(kv, _listed(wanted, choices.attention_backends, any_case=True), RowsSource.ENGINE)


def rows_for(engine: VllmEngine, request: ProbeRequest, space: SearchSpace | None) -> MatrixRows:
    """The rows for this probe: from the installed version's choices where the request names the
    host fingerprint they are cached under and the engine answers, else the written ones."""
    version = engine.version()
    if request.host_key is None or version is None:
        return matrix_rows(None, space)
    try:
        return matrix_rows(cached_choices(engine.python, version, request.host_key), space)
    except EngineUnavailable:
        return matrix_rows(None, space)
