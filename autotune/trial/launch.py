"""The launch seam: every engine autotune starts is started here, and every way one fails is read here.

`Launch` is what a study launches through: a LaunchRequest (a candidate, the context it runs in,
why it is launched) in, a TrialResult out. Its purposes are every launch a study makes: its
trials, the gates relaunch of the best at the end, the launches that narrow a failed numerics
class, the confirmation rounds, the baseline's noise relaunches, the draft schedule's launch, and
the smoke launches that isolate the knob behind a failure. `EngineLaunch` (trial/run.py) is the
Launch that starts the engine; the stand-ins of the tests and the replay of
benchmarks/search_quality.py implement the same protocol, and tests/test_launch_contract.py
holds each of them to it. What a launch does about its accuracy gates (skip them, reuse a
sibling's, run what the space asks) is the request's to say (`LaunchRequest.gates`), so no
stand-in writes that rule again.

`engine_up` is the one place an engine is started (the launchers' `open_server`): `EngineLaunch`
starts there, and so do the probe launches of probe/features/vllm.py. An engine that does not come
up, and one that fails while it serves, are read one way: the memory watchdog's stop first, then a
stalled engine (health answers, no token comes back), then the engine's own log signatures, else
the start-up's time-out or crash (FALLBACK_CAUSES). tests/test_launch_seam.py fails when anything
else starts an engine.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol, runtime_checkable

from autotune.engines.base import Engine
from autotune.engines.signatures import ENGINE_STALLED, UNCLASSIFIED
from autotune.errors import EngineStartError
from autotune.gates.dominated import DominatedCheck, GatesSkipped
from autotune.launchers import open_server
from autotune.launchers.base import Launched, LaunchOptions
from autotune.models import (
    Candidate, FailureCause, FailureInfo, LaunchSpec, NeedleReport, QevalReport, TrialResult,
)
from autotune.trial.context import Events, TrialContext
from autotune.trial.liveness import stalled_failure


class Purpose(str, Enum):
    """Why a study launches a candidate."""

    TRIAL = "trial"  # one of the study's trials: its whole workload
    GATES = "gates relaunch"  # the deferred gates of the best by score (autotune.study.deferred)
    CLASS_ISOLATION = "class isolation"  # one failed value of a numerics class, on a class that passed
    CONFIRMATION = "confirmation"  # a round of the best against the baseline: the objective alone
    NOISE = "noise"  # the baseline again, for a launch-noise sample: the objective alone
    DRAFT_SCHEDULE = "draft schedule"  # the composed draft length per batch size, in one launch
    SMOKE = "smoke"  # start, one short completion, stop: isolating the knob behind a failure


def _silent(_: str) -> None:
    pass


@dataclass(frozen=True)
class GatesToRun:
    """What one launch does about its accuracy gates once its objective is measured: skip them
    (dominated, or deferred to the end of the study), reuse a numerics-neutral sibling's, or run
    the ones the space asks for."""

    skip: GatesSkipped | None = None
    reuse: TrialResult | None = None
    needle: bool = False
    qeval: bool = False

    def fields(self, needle: NeedleReport | None = None, qeval: QevalReport | None = None) -> dict[str, object]:
        """The result's accuracy fields, given the reports of the gates that ran."""
        if self.skip is not None:
            return {**self.skip.fields(), "needle": None, "qeval": None}
        if self.reuse is not None:
            return {"needle": self.reuse.needle, "qeval": self.reuse.qeval, "accuracy_from": self.reuse.number}
        return {"needle": needle if self.needle else None, "qeval": qeval if self.qeval else None}


@dataclass(frozen=True)
class LaunchRequest:
    """One launch a study asks for: `ctx` as this launch runs (its workload and gate policy already
    narrowed to its purpose), the candidate, and the trial whose records it belongs to (`number`)."""

    ctx: TrialContext
    candidate: Candidate
    number: int
    purpose: Purpose = Purpose.TRIAL
    log_name: str | None = None  # the log's name in the study's log folder (default trial-NNN)
    events: Events = field(default=_silent, compare=False)
    #: the rule that lets a trial skip its gates when its score cannot rank first (None: they run)
    dominated: DominatedCheck | None = field(default=None, compare=False)
    reuse: TrialResult | None = None  # a numerics-neutral sibling whose accuracy this launch takes

    @property
    def log_path(self) -> Path:
        return self.ctx.logs_dir / self.ctx.study / f"{self.log_name or f'trial-{self.number:03d}'}.log"

    @property
    def tag(self) -> str:
        """What the launcher names the launch's processes by (a smoke launch: its own name)."""
        if self.purpose is Purpose.SMOKE and self.log_name:
            return self.log_name
        return str(self.number)

    def gates(self, scored: Callable[[], tuple[float, float]]) -> GatesToRun:
        """What this launch does about its gates; `scored()` gives its (objective, score), asked only
        where a skip rule needs them."""
        if not self.ctx.gates.accuracy:
            return GatesToRun()
        skip = self.dominated(*scored()) if self.dominated is not None else None
        if skip is not None:
            return GatesToRun(skip=skip)
        if self.reuse is not None:
            return GatesToRun(reuse=self.reuse)
        gates = self.ctx.space.gates
        return GatesToRun(needle=gates.needle is not None, qeval=gates.qeval is not None)


@runtime_checkable
class Launch(Protocol):
    """How a study launches a candidate: `launch(request)` returns what came of it, a TrialResult
    of the request's study, number and candidate, `ok` with its objective and score (a smoke launch:
    `ok` when the engine answered, nothing measured), or `failed` with the failure (a launch that
    fails is data, never an exception), its gates as the request says (`LaunchRequest.gates`). It is called from the
    study's controller, or from a thread per trial when trials run side by side; `stop_all()`,
    from the controller while such threads run (Ctrl-C, an error of autotune itself), stops every
    engine it has up, so that each of those launches ends at once."""

    def __call__(self, request: LaunchRequest) -> TrialResult: ...

    def stop_all(self) -> None: ...


# ---------------------------------------------------------------------- the one failure path

#: the failures a launch ends with when its log names none, and what each blames
FALLBACK_CAUSES: dict[str, FailureCause] = {
    "startup_timeout": FailureCause.LIMITS,  # the start-up time-out: a slow start, not a broken value
    "serving_failed": FailureCause.LIMITS,  # the engine stayed up and a request failed: load, not a knob value
    "startup_crash": FailureCause.UNEXPLAINED,
    "crash_during_run": FailureCause.UNEXPLAINED,
}


def failure_from_log(engine: Engine, log_text: str, fallback_class: str, message: str) -> FailureInfo:
    """What the engine's log shows (its signatures), else `fallback_class` with the log's last lines."""
    found = engine.classify(log_text)
    if found is not None and found.failure_class == UNCLASSIFIED and fallback_class == "serving_failed":
        # a request handler's traceback while the server stays up: not an engine crash to isolate
        root = found.message.removeprefix(f"{UNCLASSIFIED}: ")
        return found.model_copy(update={
            "failure_class": fallback_class, "message": f"{fallback_class}: {root}", "evidence": [message, *found.evidence],
            "cause": FALLBACK_CAUSES[fallback_class],
        })
    if found is not None:
        return found
    last = [line for line in log_text.strip().splitlines() if line.strip()][-5:]
    return FailureInfo(failure_class=fallback_class, message=message, evidence=last, cause=FALLBACK_CAUSES[fallback_class])


def log_cause(engine: Engine, log_text: str) -> FailureInfo | None:
    """The root cause a stalled engine's log names (an NCCL liveness line), if any."""
    found = engine.classify(log_text)
    return None if found is None or found.failure_class in (UNCLASSIFIED, ENGINE_STALLED) else found


def note_in_log(log_path: Path, failure: FailureInfo) -> None:
    """autotune's evidence at the end of the launch's log, so the saved log shows (and
    `autotune probe --classify` names) what stopped it."""
    try:
        with log_path.open("a") as log:
            log.write("\n".join(failure.evidence) + "\n")
    except OSError:
        pass


def start_failure(engine: Engine, server: Launched, error: EngineStartError, log_path: Path) -> FailureInfo:
    """Why the engine did not come up: stopped by the memory watchdog, else what its log shows,
    else the time-out or the crash; an engine whose health answered while no token came back is
    `engine_stalled` (with the root cause its log names)."""
    fallback = "startup_timeout" if error.timed_out else "startup_crash"
    failure = server.memory_failure() or failure_from_log(engine, error.log_tail, fallback, str(error))
    if error.stalled and failure.failure_class in ("startup_timeout", UNCLASSIFIED, "nccl_liveness"):
        failure = stalled_failure([str(error), *error.evidence], log_cause(engine, error.log_tail), "at start-up")
        note_in_log(log_path, failure)
    elif error.timed_out and failure.failure_class != "startup_timeout":
        failure = failure.model_copy(update={"message": f"{error} — log shows: {failure.message}"})
    return failure


def serving_failure(engine: Engine, server: Launched, message: str, log: str) -> FailureInfo:
    """Why a request to an engine that came up failed (`log`: its log now): stopped by the memory
    watchdog, else what its log shows, else `serving_failed` (it is still up: load, not a knob
    value) or `crash_during_run`."""
    alive = server.alive()
    return server.memory_failure() or failure_from_log(
        engine, log, "serving_failed" if alive else "crash_during_run", message)


def stalled_while_serving(engine: Engine, log: str, log_path: Path, evidence: list[str]) -> FailureInfo:
    """An engine that stopped generating while its health endpoint answers (trial/liveness.py;
    `log`: its log now)."""
    failure = stalled_failure(evidence, log_cause(engine, log), "while measuring")
    note_in_log(log_path, failure)
    return failure


class StartFailed(Exception):
    """The engine did not come up; `failure` says why, read the one way (`start_failure`)."""

    def __init__(self, failure: FailureInfo, error: EngineStartError) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.log_tail = error.log_tail
        self.timed_out = error.timed_out
        self.error = error


@contextlib.contextmanager
def engine_up(
    engine: Engine, launch: LaunchSpec, log_path: Path, launcher: str = "process",
    options: LaunchOptions = LaunchOptions(), spawn_lock: threading.Lock | None = None,
) -> Iterator[Launched]:
    """Start `launch` with the launcher named `launcher` (told `options`: the boxes, whose launch it
    is, how long to wait), its log in a fresh `log_path`, and hold it while the engine serves; stop
    it on leaving. An engine that does not come up raises StartFailed. `spawn_lock`: held while the
    processes are spawned (launches started from several threads)."""
    if log_path.exists():
        log_path.unlink()
    server = open_server(launch, log_path, launcher=launcher, cluster=options.cluster, study=options.study,
                         trial=options.trial, startup_timeout_s=options.startup_timeout_s, limits=options.limits)
    try:
        with spawn_lock or contextlib.nullcontext():
            server.start()
        server.wait_ready()
    except EngineStartError as exc:
        server.stop_after_failed_start()
        raise StartFailed(start_failure(engine, server, exc, log_path), exc) from exc
    except BaseException:
        server.stop_after_failed_start()
        raise
    try:
        yield server
    finally:
        server.stop()
