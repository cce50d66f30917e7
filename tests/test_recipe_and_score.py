"""Recipe YAML round-trip, gates and ranking, confirmation verdicts."""

from __future__ import annotations

import sys

import yaml

from autotune.verdict.confirmation import judge
from autotune.models import (
    Candidate,
    GateOutcome,
    Gates,
    LaunchSpec,
    Measurement,
    NeedleCase,
    NeedleReport,
    NodeLaunch,
    TrialResult,
)
from autotune.output.recipe import from_yaml, recipe_from_trial, shell_lines, to_yaml
from autotune.gates.score import evaluate_gates, needle_gate, rank, verdict
from autotune.space.candidates import load_space


def trial(number: int, score: float | None, status: str = "ok", gates: list[GateOutcome] | None = None, **params) -> TrialResult:
    launch = LaunchSpec(
        engine="llamacpp",
        nodes=[NodeLaunch(argv=[sys.executable, "-m", "llama_cpp.server", "--n_threads", "2"], env={"A": "b c"})],
        port=8000,
    )
    m = Measurement.of("decode_tps.prose", "tok/s", "decode tok/s, 1 stream, prose", [score or 1.0, (score or 1.0) + 1])
    return TrialResult(
        study="s",
        number=number,
        candidate=Candidate(engine="llamacpp", params=params or {"n_threads": number}),
        status=status,
        launch=launch,
        measurements=[m],
        objective=score,
        score=score,
        gates=gates or [],
    )


def test_rank_excludes_failed_and_gated():
    ok = trial(1, 50.0)
    faster_but_gated = trial(2, 90.0, gates=[GateOutcome(gate="needle", passed=False, detail="missed")])
    failed = trial(3, None, status="failed")
    assert [t.number for t in rank([ok, faster_but_gated, failed])] == [1]
    assert verdict(faster_but_gated).startswith("rejected: needle gate")


def test_needle_gate_requires_every_case():
    t = trial(1, 10.0).model_copy(
        update={
            "needle": NeedleReport(
                cases=[
                    NeedleCase(length_tokens=512, prompt_tokens=520, depth=0.1, passed=True, expected="12345", answer="12345"),
                    NeedleCase(length_tokens=1024, prompt_tokens=1030, depth=0.9, passed=False, expected="54321", answer="5432"),
                ],
                max_pass_length=512,
            )
        }
    )
    gate = needle_gate(t)
    assert not gate.passed and "1024 tok @ 90%" in gate.detail
    [out] = evaluate_gates(t, None, Gates(qeval=None))
    assert out.gate == "needle" and not out.passed


def test_slo_gate():
    t = trial(1, 10.0)
    t = t.model_copy(update={"measurements": [*t.measurements, Measurement.of("ttft_ms.prose", "ms", "c", [120.0])]})
    [gate] = evaluate_gates(t, None, Gates(needle=None, qeval=None, ttft_ms_max=100.0))
    assert gate.gate == "ttft" and not gate.passed


def test_recipe_round_trip_and_portable_argv():
    space = load_space("llamacpp-gemma3-270m")
    best, base = trial(4, 60.0), trial(0, 40.0)
    recipe = recipe_from_trial(space, best, base, "cpu", 1)
    text = to_yaml(recipe)
    assert from_yaml(text) == recipe
    data = yaml.safe_load(text)
    assert data["launch"]["nodes"][0]["argv"][0] == "python3"  # no path of this machine
    assert sys.executable not in text
    assert data["commands"] == ["A='b c' python3 -m llama_cpp.server --n_threads 2"]
    assert data["baseline"]["decode_tps.prose"] == base.measurements[0].median
    number = data["numbers"][0]
    assert number["condition"] == "decode tok/s, 1 stream, prose" and number["spread"].startswith("MAD")
    assert data["provenance"]["trial"] == 4 and data["kind"] == "measured"


def test_shell_lines_multi_node():
    launch = LaunchSpec(
        engine="vllm",
        nodes=[NodeLaunch(node=0, role="head", argv=["ray", "start", "--head"]), NodeLaunch(node=1, role="worker", argv=["ray", "start"])],
        port=8000,
    )
    lines = shell_lines(launch)
    assert lines[0].startswith("# node 0 (head)") and lines[1].startswith("# node 1 (worker)")


def test_confirmation_judgement():
    result = judge([60.0, 61.0, 59.5], [40.0, 41.0, 40.5], prior=None, alpha=0.01)
    assert result.winner and result.ratio == 60.0 / 40.5
    assert not judge([41.0, 40.0], [40.5, 41.5], prior=None, alpha=0.01).winner


def test_a_recipe_never_mixes_predicted_and_measured():
    import pytest
    from pydantic import ValidationError

    space = load_space("llamacpp-gemma3-270m")
    recipe = recipe_from_trial(space, trial(1, 50.0), None, "cpu", 1)
    bad = recipe.model_dump()
    bad["numbers"].append({"name": "predicted_decode_tps", "value": 9.0, "unit": "tok/s", "condition": "x"})
    with pytest.raises(ValidationError, match="cannot hold predicted"):
        type(recipe).model_validate(bad)


def test_predicted_recipe_for_four_sparks(tmp_path):
    from autotune.commands.plan import predicted_recipe

    out = tmp_path / "p.yaml"
    predicted_recipe("minimax-m3.1-flash-spark4", "spark", 4, None, out)
    data = yaml.safe_load(out.read_text())
    assert data["kind"] == "predicted" and data["provenance"]["trial"] is None
    assert all(n["name"].startswith("predicted_") and n["condition"].startswith("PREDICTED") for n in data["numbers"])
    roles = [n["role"] for n in data["launch"]["nodes"]]
    assert roles == ["head", "worker", "worker", "worker", "server"]
    server = next(n for n in data["launch"]["nodes"] if n["role"] == "server")["argv"]
    assert server[server.index("--tensor-parallel-size") + 1] == "4"
    assert "--kv-cache-dtype" not in server or server[server.index("--kv-cache-dtype") + 1] != "nvfp4"


def test_plugin_flags_render_for_forks():
    from autotune.engines import get_engine
    from autotune.space.candidates import baseline

    space = load_space("minimax-m3.1-flash-spark1")
    engine = get_engine("vllm").use_space(space)
    argv = engine.render(baseline(space), space.model, 8000).server.argv
    assert argv[argv.index("--cache-mode") + 1] == "q4"
    assert argv[argv.index("--quantization") + 1] == "exl3"
