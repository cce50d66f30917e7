"""Gates at the end (autotune.study.deferred), replayed over the tiny committed table of real launches
(tests/data/replay-tiny.json): a trial faster than the incumbent defers its needle and qeval; at
the end only the head of the ranking is relaunched to run them, walking down when they fail. The
pick must be the one gating every trial makes, with fewer gate runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from autotune.models import GatePolicy
from autotune.store import Store

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "replay-tiny.json"


def _trials(workdir: Path, budget: int, strategy: str = "grid"):
    return Store(workdir / f"{strategy}-0-{budget}.db").trials(f"replay-{strategy}-0-{budget}")


def _table(sq, data: dict):
    table = sq.Table(data)
    table.launched_failure_implicates()
    return table


def test_only_the_reference_and_the_final_best_run_their_gates_and_the_pick_is_gating_every_trial_s(sq, tmp_path):
    table = _table(sq, json.loads(TINY.read_text()))
    budget = len(table.grid)
    every = sq.replay_one(table, "grid", 0, budget, tmp_path / "every", gates=GatePolicy.EVERY_TRIAL)
    at_once = sq.replay_one(table, "grid", 0, budget, tmp_path / "once", gates=GatePolicy.AT_ONCE)
    at_end = sq.replay_one(table, "grid", 0, budget, tmp_path / "end", gates=GatePolicy.AT_END)
    assert at_end.pick == at_once.pick == every.pick
    assert at_end.launches == every.launches  # the relaunch is not one of the study's trials
    trials = _trials(tmp_path / "end", budget)
    relaunched = [t for t in trials if t.accuracy_relaunched]
    assert at_end.relaunches == len(relaunched) >= 1
    assert at_end.gated == 1 + len(relaunched) < at_once.gated  # the reference's qeval, then the head only
    # the qeval reference runs qeval at once (every later qeval compares with it); its needle waits
    # like any trial's gates: it runs only if the reference is the head at the end
    assert trials[0].qeval is not None and trials[0].needle is None and trials[0].deferred
    assert {g.gate: g.status for g in trials[0].gates if g.gate in ("needle", "qeval")} == {
        "needle": "unchecked", "qeval": "pass"}
    best = next(t for t in trials if t.candidate.label() == at_end.pick)
    assert best.accuracy_relaunched and best.deferred is None and best.feasible
    assert all("measured in a relaunch" in g.detail for g in best.gates if g.gate in ("needle", "qeval"))
    still = [t for t in trials if t.deferred]  # deferred, then overtaken: never gated, never a pass
    assert still and all(t.needle is None and not t.feasible for t in still)
    # the relaunch is a launch of the best's config: one more launch-noise sample of it
    samples = Store(tmp_path / "end" / f"grid-0-{budget}.db").launch_samples_of(f"replay-grid-0-{budget}", best.candidate)
    assert len(samples) == 2


def test_a_head_that_fails_its_deferred_gates_hands_the_pick_down_the_ranking(sq, tmp_path):
    """The best by score answers the needle wrong in its relaunch: its gates fail there, the next
    trial by score is relaunched, and the pick is again the one gating every trial makes."""
    data = json.loads(TINY.read_text())
    table = _table(sq, data)
    budget = len(table.grid)
    first = sq.replay_one(table, "grid", 0, budget, tmp_path / "first", gates=GatePolicy.AT_END)
    top = next(e for e in data["candidates"] if sq.Candidate.model_validate(
        {"engine": table.space.engine, "params": e["params"], "env": e["env"]}).label() == first.pick)
    broken = copy.deepcopy(data)
    needle = broken["accuracy"][top["numerics_class"]]["needle"]
    for case in needle["cases"]:
        case["passed"] = False
    worse = _table(sq, broken)
    every = sq.replay_one(worse, "grid", 0, budget, tmp_path / "every", gates=GatePolicy.EVERY_TRIAL)
    at_end = sq.replay_one(worse, "grid", 0, budget, tmp_path / "end", gates=GatePolicy.AT_END)
    assert every.pick != first.pick and at_end.pick == every.pick
    trials = _trials(tmp_path / "end", budget)
    failed = [t for t in trials if t.accuracy_relaunched and any(g.status == "fail" for g in t.gates)]
    assert failed and at_end.relaunches >= 2


def test_engines_choose_by_what_a_relaunch_costs():
    from autotune.engines import get_engine

    assert get_engine("llamacpp").gates_at_end is True  # a relaunch takes ~2 s
    assert get_engine("vllm").gates_at_end is False  # a launch takes minutes


POLICIES = [
    ("llamacpp-gemma3-270m", [], GatePolicy.AT_END),  # llama.cpp's default: a relaunch takes seconds
    ("vllm-gemma3-270m", [], GatePolicy.AT_ONCE),  # vLLM's: a launch takes minutes
    ("vllm-gemma3-270m", ["--gates", "at-end"], GatePolicy.AT_END),
    ("llamacpp-gemma3-270m", ["--gates", "at-once"], GatePolicy.AT_ONCE),
    ("llamacpp-gemma3-270m", ["--gates", "every-trial"], GatePolicy.EVERY_TRIAL),
    ("llamacpp-gemma3-270m", ["--gates", "off"], GatePolicy.NO_ACCURACY),
    ("vllm-gemma3-270m", ["--no-accuracy"], GatePolicy.NO_ACCURACY),
    ("vllm-gemma3-270m", ["--no-accuracy", "--gates", "off"], GatePolicy.NO_ACCURACY),
]


@pytest.mark.parametrize(("space", "flags", "policy"), POLICIES)
def test_the_gate_policy_is_one_value_resolved_from_the_flags_and_the_engine_default(space, flags, policy, monkeypatch,
                                                                                       capsys):
    """`search --gates` (or `--no-accuracy`) and the engine's default become one GatePolicy in the plan,
    which the Tuner, the trial and the forecast read."""
    from autotune.cli import main
    from autotune.commands import setup

    made = []
    real = setup.prepare
    monkeypatch.setattr(setup, "prepare", lambda **kw: made.append(real(**kw)) or made[-1])
    assert main(["search", "--space", space, "--dry-run", *flags]) == 0
    capsys.readouterr()
    assert [p.ctx.gates for p in made] == [policy]


def test_contradictory_gate_options_are_refused(capsys):
    """Issue 51: three flags made one decision, and some of their combinations contradicted each
    other (--no-accuracy with --gate-every-trial ran no gates, silently)."""
    from autotune.cli import main

    assert main(["search", "--dry-run", "--no-accuracy", "--gates", "at-end"]) == 2
    assert "--no-accuracy runs no gates, --gates at-end runs them" in capsys.readouterr().err


def test_a_deferred_trial_says_so_in_the_progress_line_and_its_verdict():
    from autotune.study.deferred import DEFERRED
    from autotune.models import Candidate, GateOutcome, Measurement, TrialResult
    from autotune.gates.score import constraint_values, verdict

    gates = [GateOutcome(gate=g, status="unchecked", detail=f"deferred: {DEFERRED}") for g in ("needle", "qeval")]
    trial = TrialResult(study="s", number=3, candidate=Candidate(engine="llamacpp", params={"n_threads": 2}),
                        status="ok", objective=40.0, score=39.0, deferred=DEFERRED, gates=gates,
                        measurements=[Measurement.of("decode_tps.prose", "tok/s", "c", [40.0], 0)])
    assert verdict(trial).startswith("gates deferred, not run")
    assert constraint_values(trial) == {"needle": 0.0, "qeval": 0.0}  # unknown, not failed
    assert not trial.feasible  # never a pass


def test_the_time_budget_stops_the_walk_before_a_relaunch_and_says_which_trial_was_left():
    from autotune.study.deferred import DEFERRED, gate_the_head
    from autotune.models import Candidate, GateOutcome, TrialResult

    unchecked = [GateOutcome(gate="needle", status="unchecked", detail="deferred")]
    head = TrialResult(study="s", number=4, candidate=Candidate(engine="llamacpp", params={"n_threads": 2}),
                       status="ok", objective=40.0, score=39.0, deferred=DEFERRED, gates=unchecked)
    relaunched: list[int] = []
    why = gate_the_head(lambda: [head], lambda t, logs: relaunched.append(t.number) or t, lambda m, r: None,
                        lambda: "time budget: 30 s left, a gates relaunch takes ~260 s here", Path("/nonexistent"))
    assert relaunched == [] and why is not None
    assert "did not run" in why and "trial 4" in why and "time budget" in why


def test_a_reference_still_at_the_head_is_relaunched_for_its_needle(sq, tmp_path):
    """Nothing beat the baseline: it is the pick only once its deferred needle ran and passed, in a
    relaunch at the end; until then it is unchecked, never a pass."""
    table = _table(sq, json.loads(TINY.read_text()))
    alone = sq.replay_one(table, "grid", 0, 1, tmp_path / "alone", gates=GatePolicy.AT_END)
    [base] = _trials(tmp_path / "alone", 1)
    assert base.number == 0 and alone.relaunches == 1
    assert base.accuracy_relaunched and base.needle is not None and base.deferred is None and base.feasible
    assert alone.pick == base.candidate.label()


def test_with_numerics_neutral_knobs_the_reference_runs_its_needle_at_once_to_lend_it(sq, tmp_path):
    """A sibling that differs from the reference only in neutral knobs reuses its needle and qeval
    for free; a deferred needle could not be lent, so there the reference measures both at once."""
    data = json.loads(TINY.read_text())
    for knob in data["space"]["knobs"]:
        if knob["name"] == "n_threads":
            knob["numerics_neutral"] = True
    table = _table(sq, data)
    sq.replay_one(table, "grid", 0, len(table.grid), tmp_path / "neutral", gates=GatePolicy.AT_END)
    reference = _trials(tmp_path / "neutral", len(table.grid))[0]
    assert reference.needle is not None and reference.qeval is not None and not reference.deferred


def test_the_gates_relaunch_is_a_noise_sample_of_the_boxes_it_ran_on(sq, tmp_path):
    """Issue 51: in a study with a box pool the gates relaunch of the head stored its launch sample
    with no boxes (the lease was dropped at the end of its `with`), so it joined the noise group of
    launches on no box in particular instead of its own boxes'."""
    pytest.importorskip("ray")
    from autotune.study.leases import BoxPool

    table = _table(sq, json.loads(TINY.read_text()))
    budget = len(table.grid)
    with BoxPool.local(2) as pool:
        sq.replay_one(table, "grid", 0, budget, tmp_path / "pooled", gates=GatePolicy.AT_END, pool=pool)
    rows = list(Store(tmp_path / "pooled" / f"grid-0-{budget}.db").db["launch_samples"].rows)
    relaunches = [r for r in rows if r["source"] == "gates relaunch"]
    assert relaunches and all(r["boxes"] for r in relaunches), relaunches
    assert all(r["boxes"] for r in rows if r["source"] == "trial")
