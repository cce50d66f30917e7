"""`autotune show`: a study read back from runs.db, with what is in flight and what it learned."""

from __future__ import annotations

import socket

from pydantic import BaseModel, ConfigDict

from pathlib import Path

from autotune.errors import ConfigError
from autotune.failures.isolation import Isolation
from autotune.failures.learning import isolations, learned_in_study
from autotune.models import LearnedFailure
from autotune.store import Store, attempt_boxes
from autotune.study.leases import boxes_label
from autotune.study.lock import pid_alive
from autotune.study.outcome import StudyOutcome, outcome_of


def pick_study(store: Store, name: str | None) -> str:
    studies = store.studies()
    if not studies:
        raise ConfigError(f"{store.path} holds no study yet: run `autotune search` first")
    if name is None:
        return studies[-1]["name"]
    if store.study(name) is None:
        known = ", ".join(s["name"] for s in studies)
        raise ConfigError(f"no study {name!r} in {store.path}; studies: {known}")
    return name


def outcome(store: Store, name: str) -> StudyOutcome:
    return outcome_of(store, name)


class OpenAttempt(BaseModel):
    """A launch runs.db shows in flight: running now, or cut (its process is gone without a result)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    number: int
    host: str
    pid: int
    started_at: str
    running: bool
    boxes: tuple[int, ...] = ()  # the boxes of the study's pool it holds (trials side by side)

    def describe(self) -> str:
        where = f", {boxes_label(self.boxes)}" if self.boxes else ""
        if self.running:
            return f"trial {self.number}: running now (PID {self.pid} on {self.host}{where}, since {self.started_at})"
        return (
            f"trial {self.number}: crashed: autotune (PID {self.pid} on {self.host}{where}) ended during this trial "
            f"(started {self.started_at}) without a result; the next `autotune search` of this study records "
            "it and re-runs it once"
        )


def open_attempts(store: Store, name: str) -> list[OpenAttempt]:
    out = []
    for row in store.open_attempts(name):
        running = row["host"] != socket.gethostname() or pid_alive(row["pid"])
        out.append(OpenAttempt(number=row["number"], host=row["host"], pid=row["pid"], started_at=row["started_at"],
                               running=running, boxes=attempt_boxes(row)))
    return out


class StudyView(BaseModel):
    """What `autotune show` prints of one study."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str
    outcome: StudyOutcome
    attempts: list[OpenAttempt]
    learned: list[LearnedFailure]
    isolations: list[Isolation]


def view(db: Path, study: str | None) -> StudyView:
    store = Store(db, must_exist=True)
    name = pick_study(store, study)
    return StudyView(name=name, outcome=outcome(store, name), attempts=open_attempts(store, name),
                     learned=learned_in_study(store, name), isolations=isolations(store, name))
