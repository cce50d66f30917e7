"""The engine contract, checked the same way for every registered engine (autotune.engines.ENGINES).

An engine answers for itself: the knobs it renders, its context knob, what a smoke launch sets, its
default speculation method, the planner's facts (KV bytes per element, memory overhead, memory
budget, eager steps), its feature probes and how it reads its own log and metrics. Callers ask; none
compares engine names. Nothing here launches an engine: a registered engine need not be installed.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

import pytest

from autotune.engines import ENGINES, Engine, Knobs, ProbeRequest, get_engine
from autotune.errors import ConfigError, EngineUnavailable
from autotune.hardware.profiles import get_profile
from autotune.models import Candidate, KnobSpec, ModelSpec, SearchSpace
from autotune.planner.roofline import SPEC_PRIORS, estimate
from autotune.space.candidates import context_tokens

MODEL = ModelSpec(
    name="tiny", path="/models/tiny", params_total_b=0.27, weight_bits=4.5, n_layers=18, hidden_size=640,
    n_heads=4, n_kv_heads=1, head_dim=256, context_max=32768,
)


class Notes:
    def __init__(self) -> None:
        self.assumed: list[str] = []
        self.unknown: list[str] = []

    def assume(self, text: str) -> None:
        self.assumed.append(text)

    def missing(self, term: str, why: str) -> None:
        self.unknown.append(f"{term}: {why}")


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest) -> Engine:
    return get_engine(request.param)


def space_for(engine: Engine, **kw) -> SearchSpace:
    return SearchSpace(name="contract", engine=engine.name, model=MODEL, **{"knobs": [], **kw})


def test_registered_under_its_own_name_with_its_knobs(engine: Engine) -> None:
    assert ENGINES[engine.name].startswith("autotune.engines.")
    assert engine.knobs and engine.context_knob in engine.knobs
    assert set(engine.cheap_params) <= engine.knobs, "a smoke launch may only set knobs the engine renders"
    assert engine.health_path.startswith("/") and engine.tokenize_path.startswith("/")
    assert engine.metrics_path is None or engine.metrics_path.startswith("/")
    assert engine.startup_guess_s > 0


def test_availability_is_a_version_or_a_clear_refusal(engine: Engine) -> None:
    version = engine.version()
    if version is None:
        with pytest.raises(EngineUnavailable, match="install"):
            engine.check_available()
    else:
        assert isinstance(version, str) and version


def test_render_serves_the_candidate_on_the_port(engine: Engine) -> None:
    candidate = Candidate(engine=engine.name, params={engine.context_knob: 4096})
    launch = engine.render(candidate, MODEL, 8123)
    assert launch.engine == engine.name and launch.port == 8123 and launch.health_path == engine.health_path
    argv = launch.server.argv
    assert "8123" in argv and "4096" in argv


def test_the_context_a_candidate_launches_with_is_its_context_knob(engine: Engine) -> None:
    space = space_for(engine)
    assert context_tokens(space, Candidate(engine=engine.name, params={engine.context_knob: 4096})) == 4096
    assert context_tokens(space, Candidate(engine=engine.name, params={})) == MODEL.context_max


def test_a_knob_it_cannot_render_is_refused_with_the_known_ones(engine: Engine) -> None:
    space = space_for(engine, knobs=[KnobSpec(name="no_such_knob", values=[1, 2], default=1)])
    with pytest.raises(ConfigError, match="no knob 'no_such_knob'.*known knobs"):
        engine.validate_space(space)


def test_planner_facts_for_the_default_settings(engine: Engine) -> None:
    notes = Notes()
    elem = engine.kv_element_bytes(Knobs({}), 16, notes)
    assert elem is not None and 0 < elem <= 4 and not notes.unknown
    fixed_gb, tokens = engine.memory_overhead(Knobs({}))
    assert fixed_gb > 0 and tokens > 0
    budget = engine.memory_budget_gb(Knobs({}), 100.0)
    assert budget is None or 0 < budget <= 100.0
    assert engine.eager(Knobs({})) in (True, False)


def test_a_cache_type_outside_its_table_is_unknown_not_zero(engine: Engine) -> None:
    notes = Notes()
    odd = {name: "no_such_type" for name in ("kv_cache_dtype", "type_k", "type_v", "cache_mode") if name in engine.knobs}
    assert odd, "an engine names its KV cache type with one of the knobs this test knows"
    assert engine.kv_element_bytes(Knobs(odd), 16, notes) is None
    assert notes.unknown and "KV cache" in notes.unknown[0]


def test_speculation_has_a_prior_when_the_engine_picks_the_method(engine: Engine) -> None:
    method = engine.spec_method(Knobs({}))
    assert method == engine.default_spec_method
    assert method is None or method in SPEC_PRIORS
    assert engine.spec_method(Knobs({"spec_method": "eagle3"})) == "eagle3"


def test_the_planner_estimates_every_engine_without_naming_it(engine: Engine) -> None:
    space = space_for(engine)
    est = estimate(space, Candidate(engine=engine.name, params={engine.context_knob: 4096}), get_profile("spark"), 1)
    assert est.fits and est.kv_gb and est.kv_gb > 0 and est.decode_tps and est.decode_tps > 0
    assert est.overhead_gb >= engine.memory_overhead(Knobs({}))[0]


def test_it_reads_its_own_log_and_metrics(engine: Engine) -> None:
    assert engine.selected("") == {}
    assert engine.spec_decode_counters("") == {}
    assert engine.classify("") is None


def test_its_feature_probes_are_registered_and_importable(engine: Engine) -> None:
    if engine.feature_probes_entry is None:
        with pytest.raises(ConfigError, match="no feature probes"):
            engine.feature_probes(ProbeRequest("/m", timeout_s=1, budget_s=1, logs_dir=Path("logs")))
        return
    module, _, function = engine.feature_probes_entry.partition(":")
    assert callable(getattr(import_module(module), function))
