"""Several trials in flight: launches run in threads, each on the boxes it leased; one controller.
Where every launch of a study runs (`Boxes`): a trial's, and each relaunch's.

The Tuner (autotune/study/tuner.py) stays the only writer of runs.db and the only one that talks
to Optuna: it asks for a candidate, leases its boxes (autotune/study/leases.py), records the
attempt with those boxes, and hands the launch to a thread here. A launch thread does nothing but
the launch (start the engine, measure it, stop it) and gives its boxes back when it ends, so a box
is free again before the controller reads the result. With one trial in flight and no pool the
launch runs in the controller's own thread, as it always did.

Several controllers on one study would need a database server: runs.db is one SQLite file with a
single writer, and the study lock (autotune/study/lock.py) refuses a second controller.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import optuna

from autotune.models import Candidate, Cluster, TrialResult
from autotune.study.forecast import fmt_duration
from autotune.study.leases import BoxPool, Lease, boxes_label
from autotune.trial.context import TrialContext
from autotune.trial.launch import Launch, LaunchRequest


@dataclass
class Flight:
    """One trial in flight: its Optuna trial, candidate, boxes and where it has got to."""

    trial: optuna.Trial
    candidate: Candidate
    ctx: TrialContext
    boxes: tuple[int, ...] = ()
    wait_needle: bool = False
    stage: str = "before the engine started"
    started: float = field(default_factory=time.monotonic)

    @property
    def number(self) -> int:
        return self.trial.number

    def describe(self) -> str:
        where = f"{boxes_label(self.boxes)}: " if self.boxes else ""
        return f"{where}trial {self.number} ({self.candidate.label()})"


def in_flight_text(flights: list[Flight], eta_s: float | None = None) -> str:
    """The progress line of the trials in flight, per box, and the ETA at this parallelism."""
    text = "in flight: " + " · ".join(f.describe() for f in sorted(flights, key=lambda f: f.boxes))
    return text + (f"; trials ETA {fmt_duration(eta_s)}" if eta_s is not None else "")


@dataclass(frozen=True)
class Boxes:
    """Where a study's launches run: `count` boxes leased from `pool` for each launch (the boxes its
    layout needs), the nodes of `cluster` where the pool came from a cluster file (None: stand-in
    boxes on this host). Without a pool every launch takes the boxes of one launch in turn: no
    lease, no box recorded."""

    pool: BoxPool | None = None
    count: int = 1
    cluster: Cluster | None = None

    def lease(self) -> Lease | None:
        return self.pool.lease(self.count) if self.pool is not None else None

    def on(self, ctx: TrialContext, lease: Lease | None) -> TrialContext:
        """The context of a launch on `lease`: the leased boxes' nodes as its cluster where the pool
        came from a cluster file; stand-in boxes on this host keep the context as it is."""
        if lease is None or self.cluster is None:
            return ctx
        nodes = [self.cluster.nodes[i] for i in lease.boxes]
        return ctx.model_copy(update={"cluster": self.cluster.model_copy(update={"nodes": nodes})})

    @contextlib.contextmanager
    def leased(self, ctx: TrialContext) -> Iterator[tuple[TrialContext, tuple[int, ...]]]:
        """Hold boxes for one or more launches (a relaunch, an isolation launch, a confirmation's
        rounds), then give them back: `ctx` on them, and which they are."""
        lease = self.lease()
        try:
            yield self.on(ctx, lease), lease.boxes if lease else ()
        finally:
            if lease is not None and self.pool is not None:
                self.pool.release(lease)

    def launch(self, launch: Launch, request: LaunchRequest) -> TrialResult:
        """`request` launched on boxes held for it alone; the result names the boxes it ran on."""
        with self.leased(request.ctx) as (ctx, held):
            result = launch(dataclasses.replace(request, ctx=ctx))
        return result.model_copy(update={"boxes": list(held)}) if held else result


class Launches:
    """At most `slots` launches at once in threads; `submit` runs `launch` and then frees `lease`."""

    def __init__(self, slots: int, pool: BoxPool | None) -> None:
        self.slots = slots
        self.pool = pool
        self.executor = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="trial") if slots > 1 else None
        self.running: dict[Future[TrialResult], Flight] = {}

    def full(self) -> bool:
        return len(self.running) >= self.slots

    def flights(self) -> list[Flight]:
        return list(self.running.values())

    def submit(self, flight: Flight, lease: Lease | None, launch: Callable[[], TrialResult]) -> None:
        def run() -> TrialResult:
            try:
                return launch()
            finally:
                if lease is not None and self.pool is not None:
                    self.pool.release(lease)

        if self.executor is None:  # one in flight: in this thread, exceptions raised here as before
            future: Future[TrialResult] = Future()
            self.running[future] = flight
            future.set_result(run())
            return
        self.running[self.executor.submit(run)] = flight

    def next_done(self) -> list[tuple[Flight, Future[TrialResult]]]:
        """Wait until at least one launch ended; those that did, in trial order, out of the running."""
        done, _ = wait(list(self.running), return_when=FIRST_COMPLETED)
        out = sorted(((self.running.pop(f), f) for f in done), key=lambda x: x[0].number)
        return out

    def stop(self, stop_engines: Callable[[], None], poll_s: float = 0.5) -> None:
        """Stop the launches in flight (Ctrl-C, an error of the controller) and wait until each
        thread ended: its engine stopped, its launch then ends on its own. Engines are stopped again
        each `poll_s` while threads run: one that had leased its boxes but not started its engine
        at the first stop starts it after."""
        if self.executor is None:  # the launch ran in this thread: it is over already
            return
        pending = set(self.running)
        while pending:
            stop_engines()
            _, pending = wait(pending, timeout=poll_s)

    def close(self, wait_s: bool = True) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=wait_s, cancel_futures=True)
