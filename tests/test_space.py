"""Search-space loading, candidate building and pre-launch pruning."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.models import ProbeResult
from autotune.space.candidates import (
    Pruner,
    available_spaces,
    baseline,
    count_candidates,
    enumerate_candidates,
    load_space,
    make_candidate,
    probes_check,
    rules_check,
)

MINIMAL = """
name: tiny
engine: llamacpp
model: {name: m, path: model.gguf}
knobs:
  - {name: type_k, values: [f16, q8_0], default: f16}
  - {name: flash_attn, values: [false, true], default: false}
rules:
  - when: {type_k: [q8_0]}
    then: {flash_attn: [true]}
    reason: quantized K needs flash attention here
"""


def write(tmp_path: Path, text: str, name: str = "space.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_every_shipped_space_loads():
    names = available_spaces()
    assert "llamacpp-gemma3-270m" in names
    for name in names:
        space = load_space(name)
        assert space.name == name


def test_baseline_is_engine_defaults(tmp_path):
    space = load_space(write(tmp_path, MINIMAL))
    assert baseline(space).params == {"flash_attn": False, "type_k": "f16"}


def test_unknown_key_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'knobs.0.valuez'"):
        load_space(write(tmp_path, MINIMAL.replace("values: [f16, q8_0]", "valuez: [f16, q8_0]")))


def test_malformed_yaml_names_the_line(tmp_path):
    with pytest.raises(ConfigError, match="malformed YAML at line"):
        load_space(write(tmp_path, "name: x\nknobs: [\n  - a: b\n"))


def test_unknown_space_lists_shipped_ones():
    with pytest.raises(ConfigError, match="shipped spaces: .*llamacpp-gemma3-270m"):
        load_space("no-such-space")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_space(str(tmp_path / "nope.yaml"))


def test_duplicate_knob_values_rejected(tmp_path):
    with pytest.raises(ConfigError, match="distinct"):
        load_space(write(tmp_path, MINIMAL.replace("[f16, q8_0]", "[f16, f16]")))


def test_rules_prune_with_reason(tmp_path):
    space = load_space(write(tmp_path, MINIMAL))
    check = rules_check(space)
    bad = make_candidate(space, {"type_k": "q8_0", "flash_attn": False})
    good = make_candidate(space, {"type_k": "q8_0", "flash_attn": True})
    assert check(bad) == "rule: quantized K needs flash attention here"
    assert check(good) is None
    assert count_candidates(space) == 4
    assert sum(check(c) is None for c in enumerate_candidates(space)) == 3


def test_failing_probe_blocks_only_matching_candidates(tmp_path):
    space = load_space(write(tmp_path, MINIMAL))
    probe = ProbeResult(feature="type_k=q8_0", status="fails", params={"type_k": "q8_0"}, signature="kv_dtype_unsupported")
    working = ProbeResult(feature="type_k=f16", status="works", params={"type_k": "f16"})
    pruner = Pruner([probes_check([probe, working])])
    reasons = {c.params["type_k"]: pruner.reason(c) for c in enumerate_candidates(space)}
    assert reasons["f16"] is None
    assert "probe: type_k=q8_0 fails" in reasons["q8_0"]


def test_candidate_key_is_stable_and_order_free(tmp_path):
    space = load_space(write(tmp_path, MINIMAL))
    a = make_candidate(space, {"type_k": "q8_0", "flash_attn": True})
    b = make_candidate(space, {"flash_attn": True, "type_k": "q8_0"})
    assert a.key() == b.key()
    assert a.key() != baseline(space).key()


def test_env_knobs_go_to_the_environment(tmp_path):
    text = """
name: tiny-env
engine: llamacpp
model: {name: m, path: model.gguf}
knobs:
  - {name: n_threads, values: [1, 2], default: 1}
  - {name: OMP_NUM_THREADS, kind: env, values: [null, 1, 2], default: null}
"""
    space = load_space(write(tmp_path, text))
    cand = make_candidate(space, {"OMP_NUM_THREADS": 2})
    assert cand.env == {"OMP_NUM_THREADS": "2"}
    assert "OMP_NUM_THREADS" not in cand.params
    assert baseline(space).env == {}


def test_an_objective_at_n_concurrent_streams_needs_that_level_in_the_workload(tmp_path):
    """Aggregate output tok/s with N requests in flight (`output_tps_cN`) is what a box serving
    several users is tuned for; the workload must measure that level."""
    space = load_space(write(tmp_path, MINIMAL + "workload: {concurrency: [1, 8]}\nobjective: {metric: output_tps_c8}\n"))
    assert space.objective.metric == "output_tps_c8" and space.objective.concurrency == 8
    assert load_space(write(tmp_path, MINIMAL)).objective.concurrency is None  # decode at one stream
    with pytest.raises(ConfigError, match="output_tps_c8 needs 8 in workload.concurrency"):
        load_space(write(tmp_path, MINIMAL + "workload: {concurrency: [1, 4]}\nobjective: {metric: output_tps_c8}\n"))
    with pytest.raises(ConfigError, match="objective.metric"):
        load_space(write(tmp_path, MINIMAL + "objective: {metric: output_tps_fast}\n"))


def test_the_objective_at_n_streams_is_read_from_that_wave_and_relaunches_keep_it(tmp_path):
    from autotune.bench.throughput import objective_value
    from autotune.models import Measurement, Objective
    from autotune.trial.context import TrialContext, objective_only
    from autotune.engines import get_engine

    measured = [Measurement.of("decode_tps.prose", "tok/s", "one stream", [40.0, 42.0, 41.0]),
                Measurement.of("output_tps.c8", "tok/s", "8 streams, one wave", [250.0])]
    assert objective_value(measured, Objective(metric="output_tps_c8", mad_penalty=1.0)) == pytest.approx((250.0, 250.0))  # one wave: no MAD
    assert objective_value(measured, Objective(metric="decode_tps_prose", mad_penalty=0.0)) == pytest.approx((41.0, 41.0))
    space = load_space(write(tmp_path, MINIMAL + "workload: {concurrency: [1, 8], prefill_tokens: [512]}\n"
                                                 "objective: {metric: output_tps_c8}\n"))
    ctx = TrialContext(study="s", space=space, model=space.model, engine=get_engine("llamacpp").use_space(space),
                       logs_dir=tmp_path)
    trimmed = objective_only(ctx).space.workload
    assert trimmed.concurrency == [1, 8] and trimmed.prefill_tokens == []  # the objective's wave stays
    plain = load_space(write(tmp_path, MINIMAL + "workload: {concurrency: [1, 8]}\n", "plain.yaml"))
    assert objective_only(ctx.model_copy(update={"space": plain})).space.workload.concurrency == [1]


def test_a_copy_that_names_a_field_the_model_lacks_is_refused(tmp_path):
    """pydantic's model_copy(update=...) does not validate: after a field's rename, a copy naming
    the old name set a stray attribute and kept the real field as it was (the draft schedule's
    launch kept its gates on through `{"accuracy": False}`)."""
    from autotune.engines import get_engine
    from autotune.models import GatePolicy
    from autotune.trial.context import TrialContext

    space = load_space(write(tmp_path, MINIMAL))
    ctx = TrialContext(study="s", space=space, model=space.model, engine=get_engine("llamacpp"), logs_dir=tmp_path)
    with pytest.raises(TypeError, match="TrialContext has no field accuracy"):
        ctx.model_copy(update={"accuracy": False})
    assert ctx.model_copy(update={"gates": GatePolicy.NO_ACCURACY}).gates is GatePolicy.NO_ACCURACY
    with pytest.raises(TypeError, match="SearchSpace has no field knob"):
        space.model_copy(update={"knob": []})


def test_an_objective_and_its_measurement_spell_a_metric_one_way():
    """The objective's metric and the measurement it reads meet in one vocabulary (models/space.py)."""
    from autotune.models import Objective, objective_workload, tps_measurement, tps_objective

    for workload in ("prose", "structured", "c8", "c32"):
        metric = tps_objective(workload)
        assert objective_workload(metric) == workload
        assert Objective(metric=metric).measurement_name == tps_measurement(workload)
    assert tps_measurement("c8") == "output_tps.c8" and tps_measurement("prose") == "decode_tps.prose"
    assert Objective().measurement_name is None  # decode_tps_geomean reads every prompt set
    assert Objective(metric="tokens_per_joule", energy_workload="c8").measurement_name == "tokens_per_gpu_joule.c8"
    slo = {"ttft_ms": 1000, "itl_ms": 50}
    assert Objective(metric="capacity_at_slo", slo=slo).measurement_name == "capacity_at_slo"
