"""Accuracy that steers the search (autotune.gates.numerics): a stand-in engine whose 4-bit-K candidates
are the fastest and fail qeval. Before, with gates at the end, every one of them was launched and
deferred its gates, and the study learned they fail only at the end, walking down the ranking; now
the first of them that would lead runs its gates at once, its numerics class is learned as failed,
and the class's other candidates are never launched. The study, store, gates and sampler are real;
the launches are stand-ins."""

from __future__ import annotations

import pytest

from autotune.models import Candidate, NeedleCase, NeedleReport, QevalReport, TrialResult
from stand_in import StandIn, stand_in_plan

SPACE = """name: classes
engine: llamacpp
model: {{name: m, path: {model}, context_max: 2048}}
knobs:
  - {{name: type_k, values: [f16, q4_0], default: f16}}
  - {{name: n_threads, values: [1, 2], default: 1, numerics_class: false}}
  - {{name: draft_k, values: [0, 4], default: 0, numerics_class: false}}
gates:
  needle: {{lengths_tokens: [512], depths: [0.5]}}
  qeval: {{tasks: 20}}
"""
TASKS = [f"t-{i:03d}" for i in range(20)]


def speed(candidate: Candidate) -> float:
    p = candidate.params
    return 10.0 * (1.6 if p["type_k"] == "q4_0" else 1.0) * (1.2 if p["n_threads"] == 2 else 1.0) \
        * (1.3 if p["draft_k"] == 4 else 1.0)


def qeval_of(candidate: Candidate) -> QevalReport:
    right = 4 if candidate.params["type_k"] == "q4_0" else 12  # q4_0 K loses 8 of the 12 tasks f16 gets
    results = {t: i < right for i, t in enumerate(TASKS)}
    return QevalReport(results=results, correct=right, total=len(TASKS), per_category={"t": [right, len(TASKS)]})


NEEDLE = NeedleReport(cases=[NeedleCase(length_tokens=512, prompt_tokens=530, depth=0.5, passed=True, expected="48213", answer="48213")], max_pass_length=512)


class Engine(StandIn):
    """A stand-in launch: numbers by the candidate, gates as the request asks (`launched`: every
    launch's trial number and knob values; `gated`: the trials whose gates ran in their own launch)."""

    def __init__(self) -> None:
        super().__init__(lambda request: speed(request.candidate), needle=lambda request: NEEDLE,
                         qeval=lambda request: qeval_of(request.candidate), duration_s=30.0)

    @property
    def launched(self) -> list[tuple[int, dict]]:
        return [(r.number, dict(r.candidate.params)) for r in self.requests]

    @property
    def gated(self) -> list[int]:
        return [t.number for t in self.results if t.status == "ok" and (t.needle or t.qeval) and t.accuracy_from is None]


def _study(tmp_path, trials: int = 8):
    pytest.importorskip("llama_cpp")
    from autotune.study import deferred
    from autotune.commands import search
    from autotune.store import Store

    engine = Engine()
    plan = stand_in_plan(tmp_path, SPACE, accuracy=True)
    assert plan.ctx.engine.gates_at_end  # llama.cpp's default: a faster trial defers its gates
    outcome = search.run(plan, trials=trials, confirm_rounds=0, noise_relaunches=0, launch=engine)
    return outcome, engine, Store(tmp_path / "runs.db"), deferred


def test_a_failing_numerics_class_is_gated_early_learned_and_never_launched_again(tmp_path):
    outcome, engine, store, _ = _study(tmp_path)
    q4 = [n for n, p in engine.launched if p["type_k"] == "q4_0"]
    # before: all four q4_0 candidates were launched (each deferring its gates), then relaunched to
    # fail one by one at the end; now the first one that leads is gated in its own launch
    assert len(q4) == 1, engine.launched
    assert q4[0] in engine.gated
    [failure] = store.accuracy_failures("s")
    assert failure.knob_values == {"type_k": "q4_0"} and failure.gates == ["qeval"] and failure.trial == q4[0]
    assert failure.differs_from and failure.differs_from.startswith("type_k=q4_0")
    skipped = [t for t in outcome.trials if t.status == "skipped" and "numerics class type_k=q4_0" in (t.reason or "")]
    assert skipped  # proposed by the sampler, skipped without a launch, told to Optuna as pruned
    assert outcome.best is not None and outcome.best.candidate.params["type_k"] == "f16"
    assert outcome.best.feasible


def test_a_deferred_trial_of_a_class_that_failed_later_is_never_the_best_nor_relaunched(tmp_path):
    """A q4_0 trial measured (gates deferred) before its class failed elsewhere fails the class
    gate: it cannot rank, and the walk at the end never relaunches it."""
    from autotune.models import AccuracyFailure, GateOutcome
    from autotune.gates.numerics import GATE, class_gate
    from autotune.models import Gates

    failure = AccuracyFailure(study="s", trial=3, knob_values={"type_k": "q4_0"}, gates=["qeval"],
                              evidence=["qeval: 8 worse"])
    deferred_trial = TrialResult(study="s", number=5, candidate=Candidate(engine="llamacpp", params={
        "type_k": "q4_0", "n_threads": 2, "draft_k": 4}), status="ok", objective=25.0, score=25.0, deferred="later")
    unchecked = [GateOutcome(gate=g, status="unchecked", detail="deferred") for g in ("needle", "qeval")]
    gate = class_gate(deferred_trial, unchecked, Gates(), [failure])
    assert gate is not None and gate.gate == GATE and gate.status == "fail" and "trial 3" in gate.detail
    passed = [GateOutcome(gate=g, status="pass", detail="own") for g in ("needle", "qeval")]
    assert class_gate(deferred_trial, passed, Gates(), [failure]) is None  # its own evidence stands
    other = deferred_trial.model_copy(update={"candidate": Candidate(engine="llamacpp", params={"type_k": "f16"})})
    assert class_gate(other, unchecked, Gates(), [failure]) is None
    from autotune.study.deferred import pending

    assert not pending(deferred_trial.model_copy(update={"gates": [*unchecked, gate]}))
    assert pending(deferred_trial.model_copy(update={"gates": unchecked}))


def test_show_the_report_and_the_recipe_name_the_failed_classes_and_the_launches_saved(tmp_path, capsys):
    from rich.console import Console

    from autotune.output.html import verdict_section
    from autotune.output.terminal import print_best

    outcome, _, store, _ = _study(tmp_path)
    [summary] = outcome.failed_classes()
    assert summary.failure.knob_values == {"type_k": "q4_0"} and summary.launches_saved >= 1
    console = Console(record=True, width=200)
    print_best(console, outcome)
    shown = console.export_text()
    assert "failed accuracy" in shown and "type_k=q4_0" in shown and "launch(es) saved" in shown
    assert "type_k=q4_0" in verdict_section(outcome)
    from autotune.output.verdict import compose

    verdict = compose(outcome, outcome.best)
    assert [f.failure.knob_values for f in verdict.accuracy_failures] == [{"type_k": "q4_0"}]
    assert summary.launches_saved <= 3  # the q4_0 candidates left after the first: each counted once


SPACE_KV = """name: classes-kv
engine: llamacpp
model: {{name: m, path: {model}, context_max: 2048}}
knobs:
  - {{name: type_k, values: [f16, q4_0], default: f16}}
  - {{name: type_v, values: [f16, q8_0], default: f16}}
  - {{name: n_threads, values: [1, 2], default: 1, numerics_class: false}}
  - {{name: draft_k, values: [0, 4], default: 0, numerics_class: false}}
gates:
  needle: {{lengths_tokens: [512], depths: [0.5]}}
  qeval: {{tasks: 20}}
"""


class KvEngine(Engine):
    """q4_0 K loses qeval whatever the V type; q8_0 V alone is fine and a little faster."""

    def __init__(self) -> None:
        super().__init__()
        self.value = lambda request: speed(request.candidate) * (1.1 if request.candidate.params["type_v"] == "q8_0" else 1.0)


def test_a_failed_class_two_values_apart_is_isolated_to_the_value_that_fails_alone(tmp_path):
    """The first 4-bit-K trial also has q8_0 V, two values apart from the baseline's class: one
    launch of the baseline with q4_0 K alone fails qeval too, so type_k=q4_0 is what is learned, and
    no q4_0 K + f16 V candidate is launched as a trial. Before: the class stayed {q4_0, q8_0} and
    the q4_0 K + f16 V class was launched (and failed) in a trial of its own."""
    pytest.importorskip("llama_cpp")
    from autotune.commands import search
    from autotune.store import Store

    engine = KvEngine()
    plan = stand_in_plan(tmp_path, SPACE_KV, accuracy=True,
                         tries=["type_k=q4_0,type_v=q8_0,n_threads=1,draft_k=0"])
    outcome = search.run(plan, trials=12, confirm_rounds=0, noise_relaunches=0, launch=engine)
    store = Store(tmp_path / "runs.db")
    [failure] = store.accuracy_failures("s")
    assert failure.knob_values == {"type_k": "q4_0"}, failure
    iso = failure.isolation
    assert iso is not None and iso.launches == 1 and iso.full_class == {"type_k": "q4_0", "type_v": "q8_0"}
    assert iso.attempts[0].values == {"type_k": "q4_0"} and iso.attempts[0].failed and iso.nearest_trial == 0
    trials_q4 = [t for t in outcome.trials if t.status == "ok" and t.candidate.params["type_k"] == "q4_0"]
    assert [t.candidate.params["type_v"] for t in trials_q4] == ["q8_0"], trials_q4
    from autotune.trial.launch import Purpose

    isolation_launches = engine.of(Purpose.CLASS_ISOLATION)
    assert len(isolation_launches) == 1
    skipped = [t for t in outcome.trials if t.status == "skipped" and "type_k=q4_0" in (t.reason or "")]
    assert any(t.candidate.params["type_v"] == "f16" for t in skipped) or len(outcome.trials) < 12
    assert outcome.best is not None and outcome.best.candidate.params["type_k"] == "f16" and outcome.best.feasible
    [summary] = outcome.failed_classes()
    assert "isolated: type_k=q4_0 fails alone (against trial 0; 1 launch" in summary.describe()


def test_isolation_spends_no_launch_where_a_trial_already_judged_the_reduced_class(tmp_path):
    from autotune.models import GateOutcome, Gates, SearchSpace
    from autotune.gates.numerics import judged_by_trial, nearest_passed, widen, worth_isolating

    def trial(number, k, v, status):
        gates = [GateOutcome(gate=g, status=status, detail=g) for g in ("needle", "qeval")]
        return TrialResult(study="s", number=number, candidate=Candidate(engine="llamacpp", params={"type_k": k, "type_v": v}),
                           status="ok", objective=1.0, score=1.0, gates=gates, needle=NEEDLE)

    space = SearchSpace.model_validate({
        "name": "s", "engine": "llamacpp", "model": {"name": "m", "path": "m.gguf", "context_max": 2048},
        "knobs": [{"name": "type_k", "values": ["f16", "q4_0"], "default": "f16"},
                  {"name": "type_v", "values": ["f16", "q8_0"], "default": "f16"}],
        "gates": Gates(needle={"lengths_tokens": [512], "depths": [0.5]}, qeval={"tasks": 20}).model_dump()})
    trials = [trial(0, "f16", "f16", "pass"), trial(1, "q4_0", "q8_0", "fail"), trial(2, "q4_0", "f16", "pass")]
    gates = ["qeval"]
    passed, differing = nearest_passed(space, {"type_k": "q4_0", "type_v": "q8_0"}, gates, trials)
    assert passed.number == 2 and differing == {"type_v": "q8_0"}  # one value apart: nothing to isolate
    assert worth_isolating(space, differing, []) == []
    attempt = judged_by_trial(space, {"type_k": "q4_0", "type_v": "f16"}, gates, trials)
    assert attempt is not None and attempt.trial == 2 and not attempt.failed
    # a passed trial that holds the isolated value widens it back to what it does not hold
    assert widen(space, {"type_k": "q4_0"}, {"type_k": "q4_0", "type_v": "q8_0"}, gates, trials) == (
        {"type_k": "q4_0", "type_v": "q8_0"}, [2])
