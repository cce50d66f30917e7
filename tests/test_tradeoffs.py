"""What the winner trades away is named (show, report, recipe), and a space can gate on it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from autotune.models import Candidate, Gates, Measurement, SearchSpace, TrialResult
from autotune.verdict.noise import LaunchNoise
from autotune.gates.score import evaluate_gates
from autotune.verdict.tradeoffs import regression_gate, tradeoffs

NOISE = LaunchNoise(sigma=0.03, df=5, groups=2, launches=7)  # ±3 %: one launch each, beyond ~x0.92 / x1.09


def trial(number: int, **medians: float) -> TrialResult:
    units = {"decode_tps": "tok/s", "prefill_tps": "tok/s", "ttft_ms": "ms", "tpot_ms": "ms", "output_tps": "tok/s"}
    ms = [Measurement.of(name, units[name.split(".")[0]], "c", [value]) for name, value in
          ((k.replace("__", "."), v) for k, v in medians.items())]
    return TrialResult(study="s", number=number, candidate=Candidate(engine="vllm", params={"n": number}),
                       status="ok", measurements=ms, objective=medians.get("decode_tps__prose"))


# the H200 case of the issue: +2.3 % decode, cold prefill halved, TTFT +38 %
BASE = trial(0, decode_tps__prose=91.4, prefill_tps__512=14748.0, ttft_ms__prose=40.0, tpot_ms__prose=10.9)
BEST = trial(3, decode_tps__prose=93.5, prefill_tps__512=7477.0, ttft_ms__prose=55.2, tpot_ms__prose=10.7)


def test_the_winner_s_losses_beyond_the_noise_are_listed_worst_first():
    found = tradeoffs(BEST, BASE, NOISE)
    assert [t.metric for t in found] == ["prefill_tps.512", "ttft_ms.prose"]
    assert found[0].ratio == pytest.approx(0.507, abs=1e-3) and found[1].ratio == pytest.approx(1.38)
    assert "x0.51" in found[0].describe() and "higher is better" in found[0].describe()


def test_a_loss_inside_the_noise_or_without_a_noise_estimate_is_not_called_a_trade_off():
    slightly = trial(4, decode_tps__prose=93.0, prefill_tps__512=14000.0, ttft_ms__prose=41.0)
    assert tradeoffs(slightly, BASE, NOISE) == []  # x0.95 and x1.03 are within two standard errors
    assert tradeoffs(BEST, BASE, None) == []
    assert tradeoffs(BASE, BASE, NOISE) == []


def test_max_regression_gates_a_family_against_the_baseline():
    limits = {"prefill_tps": 0.8, "ttft_ms": 1.25}
    gate = regression_gate(BEST, BASE, limits)
    assert gate.status == "fail"
    assert "prefill_tps.512 x0.51 vs limit x0.80" in gate.detail and "ttft_ms.prose x1.38 vs limit x1.25" in gate.detail
    assert regression_gate(BASE, BASE, limits).status == "pass"
    ok = trial(5, decode_tps__prose=92.0, prefill_tps__512=13000.0, ttft_ms__prose=45.0)
    assert regression_gate(ok, BASE, limits).status == "pass"
    assert regression_gate(ok, None, limits).status == "unchecked"
    # a gate that fails makes the trial ineligible, as every gate does
    gates = evaluate_gates(BEST, None, Gates(needle=None, qeval=None, max_regression=limits), baseline=BASE)
    assert [g.gate for g in gates] == ["max_regression"] and not BEST.model_copy(update={"gates": gates}).feasible


def test_one_measurement_can_be_named_alone():
    assert regression_gate(BEST, BASE, {"ttft_ms.prose": 1.5}).status == "pass"
    assert regression_gate(BEST, BASE, {"prefill_tps.512": 0.6}).status == "fail"


def _space(**gates) -> dict:
    return {"name": "s", "engine": "llamacpp", "model": {"name": "m", "path": "m.gguf"}, "knobs": [{"name": "k", "values": [1], "default": 1}],
            "gates": {"needle": None, "qeval": None, **gates}}


def test_a_space_naming_an_unmeasured_or_unknown_metric_is_refused_up_front():
    SearchSpace.model_validate(_space(max_regression={"prefill_tps": 0.8}))
    with pytest.raises(ValidationError, match="does not measure"):
        SearchSpace.model_validate({**_space(max_regression={"prefill_tps": 0.8}), "workload": {"prefill_tokens": []}})
    with pytest.raises(ValidationError, match="does not measure"):
        SearchSpace.model_validate(_space(max_regression={"output_tps": 0.9}))  # workload.concurrency is [1]
    with pytest.raises(ValidationError, match="unknown metric 'prefil_tps'"):
        SearchSpace.model_validate(_space(max_regression={"prefil_tps": 0.8}))
    with pytest.raises(ValidationError, match="at least 1"):
        SearchSpace.model_validate(_space(max_regression={"ttft_ms": 0.8}))  # a ceiling below 1 would fail everything


def test_show_the_report_and_the_recipe_name_what_the_winner_trades_away():
    from rich.console import Console

    from autotune.output.html import verdict_section
    from autotune.output.terminal import print_best
    from autotune.output.verdict import compose
    from autotune.study.outcome import StudyOutcome

    best = BEST.model_copy(update={"score": 93.5})
    outcome = StudyOutcome(name="s", trials=[BASE, best], ranked=[best, BASE], baseline=BASE, skipped_reasons={},
                           noise=NOISE, accuracy=False)
    verdict = compose(outcome.model_copy(update={"space": SearchSpace.model_validate(_space())}), best)
    assert [t.metric for t in verdict.tradeoffs] == ["prefill_tps.512", "ttft_ms.prose"]
    assert any("trades away" in w and "prefill_tps.512 x0.51" in w for w in verdict.warnings())
    console = Console(record=True, width=200)
    print_best(console, outcome)
    shown = console.export_text()
    assert "trades away" in shown and "prefill_tps.512 x0.51" in shown and "ttft_ms.prose x1.38" in shown
    assert "prefill_tps.512 x0.51" in verdict_section(outcome)


def test_a_space_without_max_regression_keeps_the_fingerprint_its_studies_were_made_with():
    from autotune.space.candidates import load_space
    from autotune.space.fingerprint import fingerprint

    # computed before gates.max_regression existed: a resumed study must not be refused as changed;
    # the shipped space's decode workload was cut to 2 prompts x 2 passes on 2026-12-07 (issue 47):
    # with the old workload it is the old experiment
    gemma = load_space("llamacpp-gemma3-270m")
    old_workload = gemma.workload.model_copy(update={"prompts_per_set": 3, "repeats": 3})
    assert fingerprint(gemma.model_copy(update={"workload": old_workload})) == "66cd147613d9a99a"
    assert fingerprint(gemma) != "66cd147613d9a99a"
    minimax = load_space("vllm-minimax-m2-12l-dummy")
    # the shipped space gained the performance_mode knob (issue 30 item 4): studies made before it are
    # refused on resume as made from another space; without that knob the fingerprint is the old one
    before_knob = minimax.model_copy(update={"knobs": [k for k in minimax.knobs if k.name != "performance_mode"]})
    assert fingerprint(before_knob) == "f8a4ccd9ac68a340" and fingerprint(minimax) != fingerprint(before_knob)


def test_model_vocab_size_is_part_of_the_experiment_only_where_set():
    from autotune.space.candidates import load_space
    from autotune.space.fingerprint import experiment, fingerprint

    # model.vocab_size came after studies were fingerprinted: unset, it is left out (the shipped
    # Gemma space keeps its fingerprint, above); set, it sizes the LM head: another experiment
    space = load_space("llamacpp-gemma3-270m")
    assert "vocab_size" not in experiment(space)["model"]
    sized = space.model_copy(update={"model": space.model.model_copy(update={"vocab_size": 262144})})
    assert experiment(sized)["model"]["vocab_size"] == 262144
    assert fingerprint(sized) != fingerprint(space)
    space = load_space("llamacpp-gemma3-270m")
    gated = space.model_copy(update={"gates": space.gates.model_copy(update={"max_regression": {"prefill_tps": 0.8}})})
    assert fingerprint(gated) != fingerprint(space)
