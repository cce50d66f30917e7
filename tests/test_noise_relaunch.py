"""The baseline's noise relaunch tops up what the confirmation does not already give: when the
study confirms its winner, the confirmation's interleaved rounds relaunch the baseline anyway, and
each of those launches is a launch-noise sample of it. A separate noise relaunch before them would
only repeat one (on the CPU default: the slowest launch of the study, ~126 s)."""

from __future__ import annotations

import pytest

from stand_in import TINY_LLAMACPP, StandIn, stand_in_plan

SPACE = TINY_LLAMACPP + "gates: {{needle: null, qeval: null}}\n"


def _run(tmp_path, confirm_rounds: int, noise_relaunches: int) -> tuple[list[str], list[str]]:
    """Sources of the baseline's launch samples after a 2-trial study with stand-in launches, and
    the log names of its relaunches."""
    pytest.importorskip("llama_cpp")
    from autotune.commands import search
    from autotune.store import Store
    from autotune.trial.launch import Purpose

    launch = StandIn(lambda request: 10.0 if request.candidate.params["n_threads"] == 1 else 20.0)
    plan = stand_in_plan(tmp_path, SPACE, accuracy=False)
    search.run(plan, trials=2, confirm_rounds=confirm_rounds, noise_relaunches=noise_relaunches, launch=launch)
    store = Store(tmp_path / "runs.db")
    base = next(t for t in store.trials("s") if t.number == 0)
    rows = store.db["launch_samples"].rows_where("study = ? and candidate_key = ?", ["s", base.candidate.key()])
    relaunches = [r.log_name for r in launch.of(Purpose.CONFIRMATION, Purpose.NOISE)]
    return [row["source"] for row in rows], relaunches


def test_a_confirmed_study_makes_no_separate_noise_relaunch(tmp_path):
    sources, relaunches = _run(tmp_path, confirm_rounds=2, noise_relaunches=1)
    assert sorted(sources) == ["confirm", "confirm", "trial"]  # before: a "noise" launch as well
    assert not any(name.startswith("noise") for name in relaunches)
    assert len(relaunches) == 4  # two rounds, two arms


def test_without_confirmation_the_baseline_is_still_relaunched_for_noise(tmp_path):
    sources, relaunches = _run(tmp_path, confirm_rounds=0, noise_relaunches=1)
    assert sorted(sources) == ["noise", "trial"]
    assert [name.split("-")[0] for name in relaunches] == ["noise"]


def test_noise_relaunches_beyond_the_confirmation_rounds_still_run(tmp_path):
    sources, _ = _run(tmp_path, confirm_rounds=1, noise_relaunches=3)
    assert sorted(sources) == ["confirm", "noise", "noise", "trial"]  # 3 + 1 launches of the baseline
