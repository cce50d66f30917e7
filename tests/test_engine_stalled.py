"""Healthy means it generates (issue 31 §3): an engine counts as up only when a one-token greedy
generation returns, and a measured request that stalls past its time-out is followed by that check;
an engine that answers /health but generates nothing fails the trial as `engine_stalled`, with the
evidence. The engine is the FAKE vLLM (tests/fakes/vllm_site.py) told to stall while /health answers."""

from __future__ import annotations


import httpx
from fakes.vllm_site import small_model_dir, use_fake_vllm

from autotune.commands.setup import prepare
from autotune.engines.signatures import classify
from autotune.launchers import base as launcher_base
from autotune.models import Candidate
from autotune.trial.launch import LaunchRequest
from autotune.trial.run import EngineLaunch

SPACE = """
name: fake-vllm-stall
engine: vllm
model: {{name: gemma-3-270m, path: {model}, prompt_style: completion, head_dim: 256, n_kv_heads: 1, n_layers: 18,
        params_total_b: 0.27, weight_bits: 16, context_max: 4096}}
fixed: {{max_model_len: 4096}}
knobs:
  - {{name: max_num_seqs, values: [8, 16], default: 8}}
workload:
  decode_max_tokens: 8
  prompts_per_set: 2
  repeats: 2
  concurrency: [1]
  request_timeout_s: 3
  startup_timeout_s: {startup}
"""


def plan_for(tmp_path, monkeypatch, startup: float = 60):
    use_fake_vllm(tmp_path, monkeypatch, name="fake_site")
    model = small_model_dir(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(model=model, startup=startup))
    return prepare(space_name=str(space), model_path=None, db_path=tmp_path / "runs.db", study="s", hardware="cpu",
                   nodes=1, accuracy=False, logs_dir=tmp_path / "logs")


def candidate(plan, stall_after: int) -> Candidate:
    return Candidate(engine="vllm", params={**plan.space.fixed, "max_num_seqs": 8},
                     env={"FAKE_VLLM_STALL_AFTER": str(stall_after)})


def test_a_request_that_stalls_mid_measure_fails_the_trial_as_engine_stalled(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, monkeypatch)
    # the start's generation check and two measured requests generate; then the engine hangs, /health still 200
    result = EngineLaunch()(LaunchRequest(plan.ctx, candidate(plan, 3), 0))
    assert result.status == "failed", result.reason
    failure = result.failure
    assert failure.failure_class == "engine_stalled", failure
    assert failure.message.startswith("engine_stalled: a measured request stalled past its 3 s time-out")
    evidence = "\n".join(failure.evidence)
    assert "POST /v1/completions (1 token, greedy): timed_out, no reply within 3 s" in evidence
    assert "/health: 200" in evidence
    assert "log: nccl_liveness: " in evidence and "No available shared memory broadcast block" in evidence
    assert result.measurements == [] and result.objective is None  # never a slow measurement
    log = open(result.log_path).read()
    assert classify(log, engine="vllm").failure_class == "engine_stalled"  # the saved log says so too


def test_an_engine_whose_health_answers_but_which_never_generates_is_not_up(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher_base, "MIN_GENERATION_S", 2.0)
    plan = plan_for(tmp_path, monkeypatch, startup=15)
    result = EngineLaunch()(LaunchRequest(plan.ctx, candidate(plan, 0), 0))
    assert result.status == "failed", result.reason
    assert result.failure.failure_class == "engine_stalled", result.failure
    assert "answers its health check but no one-token generation came back" in result.failure.message
    assert any(line.endswith("/health: 200") for line in result.failure.evidence)
    assert result.measurements == []


def test_a_healthy_engine_is_up_after_its_generation_check(tmp_path, monkeypatch):
    plan = plan_for(tmp_path, monkeypatch)
    launch = plan.ctx.render(candidate(plan, -1))
    assert launch.ready is not None and launch.ready.body["max_tokens"] == 1 and launch.ready.body["temperature"] == 0
    result = EngineLaunch()(LaunchRequest(plan.ctx, candidate(plan, -1), 0))
    assert result.status == "ok", result.reason


def test_generation_check_outcomes(tmp_path):
    from autotune.models import GenerationOutcome, ReadyRequest

    ready = ReadyRequest(body={"model": "m", "prompt": "The", "max_tokens": 1, "temperature": 0})

    def served(handler):
        return httpx.MockTransport(handler)

    cases = {
        GenerationOutcome.GENERATED: lambda r: httpx.Response(200, json={"choices": [{"text": " a"}], "usage": {"completion_tokens": 1}}),
        GenerationOutcome.HTTP_ERROR: lambda r: httpx.Response(404, text="model m not found"),
        GenerationOutcome.NO_TOKEN: lambda r: httpx.Response(200, json={"choices": []}),
    }
    real = httpx.Client
    for outcome, handler in cases.items():
        httpx.Client = lambda *a, handler=handler, **kw: real(transport=served(handler))  # type: ignore[misc]
        try:
            check = launcher_base.generation_check("http://engine", ready, 5.0)
        finally:
            httpx.Client = real  # type: ignore[misc]
        assert check.outcome == outcome
    unreachable = launcher_base.generation_check("http://127.0.0.1:9", ready, 2.0)
    assert unreachable.outcome == GenerationOutcome.UNREACHABLE and not unreachable.generated
