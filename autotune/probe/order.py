"""Which probe launches spend the budget first, and which an earlier probe left untested.

A launch cell is one combination of knob values (KV dtype x attention backend [x draft_k] for
vLLM; type_k x type_v x flash_attn, or draft_k, for llama.cpp), described by its `params`.

Order: the reference cell first (the warm-up, and the golden reference the others are judged
against); then the cells the search space will use, riskiest first — the ones a prior (vLLM's
own selector) accepted but no launch has confirmed, then the rest, more non-default values
first; then the cells the space never uses. A cell a launch already settled (works / fails /
unsupported in runs.db) is not launched again, so `autotune probe` resumes where the last one
stopped, like a study.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from autotune.models import ProbeResult, Scalar, SearchSpace

C = TypeVar("C")

REFERENCE = "reference (warm-up and golden reference)"
ACCEPTED_UNCONFIRMED = "the space uses it; the selector accepted it, no launch has confirmed it"
IN_SPACE = "the space uses it"
OUTSIDE_SPACE = "the space never uses it"
BUDGET_USED_UP = "not launched: the time budget was used up"


def space_uses(params: Mapping[str, Scalar], space: SearchSpace | None, defaults: Mapping[str, Scalar]) -> bool:
    """True when some candidate of `space` holds every value of the cell (no space: every cell)."""
    if space is None:
        return True
    knobs = {k.name: k.values for k in space.knobs}
    for name, value in params.items():
        if name in knobs:
            if value not in knobs[name]:
                return False
        elif name in space.fixed:
            if space.fixed[name] != value:
                return False
        elif value != defaults.get(name):  # the space leaves this knob at the engine default
            return False
    return True


def selector_accepted(prior: Iterable[ProbeResult]) -> list[dict[str, Scalar]]:
    """Params of the prior's (vLLM selector's) "works" results."""
    return [r.params for r in prior if r.feature.startswith("selector:") and r.status == "works" and r.params]


def _covered(params: Mapping[str, Scalar], accepted: list[dict[str, Scalar]]) -> bool:
    return any(all(params.get(k) == v for k, v in ok.items()) for ok in accepted)


def order_cells(
    cells: Iterable[C],
    params_of: Callable[[C], Mapping[str, Scalar]],
    *,
    is_reference: Callable[[C], bool],
    space: SearchSpace | None,
    defaults: Mapping[str, Scalar],
    prior: Iterable[ProbeResult] = (),
) -> list[tuple[C, str]]:
    """The cells in launch order, each with why it sits where it does (see the module doc)."""
    accepted = selector_accepted(prior)
    ranked = []
    for index, cell in enumerate(cells):
        params = params_of(cell)
        changed = sum(1 for k, v in params.items() if v != defaults.get(k))
        if is_reference(cell):
            group, why = 0, REFERENCE
        elif not space_uses(params, space, defaults):
            group, why = 3, OUTSIDE_SPACE
        elif _covered(params, accepted):
            group, why = 1, ACCEPTED_UNCONFIRMED
        else:
            group, why = 2, IN_SPACE
        ranked.append(((group, -changed, index), cell, why))
    ranked.sort(key=lambda item: item[0])
    return [(cell, why) for _, cell, why in ranked]


def settled(stored: Iterable[ProbeResult]) -> set[str]:
    """Features a launch already decided (anything but untested)."""
    return {r.feature for r in stored if r.status != "untested"}


def untested_summary(results: Iterable[ProbeResult]) -> dict[str, int]:
    """How many cells stayed untested, by the reason their evidence gives."""
    return dict(Counter((r.evidence or "no reason recorded").split(";")[0] for r in results if r.status == "untested"))
