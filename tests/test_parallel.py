"""Trials side by side (issue 35): one controller, K trials in flight, each on boxes leased from a
real local Ray cluster (one raylet per box), so no two trials ever share a box.

These tests use stand-in launches (a launch that sleeps and reports a number) on a real Ray pool:
the scheduling, the records and the learning are under test, not the engine. The real engine,
llama.cpp + Gemma 3 270M, runs side by side in tests/test_parallel_engine.py.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import datetime

import pytest

from autotune.errors import ConfigError
from autotune.models import Candidate, FailureInfo, TrialResult
from autotune.study.leases import BoxPool, check_parallel, parallel_default
from stand_in import Timed, stand_in_plan, tiny_llamacpp_space

SPACE = (
    "name: tiny\nengine: llamacpp\nmodel: {{name: m, path: {model}}}\n"
    "knobs:\n  - {{name: n_threads, values: [1, 2, 3, 4], default: 1}}\n"
    "  - {{name: flash_attn, values: [false, true], default: false}}\n"
)


@pytest.fixture(scope="module")
def pool3():
    """Three boxes: three Ray nodes on this host, each carrying its box resource."""
    pytest.importorskip("ray")
    with BoxPool.local(3) as pool:
        yield pool


def interval(t: TrialResult) -> tuple[float, float]:
    start = datetime.fromisoformat(t.started_at).timestamp()
    return start, start + t.duration_s


def overlaps(a: TrialResult, b: TrialResult) -> bool:
    (a0, a1), (b0, b1) = interval(a), interval(b)
    return a0 < b1 and b0 < a1


def plan_of(tmp_path, tries: list[str] | None = None):
    pytest.importorskip("llama_cpp")
    return stand_in_plan(tmp_path, SPACE, accuracy=False, tries=tries)


def tuner(plan, launch, trials: int, pool: BoxPool | None, parallel: int):
    from autotune.study.parallel import Boxes
    from autotune.study.reporter import SilentReporter
    from autotune.study.tuner import Tuner

    return Tuner(plan.ctx, plan.store, plan.pruner, "h", trials=trials, reporter=SilentReporter(), launch=launch,
                 first=plan.first, boxes=Boxes(pool), parallel=parallel)


def test_the_default_is_as_many_in_flight_as_the_boxes_allow() -> None:
    assert parallel_default(4, 1) == 4 and parallel_default(4, 2) == 2 and parallel_default(4, 4) == 1
    assert parallel_default(3, 2) == 1 and parallel_default(1, 1) == 1
    check_parallel(2, 4, 2)
    with pytest.raises(ConfigError, match="each trial needs 2 box"):
        check_parallel(3, 4, 2)


def test_a_lease_of_a_box_in_use_waits_and_boxes_are_never_shared(pool3) -> None:
    first = pool3.lease(2)
    assert len(set(first.boxes)) == 2
    with pytest.raises(TimeoutError):
        pool3.lease(2, timeout_s=1.0)  # one box free: a two-box lease waits
    second = pool3.lease(1)
    assert set(second.boxes).isdisjoint(first.boxes)
    pool3.release(first)
    third = pool3.lease(2, timeout_s=30.0)
    assert set(third.boxes).isdisjoint(second.boxes)
    pool3.release(second)
    pool3.release(third)
    assert pool3.held() == []


def test_two_trials_run_at_once_on_different_boxes(tmp_path, pool3) -> None:
    launch = Timed(lambda c: 1.5)
    outcome = tuner(plan_of(tmp_path), launch, trials=4, pool=pool3, parallel=2).run()
    ran = [t for t in outcome.trials if t.status == "ok"]
    assert len(ran) == 4 and launch.most == 2
    assert all(len(t.boxes) == 1 for t in ran)
    pairs = [(a, b) for i, a in enumerate(ran) for b in ran[i + 1:] if overlaps(a, b)]
    assert pairs, "no two trials overlapped in time"
    for a, b in pairs:  # whatever ran at the same time ran on different boxes
        assert set(a.boxes).isdisjoint(b.boxes), (a.number, a.boxes, b.number, b.boxes)
    samples = list(outcome_store(tmp_path).db["launch_samples"].rows)
    assert {s["trial"]: s["boxes"] for s in samples} == {t.number: str(t.boxes[0]) for t in ran}
    assert pool3.held() == []


def outcome_store(tmp_path):
    from autotune.store import Store

    return Store(tmp_path / "runs.db")


def test_in_flight_proposals_are_not_proposed_again(tmp_path, pool3) -> None:
    """Constant liar, and an in-flight candidate asked again waits for its result: no candidate
    runs twice, and the study ends when the space is used up (8 candidates, 12 asked for)."""
    launch = Timed(lambda c: 0.3)
    outcome = tuner(plan_of(tmp_path), launch, trials=12, pool=pool3, parallel=3).run()
    ran = [t.candidate.key() for t in outcome.trials if t.status == "ok"]
    assert len(ran) == len(set(ran)) == 8 and outcome.exhausted
    assert launch.most >= 2


def test_one_in_flight_runs_the_study_as_before(tmp_path) -> None:
    """K=1 and no pool: the sequence of trials that one-at-a-time studies have always run, pinned
    from the code before trials ran side by side (seed 0, the stand-in's objective)."""
    launch = Timed(lambda c: 0.0)
    outcome = tuner(plan_of(tmp_path), launch, trials=5, pool=None, parallel=1).run()
    seen = [(t.number, t.status, t.candidate.params["n_threads"], t.candidate.params["flash_attn"], t.boxes)
            for t in outcome.trials]
    assert seen == PINNED_ONE_AT_A_TIME, seen
    assert launch.most == 1


#: `test_one_in_flight_runs_the_study_as_before` run on main at f6e6add, before this change
PINNED_ONE_AT_A_TIME: list = [(0, 'ok', 1, False, []), (1, 'ok', 2, True, []), (3, 'ok', 3, False, []),
                              (4, 'ok', 1, True, []), (5, 'ok', 4, False, [])]


def flash_attn_fails(candidate: Candidate) -> FailureInfo | None:
    if candidate.params["flash_attn"]:
        return FailureInfo(failure_class="flash_attn_unsupported", message="flash_attn_unsupported: no FA here",
                           implicates=["flash_attn"], evidence=["no FA here"])
    return None


def test_a_learned_failure_cancels_queued_candidates_not_running_ones(tmp_path, pool3) -> None:
    """Three in flight: the baseline (slow), then two flash_attn candidates. The first fails fast and
    teaches flash_attn=true: the second, already running, runs to its own end; the third, queued,
    is skipped without a launch."""
    plan = plan_of(tmp_path, tries=["flash_attn=true,n_threads=2", "flash_attn=true,n_threads=3",
                                    "flash_attn=true,n_threads=4"])
    speeds = {1: 3.0, 2: 0.5, 3: 2.0, 4: 0.5}
    launch = Timed(lambda c: speeds[int(c.params["n_threads"])] if c.params["flash_attn"] or c.params["n_threads"] == 1
                   else 0.2, flash_attn_fails)
    outcome = tuner(plan, launch, trials=4, pool=pool3, parallel=3).run()
    by_threads = {(t.candidate.params["n_threads"], t.candidate.params["flash_attn"]): t for t in outcome.trials}
    assert by_threads[(2, True)].status == "failed"
    running = by_threads[(3, True)]
    assert running.status == "failed" and running.failure is not None  # launched, not cancelled
    assert overlaps(running, by_threads[(2, True)])
    queued = by_threads[(4, True)]
    assert queued.status == "skipped" and queued.reason.startswith("learned: flash_attn=True failed"), queued.reason
    assert by_threads[(1, False)].status == "ok"


def test_the_forecast_prices_the_trials_in_waves_of_k() -> None:
    from autotune.study.forecast import RunForecast

    plan = RunForecast(study="s", candidates_total=9, candidates_left=9, measured=0, trials=5, confirm_rounds=1,
                       trial_s=10.0, relaunch_s=4.0, basis="measured", gated=3, gates_s=6.0)
    alone = 10.0 * 5 + 2 * 4.0 + 6.0 * 3
    assert plan.total_s == alone and plan.wall_s == alone  # one in flight: the wall time is the sum
    two = plan.model_copy(update={"parallel": 2})
    # 5 trials in 3 waves, the gates of 3 in 2, the confirmation's 2 relaunches one at a time
    assert two.wall_s == 10.0 * 3 + 6.0 * 2 + 2 * 4.0
    assert plan.model_copy(update={"parallel": 8}).wall_s == 10.0 + 6.0 + 2 * 4.0


def test_boxes_set_the_default_in_flight_and_refuse_more(tmp_path) -> None:
    """--boxes 3 of one-box trials: 3 in flight by default, 4 refused before anything starts. (A
    layout of every box, --nodes 4 with no --boxes, runs one at a time without a pool: the dry run
    of tests/test_space_from_config.py.)"""
    pytest.importorskip("llama_cpp")
    from autotune.commands.setup import prepare

    space = tiny_llamacpp_space(tmp_path, SPACE)
    plan = prepare(space_name=str(space), model_path=None, db_path=tmp_path / "runs.db", study="s", hardware="cpu",
                   nodes=1, accuracy=False, logs_dir=tmp_path, boxes=3)
    assert (plan.boxes, plan.parallel) == (3, 3)
    with pytest.raises(ConfigError, match="--parallel 4"):
        prepare(space_name=str(space), model_path=None, db_path=tmp_path / "runs.db", study="s", hardware="cpu",
                nodes=1, accuracy=False, logs_dir=tmp_path, boxes=3, parallel=4)


class LateEngines:
    """A Launch whose "engine" runs until stopped (at most `run_s`): trial 1's launch
    interrupts the controller (a real SIGINT to this process) soon after it begins, then takes `late_s`
    before its engine starts, so the controller's first stop finds only trial 0's engine."""

    def __init__(self, late_s: float = 1.5, run_s: float = 30.0) -> None:
        self.late_s, self.run_s = late_s, run_s
        self.lock = threading.Lock()
        self.up: dict[int, threading.Event] = {}
        self.ran_s: dict[int, float] = {}

    def stop_all(self) -> None:
        with self.lock:
            for stopped in self.up.values():
                stopped.set()

    def __call__(self, request) -> TrialResult:
        number = request.number
        if number == 1:
            time.sleep(0.5)  # the controller waits for a launch to end by now
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(self.late_s)
        stopped = threading.Event()
        with self.lock:
            self.up[number] = stopped
        t0 = time.monotonic()
        stopped.wait(self.run_s)
        self.ran_s[number] = time.monotonic() - t0
        return TrialResult(study=request.ctx.study, number=number, candidate=request.candidate, status="failed",
                           reason="stopped", duration_s=self.ran_s[number])


def test_ctrl_c_stops_an_engine_that_starts_after_the_first_stop(tmp_path, pool3) -> None:
    """A launch thread that had leased its box but not started its engine when Ctrl-C landed
    starts it afterwards: the controller stops engines again until every launch thread ended, so
    the study ends at once, not after that engine's whole trial; both attempts are `interrupted`."""
    engines = LateEngines()
    plan = plan_of(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        tuner(plan, engines, trials=2, pool=pool3, parallel=2).run()
    assert time.monotonic() - t0 < 10.0, engines.ran_s
    assert sorted(engines.ran_s) == [0, 1] and max(engines.ran_s.values()) < 5.0, engines.ran_s
    trials = outcome_store(tmp_path).trials("s")
    assert [t.status for t in trials] == ["interrupted", "interrupted"], [(t.status, t.reason) for t in trials]
    assert outcome_store(tmp_path).open_attempts("s") == [] and pool3.held() == []
