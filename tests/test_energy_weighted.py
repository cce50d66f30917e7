"""The weighted speed x energy objective (issue 33): `objective.metric: speed_energy` with its terms
written in the space, validated before runs.db opens, valued from a launch's measurements (the GPU
joules from the stand-in NVML of tests/fakes/nvml.py), its noise and launch samples its own."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from autotune.bench.energy import EnergyMeter, energy_measurements
from autotune.bench.throughput import MeasurementFailed, objective_value
from autotune.models import Measurement, Objective, RequestResult, SearchSpace
from autotune.space.fingerprint import experiment, fingerprint
from fakes import nvml as fake_nvml
from fakes.nvml import FakeGpu

HALF = [{"quantity": "tokens_per_s", "workload": "prose", "weight": 0.5},
        {"quantity": "tokens_per_joule", "workload": "prose", "weight": 0.5}]


def space_with(**parts: object) -> SearchSpace:
    data = {"name": "e", "engine": "llamacpp", "model": {"name": "m", "path": "/models/m.gguf"}, "knobs": [], **parts}
    return SearchSpace.model_validate(data)


def weighted(terms: list[dict[str, object]] = HALF, **rest: object) -> Objective:
    return Objective.model_validate({"metric": "speed_energy", "weights": terms, **rest})


def test_the_weighted_form_names_its_terms_unit_and_samples():
    objective = space_with(objective={"metric": "speed_energy", "weights": [
        {"quantity": "tokens_per_s", "workload": "c8", "weight": 0.25},
        {"quantity": "tokens_per_joule", "workload": "c8", "weight": 0.75}]}, workload={"concurrency": [1, 8]}).objective
    assert objective.gpu_energy and objective.waves == [8] and objective.concurrency is None
    assert objective.unit == "(tok/s)^0.25(tok/J)^0.75"
    assert objective.sample_metric == "speed_energy(output_tps.c8^0.25,tokens_per_gpu_joule.c8^0.75)"
    assert "(tok/s c8)^0.25 x (tok/J c8)^0.75" in objective.label and "GPU energy only" in objective.label
    assert not Objective().gpu_energy and Objective(metric="tokens_per_joule").gpu_energy


@pytest.mark.parametrize(("objective", "workload", "words"), [
    ({"metric": "speed_energy"}, {}, "at least one tokens_per_s and one tokens_per_joule"),
    ({"metric": "speed_energy", "weights": HALF[:1]}, {}, "at least one tokens_per_s and one tokens_per_joule"),
    ({"metric": "speed_energy", "weights": [HALF[0], {**HALF[1], "weight": 0.4}]}, {}, "sum to 0.9, not 1"),
    ({"metric": "speed_energy", "weights": [HALF[0], {**HALF[1], "weight": 0}]}, {}, "greater than 0"),
    ({"metric": "speed_energy", "weights": [HALF[0], {**HALF[1], "workload": "prefill"}]}, {}, "unknown workload"),
    ({"metric": "speed_energy", "weights": [{**HALF[0], "weight": 0.25}, {**HALF[0], "weight": 0.25}, HALF[1]]}, {},
     "tokens_per_s of prose twice"),
    ({"metric": "speed_energy", "weights": [HALF[0], {**HALF[1], "quantity": "joules"}]}, {},
     "Input should be 'tokens_per_s' or 'tokens_per_joule'"),
    ({"metric": "decode_tps_prose", "weights": HALF}, {}, "used by metric speed_energy only"),
    ({"metric": "speed_energy", "weights": [HALF[0], {**HALF[1], "workload": "c4"}]}, {},
     "tokens_per_joule of c4 needs 4 in workload.concurrency"),
    ({"metric": "speed_energy", "weights": [{**HALF[0], "workload": "structured"}, HALF[1]]},
     {"prompt_sets": ["prose"]}, "tokens_per_s of structured is a prompt set the workload does not decode"),
])
def test_bad_weights_are_refused(objective, workload, words):
    with pytest.raises(ValidationError, match=words):
        space_with(objective=objective, workload=workload)


def test_bad_weights_exit_2_before_runs_db_opens(tmp_path, capsys):
    from autotune.cli import main

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "engine": "llamacpp", "model": {"name": "m", "path": str(model)},
                                    "knobs": [], "objective": {"metric": "speed_energy", "weights": HALF[:1]}}))
    db = tmp_path / "runs.db"
    assert main(["search", "--space", str(path), "--db", str(db)]) == 2
    assert "tokens_per_joule term" in capsys.readouterr().err.replace("\n", " ") and not db.exists()


def test_the_value_is_the_weighted_geometric_mean_and_the_score_takes_off_the_speed_noise(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOTUNE_POWERCAP_ROOT", str(tmp_path / "no-powercap"))
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=100.0)])
    meter = EnergyMeter.open(None)
    with meter.window("prose"):
        time.sleep(0.2)
        meter.request_done(RequestResult(ok=True, n_out=100))
    energy = meter.record()
    meter.close()
    speed = Measurement.of("decode_tps.prose", "tok/s", "decode", [40.0, 50.0, 60.0])
    measurements = [speed, *energy_measurements(energy)]
    tok_j = energy.of("prose").tokens_per_gpu_joule
    objective = weighted([{**HALF[0], "weight": 0.25}, {**HALF[1], "weight": 0.75}])
    value, score = objective_value(measurements, objective)
    assert value == pytest.approx(50.0 ** 0.25 * tok_j ** 0.75, rel=1e-3)
    assert score == pytest.approx(value * (1 - 0.25 * 1.4826 * speed.mad / 50.0))
    # a 10 % faster config at the same tok/J scores 1.1 ** 0.25 higher: the weights are the trade
    faster = [Measurement.of("decode_tps.prose", "tok/s", "decode", [55.0]), *energy_measurements(energy)]
    assert objective_value(faster, objective)[0] / value == pytest.approx(math.pow(1.1, 0.25), rel=1e-3)
    with pytest.raises(MeasurementFailed, match="tokens_per_gpu_joule.prose not measured .no GPU energy counter"):
        objective_value([speed], objective)


def test_the_weights_are_part_of_the_experiment():
    half = space_with(objective={"metric": "speed_energy", "weights": HALF})
    skewed = space_with(objective={"metric": "speed_energy", "weights": [{**HALF[0], "weight": 0.3},
                                                                         {**HALF[1], "weight": 0.7}]})
    assert fingerprint(half) != fingerprint(skewed)
    assert "weights" not in experiment(space_with())["objective"]  # unset: studies made before keep their fingerprint


def test_a_relaunch_measures_the_waves_the_terms_read(tmp_path: Path):
    from autotune.engines import get_engine
    from autotune.trial.context import TrialContext, objective_only

    space = space_with(objective={"metric": "speed_energy", "weights": [{**HALF[0], "workload": "c4"}, HALF[1]]},
                       workload={"concurrency": [1, 4, 8], "prefill_tokens": [512]})
    ctx = TrialContext(study="s", space=space, model=space.model, engine=get_engine("llamacpp").use_space(space),
                       logs_dir=tmp_path)
    work = objective_only(ctx).space.workload
    assert work.concurrency == [1, 4] and work.prefill_tokens == [] and work.prompt_sets == space.workload.prompt_sets
