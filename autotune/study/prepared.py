"""A checked search, ready to run (PreparedStudy): the space, engine, hardware, study, host and the
pruner, made by autotune/commands/setup.py; nothing launched or written yet."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from autotune.engines import Engine
from autotune.models import (
    Candidate,
    ChoicesCheck,
    Cluster,
    HardwareProfile,
    HostFingerprint,
    SearchSpace,
)
from autotune.space.candidates import (
    Pruner,
    enumerate_candidates,
)
from autotune.store import Store
from autotune.trial.context import TrialContext


class PreparedStudy(BaseModel):
    """A checked search, ready to run: nothing has been launched or written yet."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    space: SearchSpace
    engine: Engine
    hardware: HardwareProfile
    nodes: int
    study: str
    host: HostFingerprint
    db_path: Path
    store: Store | None
    pruner: Pruner
    ctx: TrialContext
    candidates_total: int
    candidates_after_rules: int
    first: list[Candidate] = []
    #: the knob values against the installed engine's choices (unchecked where it cannot be asked)
    choices: ChoicesCheck | None = None
    boxes: int = 1  # the boxes trials lease (autotune/study/leases.py); each trial takes `nodes` of them
    pool_cluster: Cluster | None = None  # the cluster file's nodes those boxes are (None: stand-ins on this host)
    parallel: int = 1  # trials in flight at once (autotune/study/parallel.py)


class RunSettings(BaseModel):
    """How far one run of a plan goes: its trials (launches that count, baseline included), the
    sampler's seed, the confirmation rounds in all for the study, the baseline's noise relaunches,
    the qeval reference (None: trial 0) and the wall-clock budget in seconds (None: none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trials: int
    seed: int = 0
    confirm_rounds: int = 0
    noise_relaunches: int = 1
    qeval_reference: int | None = None
    time_budget_s: float | None = None


#: the planner's best-predicted candidates a new study queues after the baseline and the --try ones
PLANNER_FIRST = 3


class QueuedAs(str, Enum):
    """Why a new study launches a candidate before its sampler picks any."""

    BASELINE = "baseline"
    TRY = "--try"
    PLANNER = "planner"


def queued_first(base: Candidate, tries: list[Candidate], ranked: list[Candidate]) -> list[tuple[Candidate, QueuedAs]]:
    """What a new study launches first, in order: the baseline, the --try candidates, then the
    first PLANNER_FIRST of `ranked` (the planner's order), each once."""
    queue = [(base, QueuedAs.BASELINE)]
    seen = {base.key()}
    for candidate, why in [*((c, QueuedAs.TRY) for c in tries), *((c, QueuedAs.PLANNER) for c in ranked[:PLANNER_FIRST])]:
        if candidate.key() not in seen:
            seen.add(candidate.key())
            queue.append((candidate, why))
    return queue


def surviving(plan: PreparedStudy) -> list[tuple[Candidate, str | None]]:
    """Every candidate with the reason it is pruned (None = it would be launched)."""
    return [(c, plan.pruner.reason(c)) for c in enumerate_candidates(plan.space)]
