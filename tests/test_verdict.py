"""The verdict fails closed: launch-to-launch noise judges ratios, missing evidence is never a pass,
every candidate takes the same needle test, a failed request fails the trial, probe pruning needs
evidence, and the recipe carries the verdict. Each test was written against the code before the fix.
"""

from __future__ import annotations

import asyncio
import math
import sys
from typing import Any

import pytest
import yaml

from autotune.bench import throughput
from autotune.bench.qeval import qeval_gate
from autotune.verdict.confirmation import judge
from autotune.models import (
    Candidate,
    Confirmation,
    GateOutcome,
    Gates,
    LaunchSpec,
    Measurement,
    NeedleCase,
    NeedleReport,
    NodeLaunch,
    ProbeResult,
    QevalReport,
    RequestResult,
    TrialResult,
    Workload,
)
from autotune.verdict.noise import LaunchNoise, NoiseKey, pooled
from autotune.gates.score import evaluate_gates, rank, verdict
from autotune.space.candidates import load_space, make_candidate, needle_check, needle_lengths, probes_check


def _trial(number: int, objective: float, *, needle: bool | None = True, qeval: dict[str, bool] | None = None,
           started_at: str = "2026-11-30T10:00:00+00:00", **params: Any) -> TrialResult:
    launch = LaunchSpec(engine="llamacpp", nodes=[NodeLaunch(argv=[sys.executable, "-m", "llama_cpp.server"])], port=8123)
    report = None
    if needle is not None:
        report = NeedleReport(cases=[NeedleCase(length_tokens=512, prompt_tokens=520, depth=0.5, passed=needle,
                                                expected="12345", answer="12345" if needle else "")])
    q = None
    if qeval is not None:
        q = QevalReport(results=qeval, correct=sum(qeval.values()), total=len(qeval), per_category={})
    return TrialResult(
        study="s", number=number, candidate=Candidate(engine="llamacpp", params=params or {"n_threads": number}),
        status="ok", launch=launch, objective=objective, score=objective, needle=report, qeval=q,
        measurements=[Measurement.of("decode_tps.prose", "tok/s", "decode", [objective, objective])],
        started_at=started_at,
    )


ALL_RIGHT = {f"t{i}": True for i in range(20)}


# ---------------------------------------------------------------- noise across launches


def test_one_confirmation_round_judges_nothing():
    # before: judge([120], [100]) called a 20 % gap a winner with zero noise
    result = judge([120.0], [100.0], prior=None, alpha=0.01)
    assert not result.winner and result.why.startswith("not confirmed")


def test_gap_inside_launch_noise_is_no_winner():
    # passes inside a launch agree, but this host's launches of one config move by ~15 %
    prior = LaunchNoise(sigma=0.15, df=6, groups=3, launches=9)
    result = judge([112.0, 110.0], [100.0, 101.0], prior=prior, alpha=0.01)
    assert not result.winner and "inside the noise" in result.why


def test_gap_far_beyond_noise_is_a_winner():
    prior = LaunchNoise(sigma=0.05, df=6, groups=3, launches=9)
    result = judge([220.0, 215.0, 225.0], [100.0, 98.0, 103.0], prior=prior, alpha=0.01)
    assert result.winner and result.ratio == pytest.approx(2.2, rel=0.02)


def test_pooled_noise_ignores_differences_between_configs():
    noise = pooled([[100.0, 100.0], [50.0, 50.0], [10.0]])
    assert noise is not None and noise.sigma == 0.0 and noise.df == 2
    spread = pooled([[100.0, 110.0]])
    assert spread is not None and spread.sigma == pytest.approx(abs(math.log(1.1)) / math.sqrt(2), rel=1e-6)
    assert pooled([[100.0]]) is None


# ---------------------------------------------------------------- missing evidence is never a pass


def test_qeval_without_reference_is_unchecked_not_a_pass():
    baseline = _trial(0, 100.0, qeval=None)  # trial 0 ran without qeval (failed, --no-accuracy, ...)
    candidate = _trial(1, 150.0, qeval={k: False for k in ALL_RIGHT})  # 0 of 20
    gates = evaluate_gates(candidate, baseline, Gates())
    qeval = next(g for g in gates if g.gate == "qeval")
    assert qeval.status == "unchecked" and not qeval.passed
    assert rank([candidate.model_copy(update={"gates": gates})]) == []


def test_trial_without_accuracy_data_cannot_rank_best():
    baseline = _trial(0, 100.0, qeval=ALL_RIGHT)
    bare = _trial(1, 300.0, needle=None, qeval=None)
    gates = evaluate_gates(bare, baseline, Gates())
    assert {g.gate: g.status for g in gates} == {"needle": "unchecked", "qeval": "unchecked"}
    assert verdict(bare.model_copy(update={"gates": gates})).startswith("unchecked")


def test_missing_slo_measurement_is_unchecked():
    t = _trial(1, 10.0, needle=None)
    [gate] = evaluate_gates(t, None, Gates(needle=None, qeval=None, tpot_ms_max=5.0))
    assert gate.status == "unchecked"


def test_throughput_only_study_has_no_accuracy_gates():
    t = _trial(1, 10.0, needle=None)
    assert evaluate_gates(t, None, Gates(), accuracy=False) == []


def test_old_gate_rows_still_load():
    assert GateOutcome.model_validate({"gate": "needle", "passed": True, "detail": "x"}).status == "pass"
    assert GateOutcome.model_validate({"gate": "needle", "passed": False, "detail": "x"}).status == "fail"


# ---------------------------------------------------------------- qeval: one-sided test plus a margin


def test_qeval_margin_fails_a_loss_that_is_not_significant():
    base = {f"t{i}": i < 60 for i in range(75)}
    cand = dict(base, t0=False, t1=False, t2=False, t3=False)  # loses 4, gains none: two-sided p = 0.125
    gate = qeval_gate(QevalReport(results=cand, correct=56, total=75, per_category={}),
                      QevalReport(results=base, correct=60, total=75, per_category={}), alpha=0.05, margin_tasks=3)
    assert not gate.passed and "margin" in gate.detail
    ok = qeval_gate(QevalReport(results=cand, correct=56, total=75, per_category={}),
                    QevalReport(results=base, correct=60, total=75, per_category={}), alpha=0.05, margin_tasks=4)
    assert ok.passed


def test_qeval_one_sided_test_is_stricter_than_two_sided():
    base = {f"t{i}": True for i in range(75)}
    cand = {k: i >= 6 for i, k in enumerate(base)}  # 6 worse, 0 better: two-sided p=0.031, one-sided 0.016
    gate = qeval_gate(QevalReport(results=cand, correct=69, total=75, per_category={}),
                      QevalReport(results=base, correct=75, total=75, per_category={}), alpha=0.02, margin_tasks=10)
    assert not gate.passed and "p=0.016" in gate.detail


# ---------------------------------------------------------------- one needle test for every candidate


def test_needle_lengths_are_fixed_per_study():
    space = load_space("llamacpp-gemma3-270m")
    short = make_candidate(space, {**space.baseline_params(), "n_ctx": 2048})
    long = make_candidate(space, {**space.baseline_params(), "n_ctx": 4096})
    lengths = needle_lengths(space)
    assert lengths and lengths == sorted(lengths)
    check = needle_check(space, accuracy=True)
    assert check(short) is None and check(long) is None  # the default space tests every candidate alike


def test_candidate_whose_context_cannot_hold_the_needle_is_refused_with_numbers():
    space = load_space("llamacpp-gemma3-270m")
    needle = space.gates.needle.model_copy(update={"lengths_tokens": [3000]})
    space = space.model_copy(update={"gates": space.gates.model_copy(update={"needle": needle})})
    check = needle_check(space, accuracy=True)
    short = make_candidate(space, {**space.baseline_params(), "n_ctx": 2048})
    long = make_candidate(space, {**space.baseline_params(), "n_ctx": 4096})
    reason = check(short)
    assert reason is not None and "3000" in reason and "2048" in reason
    assert check(long) is None
    assert needle_check(space, accuracy=False)(short) is None


# ---------------------------------------------------------------- a failed request fails the trial


class FlakyClient:
    """Answers every third request with a server error (a stand-in for the engine's HTTP side)."""

    def __init__(self) -> None:
        self.calls = 0

    async def chat(self, messages: Any, max_tokens: int, **extra: Any) -> RequestResult:
        self.calls += 1
        if self.calls % 3 == 0:
            return RequestResult(ok=False, error="HTTP 500: internal error")
        return RequestResult(ok=True, t_send=0.0, t_first=0.01, t_last=0.11, n_out=11, n_chunks=11)


def test_a_failed_request_in_decode_fails_the_measurement():
    workload = Workload(prompts_per_set=3, repeats=3, decode_max_tokens=16)
    with pytest.raises(throughput.MeasurementFailed, match=r"3 of 9 requests failed.*HTTP 500"):
        asyncio.run(throughput.measure_decode(FlakyClient(), "prose", workload))


def test_a_tolerated_error_rate_lets_the_measurement_stand():
    workload = Workload(prompts_per_set=3, repeats=3, decode_max_tokens=16, tolerated_error_rate=0.5)
    [decode, *_] = asyncio.run(throughput.measure_decode(FlakyClient(), "prose", workload))
    assert decode.failed_requests == 3


# ---------------------------------------------------------------- prune only on evidence


def test_probe_timeout_oom_or_unclassified_never_prunes():
    space = load_space("vllm-gemma3-270m")
    candidate = make_candidate(space, {**space.baseline_params(), "kv_cache_dtype": "fp8"})
    for signature in ("startup_timeout", "oom", "unclassified_crash", None):
        probe = ProbeResult(feature="launch:kv=fp8", status="fails", signature=signature,
                            params={"kv_cache_dtype": "fp8"})
        assert probes_check([probe])(candidate) is None, signature
    evidence = ProbeResult(feature="launch:kv=fp8", status="fails", signature="kv_dtype_unsupported",
                           params={"kv_cache_dtype": "fp8"})
    assert probes_check([evidence])(candidate) is not None


# ---------------------------------------------------------------- the recipe carries the verdict


def _store_with(tmp_path, confirmation: Confirmation | None, accuracy: bool = True):
    from autotune.store import Store

    space = load_space("llamacpp-gemma3-270m")
    store = Store(tmp_path / "runs.db")
    store.save_study("s", space, "cpu", 1, "host", accuracy=accuracy)
    base = _trial(0, 100.0, qeval=ALL_RIGHT, **space.baseline_params())
    best = _trial(1, 150.0, qeval=ALL_RIGHT, started_at="2026-11-30T11:11:11+00:00",
                  **{**space.baseline_params(), "n_threads": 2})
    if not accuracy:
        base = base.model_copy(update={"needle": None, "qeval": None})
        best = best.model_copy(update={"needle": None, "qeval": None})
    for t in (base, best):
        store.save_trial(t.model_copy(update={"gates": evaluate_gates(t, base, space.gates, accuracy=accuracy)}))
    if confirmation:
        store.save_confirmation(confirmation)
    return store


def _export(capsys, store) -> tuple[dict[str, Any], str]:
    from autotune.cli import main

    capsys.readouterr()
    assert main(["export", "--db", str(store.path), "--study", "s", "-o", str(store.path.parent / "r.yaml")]) == 0
    return yaml.safe_load((store.path.parent / "r.yaml").read_text()), capsys.readouterr().err


def test_export_after_no_winner_labels_the_recipe(tmp_path, capsys):
    no_winner = Confirmation(study="s", best_trial=1, baseline_trial=0, rounds=2, best_samples=[110.0, 104.0],
                             baseline_samples=[100.0, 108.0], ratio=1.02, noise=0.08, winner=False,
                             verdict="no winner: x1.02 is inside the noise")
    data, err = _export(capsys, _store_with(tmp_path, no_winner))
    assert data["verdict"]["status"] == "no winner"
    assert data["verdict"]["objective"] == "decode tok/s, 1 stream, geometric mean of prose and structured"
    assert data["verdict"]["confirmation"]["baseline_samples"] == [100.0, 108.0]
    assert data["provenance"]["date"] == "2026-11-30T11:11:11+00:00"  # when it was measured, not exported
    assert "not a confirmed winner (no winner)" in err


def test_export_without_confirmation_says_not_confirmed(tmp_path, capsys):
    data, err = _export(capsys, _store_with(tmp_path, None))
    assert data["verdict"]["status"] == "not confirmed" and data["verdict"]["accuracy"] == "pass"
    assert "not confirmed" in err


def test_no_accuracy_study_exports_accuracy_unchecked(tmp_path, capsys):
    data, err = _export(capsys, _store_with(tmp_path, None, accuracy=False))
    assert data["verdict"]["accuracy"] == "unchecked"
    assert any("unchecked" in line for line in data["accuracy"])
    assert "accuracy unchecked" in err


# ---------------------------------------------------------------- vLLM probe: golden against the reference launch


def test_vllm_launch_probe_compares_greedy_output_with_the_reference_launch(tmp_path):
    # before: the golden check was the fixed word "Paris" (waived for base models): any text passed
    from autotune.probe.features import vllm as F

    answers = {F.Combo("auto", None): " Paris, the city of", F.Combo("fp8", None): " Paris. The capital",
               F.Combo("fp8_e5m2", None): " a city in the"}

    def launcher(combo, model_dir, **kw):
        return ProbeResult(feature=f"launch:{combo.label()}", status="works", params=combo.params(),
                           evidence="scripted", output=answers[combo])

    combos = F.make_combos(["auto", "fp8", "fp8_e5m2"], ["auto"])
    results = F.launch_matrix("m", combos, log_dir=tmp_path, golden=F.REFERENCE_GOLDEN, launcher=launcher)
    assert [r.status for r in results] == ["works", "works", "fails"]
    assert results[2].signature == "golden_mismatch" and "reference" in results[2].evidence


def test_a_named_qeval_reference_replaces_a_baseline_without_qeval(tmp_path):
    from autotune.study.outcome import outcome_of

    store = _store_with(tmp_path, None)
    space = load_space("llamacpp-gemma3-270m")
    no_qeval_base = _trial(0, 100.0, qeval=None, **space.baseline_params())
    store.save_trial(no_qeval_base)
    worse = {k: i >= 5 for i, k in enumerate(ALL_RIGHT)}  # 5 of 20 lost against trial 1
    store.save_trial(_trial(2, 200.0, qeval=worse, **{**space.baseline_params(), "n_threads": 2, "n_batch": 256}))
    gates = {t.number: {g.gate: g.status for g in t.gates} for t in outcome_of(store, "s").trials}
    assert gates[1]["qeval"] == "unchecked" and gates[2]["qeval"] == "unchecked"
    store.set_study_reference("s", 1)
    gates = {t.number: {g.gate: g.status for g in t.gates} for t in outcome_of(store, "s").trials}
    assert gates[1]["qeval"] == "pass" and gates[2]["qeval"] == "fail"


def test_a_confirmation_status_is_decided_with_the_verdict_not_read_from_its_wording():
    """The status is set where the test decides it: rewording the sentence people read cannot move
    it (before: `status` parsed `verdict.startswith("not confirmed")`)."""
    from autotune.models import ConfirmationLaunch, TrialResult, VerdictStatus
    from autotune.verdict.confirmation import verdict_of

    def arm(number):
        return TrialResult(study="s", number=number, candidate=Candidate(engine="llamacpp", params={"n": number}),
                           status="ok", objective=10.0, score=10.0)

    one_round = [ConfirmationLaunch(id=i + 1, study="s", best_trial=1, baseline_trial=0, round=1, trial=t, objective=v)
                 for i, (t, v) in enumerate([(0, 10.0), (1, 12.0)])]
    early = verdict_of("s", arm(1), arm(0), one_round, None, 0.05, 1)
    assert early.status is VerdictStatus.NOT_CONFIRMED
    assert early.model_copy(update={"verdict": "reworded"}).status is VerdictStatus.NOT_CONFIRMED
    stored = Confirmation.model_validate_json(early.model_dump_json())
    assert stored.status is VerdictStatus.NOT_CONFIRMED and '"status":"not confirmed"' in early.model_dump_json()


def test_a_confirmation_stored_before_its_status_field_is_read_from_its_numbers_not_its_wording():
    """A row written before `status` existed: not confirmed when an arm has fewer than two launches
    and no relaunch failed (every round gave both arms a sample); a failed relaunch is no winner, and
    so is a row of the first confirmations (no alpha: no minimum of launches yet).
    Its sentence is reworded here: the status must not move (before: `startswith("not confirmed")`)."""
    from autotune.models import VerdictStatus

    def older(rounds: int, best: list[float], base: list[float], winner: bool = False, t_test: bool = True) -> Confirmation:
        return Confirmation.model_validate({
            "study": "s", "best_trial": 1, "baseline_trial": 0, "rounds": rounds, "best_samples": best,
            "baseline_samples": base, "ratio": 1.0, "noise": 0.0, "winner": winner, "verdict": "reworded",
            **({"noise_df": 0, "t_statistic": None, "critical": None, "alpha": 0.05} if t_test else {}),
        })

    assert older(1, [12.0], [10.0]).status is VerdictStatus.NOT_CONFIRMED
    assert older(0, [], []).status is VerdictStatus.NOT_CONFIRMED
    assert older(2, [12.0], [10.0, 10.1]).status is VerdictStatus.NO_WINNER  # a relaunch failed
    assert older(2, [12.0, 12.1], [10.0, 10.1]).status is VerdictStatus.NO_WINNER
    assert older(2, [12.0, 12.1], [10.0, 10.1], winner=True).status is VerdictStatus.WINNER
    assert older(1, [12.0], [10.0], t_test=False).status is VerdictStatus.NO_WINNER  # no minimum then


def test_a_trial_verdict_is_rendered_from_its_standing():
    """The words people read, pinned; the standing beside them is what code decides on."""
    from autotune.gates.score import Standing, standing

    trials = {
        "ok": _trial(1, 10.0).model_copy(update={"gates": [GateOutcome(gate="needle", status="pass", detail="d")]}),
        "unchecked": _trial(2, 10.0).model_copy(update={"gates": [GateOutcome(gate="qeval", status="unchecked",
                                                                              detail="no reference")]}),
        "rejected": _trial(3, 10.0).model_copy(update={"gates": [GateOutcome(gate="needle", status="fail",
                                                                             detail="missed 1/1")]}),
        "dominated": _trial(4, 10.0).model_copy(update={"dominated": "x0.5"}),
        "deferred": _trial(5, 10.0).model_copy(update={"deferred": "the head of the ranking runs them"}),
        "skipped": _trial(6, 0.0).model_copy(update={"status": "skipped", "reason": "pruned"}),
        "crashed": _trial(7, 0.0).model_copy(update={"status": "crashed", "reason": "lost"}),
        "failed": _trial(8, 0.0).model_copy(update={"status": "failed", "reason": "oom: out of memory"}),
    }
    assert {name: verdict(t) for name, t in trials.items()} == {
        "ok": "ok",
        "unchecked": "unchecked: qeval gate (no reference)",
        "rejected": "rejected: needle gate (missed 1/1)",
        "dominated": "dominated: x0.5",
        "deferred": "gates deferred, not run: the head of the ranking runs them",
        "skipped": "skipped: pruned",
        "crashed": "crashed: lost",
        "failed": "failed (failed): oom: out of memory",
    }
    assert {name: standing(t) for name, t in trials.items()} == {
        "ok": Standing.OK, "unchecked": Standing.UNCHECKED, "rejected": Standing.REJECTED,
        "dominated": Standing.DOMINATED, "deferred": Standing.DEFERRED, "skipped": Standing.SKIPPED,
        "crashed": Standing.CRASHED, "failed": Standing.FAILED,
    }


def test_no_winner_counts_the_unchecked_trials_by_their_standing_not_their_wording(monkeypatch):
    """Reworded verdicts leave the count of trials with unchecked gates as it was (before: it was
    `verdict(t).startswith("unchecked")`, so a rewording silently dropped the line)."""
    from rich.console import Console

    from autotune.output import terminal
    from autotune.study.outcome import StudyOutcome

    gated = [GateOutcome(gate="qeval", status="unchecked", detail="no reference")]
    trials = [_trial(n, 10.0).model_copy(update={"gates": gated}) for n in (0, 1)]
    outcome = StudyOutcome(name="s", trials=trials, ranked=[], baseline=trials[0], skipped_reasons={})
    monkeypatch.setattr(terminal, "verdict", lambda t: "reworded: " + verdict(t))
    console = Console(record=True, width=200)
    terminal.print_best(console, outcome)
    assert "2 trial(s) ran but have unchecked gates: reworded: unchecked: qeval gate (no reference)" in console.export_text()


def test_a_warning_reaches_the_terminal_the_report_and_the_recipe(tmp_path):
    """Issue 51: the terminal warned about trials tied with the best and faster trials whose gates
    never ran; the HTML report and the recipe did not. One verdict, composed once, carries them."""
    from rich.console import Console

    from autotune.commands.export import export_recipe
    from autotune.output import terminal
    from autotune.output.html import verdict_section
    from autotune.output.recipe import from_yaml
    from autotune.store import Store
    from autotune.study.outcome import outcome_of

    store = Store(tmp_path / "runs.db")
    space = load_space("llamacpp-gemma3-270m")
    store.save_study("s", space, "cpu", 1, "h")
    trials = [_trial(0, 10.0, qeval=ALL_RIGHT), _trial(1, 14.0, qeval=ALL_RIGHT), _trial(2, 13.8, qeval=ALL_RIGHT),
              _trial(3, 15.0, needle=None).model_copy(update={"deferred": "the time budget ended the study first"})]
    for t in trials:
        store.save_trial(t)
    key = NoiseKey(host="h", engine="llamacpp", metric="decode_tps_geomean")
    store.add_launch_sample(key, "s", trials[0].candidate, 10.0, "noise", 0)
    store.add_launch_sample(key, "s", trials[0].candidate, 9.0, "noise", 0)
    outcome = outcome_of(store, "s")
    assert outcome.best is not None and outcome.best.number == 1

    console = Console(record=True, width=250)
    terminal.print_best(console, outcome)
    shown = console.export_text()
    page = verdict_section(outcome)
    made = export_recipe(store, "s", None, None)
    recipe = from_yaml(made.text)
    assert "tied with the best within the launch noise: trial(s) 2" in shown
    assert "faster by score, gates never run (unchecked): trial(s) 3" in shown
    for text in (page, " ".join(made.warnings)):
        assert "tied within the launch noise with trial(s) 2" in text
        assert "faster by score, gates never run (unchecked): trial(s) 3" in text
    assert recipe.verdict is not None and recipe.verdict.tied_with == [2] and recipe.verdict.unchecked_faster == [3]
