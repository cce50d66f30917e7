"""A study run in sittings reaches its verdict: confirmation rounds accumulate over resumes, a round
is priced from what a relaunch repeats (not a whole trial), and a round of another best is never
mixed in. The launches are stand-ins (a Launch that starts nothing); the store, the budget, the
judgement and the resume logic are the real ones."""

from __future__ import annotations

import pytest

from autotune.models import TrialResult
from stand_in import StandIn, stand_in_plan

SPACE = (
    "name: tiny\nengine: llamacpp\nmodel: {{name: m, path: {model}}}\n"
    "knobs:\n  - {{name: n_threads, values: [1, 2, 3], default: 1}}\n"
    "gates: {{needle: null, qeval: null}}\n"
)
#: decode tok/s per n_threads; relaunches move by ±1 % (by round and arm), so the launch noise is not zero
SPEED = {1: 10.0, 2: 20.0, 3: 30.0}
#: a long trial (prefill and concurrency waves, a cold first compile) whose decode is short
TRIAL_PHASES = {"start": 60.0, "warm-up": 5.0, "decode": 20.0, "prefill": 500.0, "concurrency": 400.0, "teardown": 5.0}
#: a relaunch measures decode alone: start, warm-up, decode, teardown
RELAUNCH_PHASES = {"start": 50.0, "warm-up": 5.0, "decode": 20.0, "teardown": 5.0}


class Clock:
    """The study's wall clock: a stand-in launch moves it by the seconds that launch would take."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sitting(StandIn):
    """One `autotune search` of the study 's' with stand-in launches, on a shared runs.db: each
    launch moves the study's clock by its phases."""

    def __init__(self, tmp_path, best_threads: int = 2) -> None:
        pytest.importorskip("llama_cpp")
        super().__init__(self._value, phases=self._phases)
        self.tmp_path = tmp_path
        self.allowed = {1, best_threads}
        self.clock = Clock()

    @property
    def relaunches(self) -> list[str]:
        from autotune.trial.launch import Purpose

        return [r.log_name for r in self.of(Purpose.CONFIRMATION, Purpose.NOISE)]

    def _value(self, request) -> float:
        from autotune.trial.launch import Purpose

        threads = request.candidate.params["n_threads"]
        if request.purpose is Purpose.TRIAL:
            return SPEED[threads] if threads in self.allowed else 1.0
        round_ = int(request.log_name.split("-")[1].removeprefix("r"))  # confirm-r<round>-trial-<number>
        return SPEED[threads] * (1 + 0.01 * (-1) ** (round_ + request.number))

    def _phases(self, request) -> dict[str, float]:
        from autotune.trial.launch import Purpose

        phases = TRIAL_PHASES if request.purpose is Purpose.TRIAL else RELAUNCH_PHASES
        self.clock.now += sum(phases.values())
        return dict(phases)

    def __call__(self, request) -> TrialResult:
        result = super().__call__(request)
        return result.model_copy(update={"started_at": f"2026-12-03T00:00:{request.number:02d}+00:00"})

    def run(self, *, trials: int, confirm_rounds: int, budget_s: float | None, tries: tuple[str, ...] = ("n_threads=2",)):
        from autotune.commands import search
        from autotune.store import Store

        plan = stand_in_plan(self.tmp_path, SPACE, accuracy=False, tries=list(tries))
        outcome = search.run(plan, trials=trials, confirm_rounds=confirm_rounds, noise_relaunches=0,
                             time_budget_s=budget_s, launch=self, clock=self.clock)
        return outcome, Store(self.tmp_path / "runs.db")


def test_rounds_cut_by_the_time_budget_accumulate_over_resumes_into_a_verdict(tmp_path):
    # two trials take 2 x 990 s; 2,200 s leave ~220 s: one round of two ~80 s relaunches, not two
    first = Sitting(tmp_path)
    outcome, store = first.run(trials=2, confirm_rounds=2, budget_s=2200.0)
    assert len(first.relaunches) == 2
    assert outcome.confirmation.status == "not confirmed" and outcome.confirmation.rounds == 1
    assert "1 of 2 rounds so far" in outcome.stopped
    # the resume has no trial left to run: it runs the missing round and judges both
    second = Sitting(tmp_path)
    outcome, store = second.run(trials=2, confirm_rounds=2, budget_s=600.0)
    assert second.relaunches == ["confirm-r2-trial-000", "confirm-r2-trial-001"]
    c = outcome.confirmation
    assert c.status == "winner", c.verdict  # before: "not confirmed: 1 vs 1 launches", noise 0
    assert c.rounds == 2 and c.rounds_now == 1 and len(c.launches) == 4
    assert len(c.best_samples) == 2 and len(c.baseline_samples) == 2
    assert c.noise > 0 and c.noise_df >= 2
    assert "1 of them in earlier sittings" in c.verdict
    # the row names the launches it judged, which runs.db holds with their rounds
    judged = store.confirmation_launches("s", c.best_trial, c.baseline_trial)
    assert [x.id for x in judged] == c.launches
    assert [(x.round, x.trial) for x in judged] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    # a third sitting has nothing missing: it launches nothing and keeps the verdict
    third = Sitting(tmp_path)
    outcome, _ = third.run(trials=2, confirm_rounds=2, budget_s=None)
    assert third.relaunches == [] and outcome.confirmation.status == "winner"


def test_a_round_that_fits_is_run_when_trials_are_long_and_decode_is_short(tmp_path):
    # each trial took 990 s, of which a relaunch repeats start, warm-up, decode and teardown (90 s)
    sitting = Sitting(tmp_path)
    outcome, _ = sitting.run(trials=2, confirm_rounds=2, budget_s=2 * 990.0 + 2 * 2 * 95.0)
    assert len(sitting.relaunches) == 4  # before: priced at 2 x 990 s a round, skipped
    assert outcome.confirmation.rounds == 2


def test_a_round_whose_best_changed_is_not_mixed_in(tmp_path):
    first = Sitting(tmp_path, best_threads=2)
    outcome, _ = first.run(trials=2, confirm_rounds=1, budget_s=None)
    assert outcome.confirmation.best_trial == 1 and outcome.confirmation.rounds == 1
    # the resume measures a faster candidate: its pair starts from round 1
    second = Sitting(tmp_path, best_threads=3)
    outcome, store = second.run(trials=3, confirm_rounds=2, budget_s=None, tries=("n_threads=3",))
    c = outcome.confirmation
    assert c.best_trial == 2 and c.rounds == 2 and c.rounds_now == 2 and len(c.launches) == 4
    assert all(x.best_trial == 2 for x in store.confirmation_launches("s", 2, 0))
    assert len(c.baseline_samples) == 2  # the earlier pair's baseline launch is not counted


def test_the_verdict_pools_its_launches_once(tmp_path):
    """The host's stored noise, the prior, holds earlier sittings' confirmation launches too: the
    verdict's df counts each launch once (its own samples, plus the prior without them)."""
    first = Sitting(tmp_path)
    first.run(trials=2, confirm_rounds=1, budget_s=None)
    second = Sitting(tmp_path)
    outcome, _ = second.run(trials=2, confirm_rounds=2, budget_s=None)
    # 4 launches in 2 groups: df 2; the trials' own launches (one per config) add no df
    assert outcome.confirmation.noise_df == 2


def test_an_old_runs_db_keeps_its_confirmation_rounds(tmp_path):
    """Rounds stored before confirmation launches had a table of their own are read back from the
    launch samples (each round relaunched the baseline, then the best)."""
    import sqlite_utils

    from autotune.models import Confirmation
    from autotune.store import MIGRATIONS, Store

    path = tmp_path / "runs.db"
    old = sqlite_utils.Database(path)
    MIGRATIONS.apply(old, stop_before="m006_confirmation_launches")
    rows = [(0, 10.0), (1, 20.0), (0, 10.1), (0, 9.9), (5, 30.0)]  # round 2's best failed; then another pair
    for trial, value in rows:
        old["launch_samples"].insert({"host_key": "h", "engine": "llamacpp", "study": "s", "candidate_key": f"k{trial}",
                                      "objective": value, "source": "confirm", "trial": trial, "measured_at": "x",
                                      "metric": "decode_tps_geomean"})
    old["launch_samples"].insert({"host_key": "h", "engine": "llamacpp", "study": "s", "candidate_key": "k0",
                                  "objective": 10.0, "source": "trial", "trial": 0, "measured_at": "x",
                                  "metric": "decode_tps_geomean"})
    verdict = Confirmation(study="s", best_trial=5, baseline_trial=0, rounds=1, best_samples=[30.0],
                           baseline_samples=[9.9], ratio=3.0, noise=0.0, winner=False, verdict="not confirmed")
    old["confirmations"].insert({"study": "s", "confirmed_at": "x", "result": verdict.model_dump_json()})
    old.conn.close()
    store = Store(path)
    assert [(x.round, x.trial, x.objective) for x in store.confirmation_launches("s", 1, 0)] == [(1, 0, 10.0), (1, 1, 20.0)]
    assert [(x.round, x.trial, x.objective) for x in store.confirmation_launches("s", 5, 0)] == [(1, 0, 9.9), (1, 5, 30.0)]
    assert store.confirmation("s") == verdict  # a verdict written before the new fields still loads
