"""A failure every candidate shares stops the study: the baseline failed, and a candidate with
other knob values failed the same way, so the cause is in what all candidates share (model,
engine, workload), not in a knob. Seen on the H200: gpt-oss's chat path failed three launches in a
row with the same KeyError (docs/measurements.md)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autotune.models import Candidate, FailureInfo, TrialResult
from autotune.trial.run import TrialContext
from stand_in import tiny_llamacpp_space

SPACE = (
    "name: tiny\nengine: llamacpp\nmodel: {{name: m, path: {model}}}\n"
    "knobs:\n  - {{name: n_threads, values: [1, 2, 3, 4], default: 1}}\n"
    "  - {{name: flash_attn, values: [false, true], default: false}}\n"
)


def _tuner(tmp_path, launch: Callable[..., TrialResult], trials: int):
    pytest.importorskip("llama_cpp")
    from autotune.commands.setup import prepare
    from autotune.study.tuner import SilentReporter, Tuner

    space = tiny_llamacpp_space(tmp_path, SPACE)
    plan = prepare(space_name=str(space), model_path=None, db_path=tmp_path / "runs.db", study="s", hardware="cpu",
                   nodes=1, accuracy=False, logs_dir=tmp_path)
    return Tuner(plan.ctx, plan.store, plan.pruner, "h", trials=trials, reporter=SilentReporter(), launch=launch)


def _failing(message: str) -> Callable[..., TrialResult]:
    def launch(ctx: TrialContext, candidate: Candidate, number: int, events, dominated=None, reuse=None) -> TrialResult:
        failure = FailureInfo(failure_class="serving_failed", message=f"serving_failed: {message}")
        return TrialResult(study=ctx.study, number=number, candidate=candidate, status="failed",
                           reason=failure.message, failure=failure, duration_s=1.0)
    return launch


def test_the_same_failure_in_the_baseline_and_another_candidate_stops_the_study(tmp_path) -> None:
    outcome = _tuner(tmp_path, _failing("HTTP 500: KeyError: '<|end|>'"), trials=5).run()
    launched = [t for t in outcome.trials if t.status == "failed"]
    assert len(launched) == 2 and launched[0].number == 0
    assert outcome.stopped is not None
    assert "KeyError: '<|end|>'" in outcome.stopped and "not a knob" in outcome.stopped
    assert "trial 0" in outcome.stopped and f"trial {launched[1].number}" in outcome.stopped


def test_different_failures_do_not_stop_the_study(tmp_path) -> None:
    count = iter(range(100))

    def launch(ctx, candidate, number, events, dominated=None, reuse=None) -> TrialResult:
        return _failing(f"error {next(count)}")(ctx, candidate, number, events)

    outcome = _tuner(tmp_path, launch, trials=4).run()
    assert sum(t.status == "failed" for t in outcome.trials) == 4 and outcome.stopped is None
