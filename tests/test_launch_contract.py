"""One contract for every Launch (autotune/trial/launch.py): the engine's (real llama.cpp, marked
`engine`), the stand-ins the study tests run on (tests/stand_in.py's StandIn and Timed, the
accuracy-class engine of tests/test_accuracy_classes.py) and the replay of a measured table
(benchmarks/search_quality.py). A study cannot tell them apart by what they return: a TrialResult
of the request's study, number and candidate, `ok` with objective and score or `failed` with its
failure, and the gates the request asks for (`LaunchRequest.gates`): skipped when its skip rule
says so, a sibling's reused, none where the context runs no accuracy."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.gates.dominated import GatesSkipped, SkipKind
from autotune.models import (
    Candidate, GatePolicy, NeedleCase, NeedleReport, QevalReport, TrialResult,
)
from autotune.trial.context import TrialContext
from autotune.trial.launch import Launch, LaunchRequest, Purpose
from gemma_space import GEMMA_ON_LLAMACPP, SHORT_WORKLOAD

ROOT = Path(__file__).resolve().parent.parent
TINY_TABLE = ROOT / "tests" / "data" / "replay-tiny.json"

#: a space of one cheap llama.cpp launch: one short decode, no gates of its own
GEMMA_SMALL = "name: contract\n" + GEMMA_ON_LLAMACPP + """fixed: {{chat_format: gemma, seed: 1234, n_ctx: 1024}}
knobs:
  - {{name: n_threads, values: [2], default: 2}}
""" + SHORT_WORKLOAD + "gates: {{needle: null, qeval: null}}\n"


@dataclass
class Rig:
    """A Launch with a context and a candidate it can launch."""

    launch: Launch
    ctx: TrialContext
    candidate: Candidate


def _stand_in_rig(tmp_path: Path, make: Callable[[], Launch], template: str | None = None) -> Rig:
    pytest.importorskip("llama_cpp")
    from autotune.space.candidates import baseline
    from stand_in import TINY_LLAMACPP, stand_in_plan

    plan = stand_in_plan(tmp_path, template or TINY_LLAMACPP, accuracy=True)
    return Rig(make(), plan.ctx, baseline(plan.space))


def stand_in(tmp_path: Path) -> Rig:
    from stand_in import StandIn

    return _stand_in_rig(tmp_path, StandIn)


def timed(tmp_path: Path) -> Rig:
    from stand_in import Timed

    return _stand_in_rig(tmp_path, lambda: Timed(lambda candidate: 0.0))


def accuracy_classes(tmp_path: Path) -> Rig:
    from test_accuracy_classes import SPACE, Engine

    return _stand_in_rig(tmp_path, Engine, SPACE)


def replay(tmp_path: Path) -> Rig:
    from conftest import benchmark_module
    from autotune.engines import get_engine

    table = benchmark_module("search_quality").Table(json.loads(TINY_TABLE.read_text()))
    table.launched_failure_implicates()
    ok = next(c for c in table.grid if any(l["status"] == "ok" for l in table.entries[c.key()]["launches"]))
    ctx = TrialContext(study="contract", space=table.space, model=table.space.model,
                       engine=get_engine("llamacpp").use_space(table.space), logs_dir=tmp_path)
    return Rig(table.launch(seed=0), ctx, ok)


def engine(tmp_path: Path, gemma_gguf: Path) -> Rig:
    import yaml

    from autotune.engines import get_engine
    from autotune.models import SearchSpace
    from autotune.space.candidates import baseline
    from autotune.trial.run import EngineLaunch

    space = SearchSpace.model_validate(yaml.safe_load(GEMMA_SMALL.format(alias="contract", model=gemma_gguf)))
    ctx = TrialContext(study="contract", space=space, model=space.model, engine=get_engine("llamacpp").use_space(space),
                       logs_dir=tmp_path, gates=GatePolicy.AT_ONCE)
    return Rig(EngineLaunch(), ctx, baseline(space))


STAND_INS = {"stand-in": stand_in, "timed": timed, "accuracy-classes": accuracy_classes, "replay": replay}


@pytest.fixture(params=[*STAND_INS, pytest.param("engine", marks=pytest.mark.engine)])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Rig:
    if request.param == "engine":
        return engine(tmp_path, request.getfixturevalue("gemma_gguf"))
    return STAND_INS[request.param](tmp_path)


def _served(result: TrialResult, request: LaunchRequest) -> None:
    assert isinstance(result, TrialResult)
    assert (result.study, result.number, result.candidate.key()) == (
        request.ctx.study, request.number, request.candidate.key())
    assert result.status in ("ok", "failed"), result.status
    assert result.duration_s >= 0
    if result.status == "failed":
        assert result.failure is not None and result.reason
    elif request.purpose is not Purpose.SMOKE:  # a smoke launch measures nothing
        assert result.objective is not None and result.score is not None


def _ok(rig: Rig, **request: object) -> tuple[LaunchRequest, TrialResult]:
    asked = LaunchRequest(rig.ctx, rig.candidate, 7, **request)
    result = rig.launch(asked)
    _served(result, asked)
    assert result.status == "ok", result.reason
    return asked, result


def test_it_is_a_launch(rig: Rig) -> None:
    assert isinstance(rig.launch, Launch)
    assert rig.launch.stop_all() is None  # nothing up: nothing to stop, no error


@pytest.mark.parametrize("purpose", list(Purpose))
def test_every_purpose_returns_a_result_of_the_request(rig: Rig, purpose: Purpose) -> None:
    asked = LaunchRequest(rig.ctx, rig.candidate, 3, purpose, log_name=f"contract-{purpose.name.lower()}")
    _served(rig.launch(asked), asked)


def test_a_skip_rule_that_skips_leaves_the_gates_unrun(rig: Rig) -> None:
    skip = GatesSkipped(kind=SkipKind.DOMINATED, why="its score cannot rank first")
    _, result = _ok(rig, dominated=lambda objective, score: skip)
    assert result.dominated == skip.why and result.needle is None and result.qeval is None


def test_a_donor_lends_its_accuracy(rig: Rig) -> None:
    needle = NeedleReport(cases=[NeedleCase(length_tokens=512, prompt_tokens=530, depth=0.5, passed=True,
                                            expected="1", answer="1")], max_pass_length=512)
    qeval = QevalReport(results={"t": True}, correct=1, total=1, per_category={"t": [1, 1]})
    donor = TrialResult(study=rig.ctx.study, number=2, candidate=rig.candidate, status="ok", objective=1.0, score=1.0,
                        needle=needle, qeval=qeval)
    _, result = _ok(rig, reuse=donor)
    assert (result.accuracy_from, result.needle, result.qeval) == (2, needle, qeval)


def test_a_context_without_accuracy_runs_no_gates(rig: Rig) -> None:
    rig.ctx = rig.ctx.model_copy(update={"gates": GatePolicy.NO_ACCURACY})
    _, result = _ok(rig)
    assert result.needle is None and result.qeval is None and result.accuracy_from is None
    assert result.dominated is None and result.deferred is None
