"""A failure every candidate shares stops the study: the baseline failed, and a candidate with
other knob values failed the same way, so the cause is in what all candidates share (model,
engine, workload), not in a knob. Seen on the H200: gpt-oss's chat path failed three launches in a
row with the same KeyError (docs/measurements.md)."""

from __future__ import annotations

import pytest

from autotune.models import Candidate, FailureInfo
from stand_in import StandIn, tiny_llamacpp_space

SPACE = (
    "name: tiny\nengine: llamacpp\nmodel: {{name: m, path: {model}}}\n"
    "knobs:\n  - {{name: n_threads, values: [1, 2, 3, 4], default: 1}}\n"
    "  - {{name: flash_attn, values: [false, true], default: false}}\n"
)


def _tuner(tmp_path, launch: StandIn, trials: int):
    pytest.importorskip("llama_cpp")
    from autotune.commands.setup import prepare
    from autotune.study.reporter import SilentReporter
    from autotune.study.tuner import Tuner

    space = tiny_llamacpp_space(tmp_path, SPACE)
    plan = prepare(space_name=str(space), model_path=None, db_path=tmp_path / "runs.db", study="s", hardware="cpu",
                   nodes=1, accuracy=False, logs_dir=tmp_path)
    return Tuner(plan.ctx, plan.store, plan.pruner, "h", trials=trials, reporter=SilentReporter(), launch=launch)


def _serving_failed(message: str) -> FailureInfo:
    return FailureInfo(failure_class="serving_failed", message=f"serving_failed: {message}")


def _failing(message: str) -> StandIn:
    return StandIn(fails=lambda request: _serving_failed(message))


def test_the_same_failure_in_the_baseline_and_another_candidate_stops_the_study(tmp_path) -> None:
    outcome = _tuner(tmp_path, _failing("HTTP 500: KeyError: '<|end|>'"), trials=5).run()
    launched = [t for t in outcome.trials if t.status == "environment"]  # kept as history, retried on resume
    assert len(launched) == 2 and launched[0].number == 0
    assert outcome.stopped is not None and outcome.environment is not None
    assert "KeyError: '<|end|>'" in outcome.stopped and "no knob explains" in outcome.stopped
    assert f"trials 0, {launched[1].number}" in outcome.stopped


def test_different_failures_do_not_stop_the_study(tmp_path) -> None:
    count = iter(range(100))
    launch = StandIn(fails=lambda request: _serving_failed(f"error {next(count)}"))
    outcome = _tuner(tmp_path, launch, trials=4).run()
    assert sum(t.status == "failed" for t in outcome.trials) == 4 and outcome.stopped is None


# ---------------------------------------------------------------- issue 47: an environment failure, then a resume

CRASH = "engine exited with code -11 before the engine became healthy"


def _crashing() -> StandIn:
    return StandIn(fails=lambda request: FailureInfo(failure_class="startup_crash", message=CRASH,
                                                     evidence=["Segmentation fault"]),
                   phases=lambda request: {"start": 2.0})


def _healthy_value(request) -> float:
    return 10.0 + request.candidate.params.get("n_threads", 1)


def _healthy() -> StandIn:
    return StandIn(_healthy_value, phases=lambda request: {"start": 5.0, "decode": 55.0})


def _launched(launch: StandIn) -> list[Candidate]:
    return [r.candidate for r in launch.requests]


def test_a_resume_after_an_environment_failure_starts_clean(tmp_path) -> None:
    """Issue 47, on an Intel host with AMX: a native llama.cpp build segfaulted at every start, the
    study stopped on the shared cause, the portable build was installed, and the resumed study kept
    the two failed starts as measured: the baseline never ran again, every later trial's qeval was
    unchecked (no reference), and the study stopped early again on the first sitting's failures."""
    first = _tuner(tmp_path, _crashing(), trials=4).run()
    assert first.environment is not None, first.stopped
    assert first.environment.trials[0] == 0 and CRASH in first.environment.describe()
    crashed = [t for t in first.trials if t.status == "environment"]
    assert [t.number for t in crashed][:1] == [0] and len(crashed) == 2  # kept as history, not as measured

    healthy = _healthy()
    second = _tuner(tmp_path, healthy, trials=4).run()
    launched = _launched(healthy)
    assert launched[0].params == {"n_threads": 1, "flash_attn": False}  # the baseline first
    assert second.stopped is None and second.environment is None  # the stale failures stop nothing
    assert second.baseline is not None and second.baseline.status == "ok"
    assert len(launched) == 4  # four launches measured in this sitting: the failed starts did not count
    assert sum(t.status == "ok" for t in second.trials) == 4


def test_a_trial_failing_on_its_own_after_an_environment_failure_is_still_learned(tmp_path) -> None:
    _tuner(tmp_path, _crashing(), trials=4).run()

    def flash_fails(request) -> FailureInfo | None:
        if request.candidate.params.get("flash_attn"):
            return FailureInfo(failure_class="serving_failed", message="serving_failed: HTTP 500 flash")
        return None

    launch = StandIn(_healthy_value, fails=flash_fails, phases=lambda request: {"start": 5.0, "decode": 55.0})
    outcome = _tuner(tmp_path, launch, trials=4).run()
    assert outcome.environment is None and outcome.baseline is not None and outcome.baseline.status == "ok"


def test_a_failure_its_signature_blames_on_the_environment_stops_the_study_at_once(tmp_path) -> None:
    """Issue 50 with 47: NCCL, a missing package or the driver teach no knob value; the study says
    so and stops, and the same command retries that candidate once the environment is fixed."""
    from autotune.models import FailureCause

    def nccl_fails(request) -> FailureInfo | None:
        if request.number == 0:
            return None
        return FailureInfo(failure_class="nccl_timeout", cause=FailureCause.ENVIRONMENT, fix="check NCCL_SOCKET_IFNAME",
                           message="nccl_timeout: Watchdog caught collective operation timeout",
                           evidence=["[Rank 0] Watchdog caught collective operation timeout"])

    launch = StandIn(_healthy_value, fails=nccl_fails,
                     phases=lambda request: {"start": 30.0} if request.number else {"start": 5.0, "decode": 55.0})
    outcome = _tuner(tmp_path, launch, trials=4).run()
    assert [t.status for t in outcome.trials] == ["ok", "environment"]
    assert outcome.environment is not None and outcome.environment.trials == [1]
    assert "environment, not a knob (nccl_timeout)" in outcome.environment.describe()
    assert "check NCCL_SOCKET_IFNAME" in outcome.environment.describe()

    healthy = _healthy()
    again = _tuner(tmp_path, healthy, trials=4).run()
    launched = _launched(healthy)
    assert launched[0] == outcome.trials[1].candidate  # the environment's trial first
    assert again.environment is None and sum(t.status == "ok" for t in again.trials) == 4
