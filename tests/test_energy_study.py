"""Energy end to end on a real engine: llama.cpp + Gemma 3 270M through `autotune search`, `show`
and `export`. The engine and its requests are real; the GPU is the stand-in NVML of
tests/fakes/nvml.py (llama.cpp runs on the CPU here, so the "GPU" joules are the fake's), or no NVML
and no RAPL at all, as on this VM: then every figure says "not measured (no counter)"."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.store import Store
from autotune.verdict.noise import NoiseKey
from fakes import nvml as fake_nvml
from fakes.nvml import FakeGpu, throttled_gpu
from gemma_space import GEMMA_ON_LLAMACPP, SHORT_WORKLOAD

pytestmark = pytest.mark.engine

SPACE = """
name: energy
""" + GEMMA_ON_LLAMACPP + """fixed: {{chat_format: gemma, seed: 1234, n_ctx: 2048, flash_attn: false}}
knobs:
  - {{name: n_threads, values: [1, 2], default: 1}}
""" + SHORT_WORKLOAD + """{objective}gates: {{needle: null, qeval: null{gates}}}
"""
STUDY = "energy-cpu-x1"


def write_space(tmp_path: Path, gguf: Path, objective: str = "", gates: str = "") -> Path:
    path = tmp_path / "energy.yaml"
    path.write_text(SPACE.format(alias=f"energy-{uuid.uuid4().hex[:8]}", model=gguf, objective=objective, gates=gates))
    return path


@pytest.fixture
def no_rapl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_POWERCAP_ROOT", str(tmp_path / "no-powercap"))


def test_tokens_per_joule_is_the_objective_and_the_power_gate_judges_it(tmp_path, gemma_gguf, monkeypatch, no_rapl,
                                                                        capsys):
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=300.0)])
    space = write_space(tmp_path, gemma_gguf, objective="objective: {metric: tokens_per_joule}\n",
                        gates=", max_power_w: 1000, max_gpu_j_per_token: 1000")
    db = tmp_path / "runs.db"
    assert main(["search", "--space", str(space), "--db", str(db), "--trials", "1", "--confirm-rounds", "0"]) == 0
    store = Store(db)
    [trial] = store.trials(STUDY)
    assert trial.status == "ok", trial.reason
    assert trial.energy is not None and trial.energy.gpu_method and trial.energy.gpu_method.value == "nvml_energy_counter"
    prose = trial.energy.of("prose")
    assert prose is not None and prose.gpu is not None and prose.output_tokens > 0
    assert prose.gpu.mean_power_w == pytest.approx(300.0, rel=0.05)
    assert trial.objective == pytest.approx(prose.tokens_per_gpu_joule, rel=1e-3)
    assert {g.gate: g.status for g in trial.gates} == {"gpu_j_per_token": "pass", "power": "pass"}
    # the noise relaunch of the baseline is a launch sample of this objective, told apart by its workload
    metrics = {row["metric"] for row in store.db["launch_samples"].rows}
    assert metrics == {"tokens_per_joule.prose"}
    out = capsys.readouterr().out
    assert "tok/J" in out and "energy per workload (GPU only)" in out
    capsys.readouterr()
    assert main(["export", "--db", str(db), "--study", STUDY, "--trial", "0"]) == 0
    recipe = yaml.safe_load(capsys.readouterr().out)
    assert any(line.startswith("GPU energy only") for line in recipe["energy"])
    assert any(n["name"] == "tokens_per_gpu_joule.prose" and "GPU energy only" in n["condition"] for n in recipe["numbers"])


def test_a_throttled_gpu_is_flagged_and_its_launches_join_no_noise_pool(tmp_path, gemma_gguf, monkeypatch, no_rapl,
                                                                       capsys):
    fake_nvml.install(monkeypatch, [throttled_gpu()])
    db = tmp_path / "runs.db"
    assert main(["search", "--space", str(write_space(tmp_path, gemma_gguf)), "--db", str(db), "--trials", "1",
                 "--confirm-rounds", "0"]) == 0
    store = Store(db)
    [trial] = store.trials(STUDY)
    assert trial.energy is not None and trial.energy.throttled
    rows = list(store.db["launch_samples"].rows)
    assert len(rows) == 2 and all(row["throttled"] == 1 for row in rows)  # the trial and its noise relaunch
    assert store.launch_groups(NoiseKey(host=rows[0]["host_key"], engine="llamacpp", metric="decode_tps_geomean")) == []
    capsys.readouterr()
    assert main(["show", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "slowed GPU trial 0: the GPU throttled (hw_thermal_slowdown)" in out
    assert "left out of the launch-noise estimate" in out


def test_a_host_without_nvml_or_rapl_says_not_measured(tmp_path, gemma_gguf, monkeypatch, no_rapl, capsys):
    fake_nvml.no_nvml(monkeypatch)
    db = tmp_path / "runs.db"
    assert main(["search", "--space", str(write_space(tmp_path, gemma_gguf, gates=", max_power_w: 500")), "--db",
                 str(db), "--trials", "1", "--confirm-rounds", "0"]) == 0
    [trial] = Store(db).trials(STUDY)
    assert trial.status == "ok" and trial.energy is not None and trial.energy.gpu_method is None
    assert all(w.gpu is None and w.cpu is None for w in trial.energy.workloads)
    assert not [m for m in trial.measurements if m.name.startswith(("gpu_", "tokens_per_gpu_joule"))]
    [power] = trial.gates
    assert power.status == "unchecked"  # never a pass without evidence
    capsys.readouterr()
    assert main(["show", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "GPU energy not measured (no counter) in trial(s) 0" in out and "no CPU package energy (RAPL)" in out
    capsys.readouterr()
    assert main(["export", "--db", str(db), "--trial", "0"]) == 0
    recipe = yaml.safe_load(capsys.readouterr().out)
    assert recipe["energy"][0].startswith("GPU energy not measured (no counter)")
    report = tmp_path / "report.html"
    assert main(["report", "--db", str(db), "-o", str(report)]) == 0
    html = report.read_text()
    assert 'id="energy"' in html and "GPU energy not measured (no counter) in trial(s) 0" in html


def test_the_weighted_speed_energy_objective_its_launch_samples_and_its_name_everywhere(tmp_path, gemma_gguf, monkeypatch, no_rapl,
                                                                         capsys):
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=200.0)])
    weights = ("objective: {metric: speed_energy, weights: [{quantity: tokens_per_s, workload: prose, weight: 0.5}, "
               "{quantity: tokens_per_joule, workload: prose, weight: 0.5}]}\n")
    db = tmp_path / "runs.db"
    assert main(["search", "--space", str(write_space(tmp_path, gemma_gguf, objective=weights)), "--db", str(db),
                 "--trials", "1", "--confirm-rounds", "0"]) == 0
    store = Store(db)
    [trial] = store.trials(STUDY)
    assert trial.status == "ok", trial.reason
    by_name = {m.name: m.median for m in trial.measurements}
    expected = (by_name["decode_tps.prose"] * by_name["tokens_per_gpu_joule.prose"]) ** 0.5
    assert trial.objective == pytest.approx(expected, rel=1e-3)
    assert {row["metric"] for row in store.db["launch_samples"].rows} == {
        "speed_energy(decode_tps.prose^0.5,tokens_per_gpu_joule.prose^0.5)"}
    assert "(tok/s)^0.5(tok/J)^0.5" in capsys.readouterr().out
    assert main(["show", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(tok/s prose)^0.5 x (tok/J prose)^0.5" in out
    assert main(["export", "--db", str(db), "--trial", "0"]) == 0
    recipe = yaml.safe_load(capsys.readouterr().out)
    assert recipe["verdict"]["objective"].startswith("weighted geometric mean (tok/s prose)^0.5 x (tok/J prose)^0.5")
    report = tmp_path / "report.html"
    assert main(["report", "--db", str(db), "-o", str(report)]) == 0
    assert "(tok/s)^0.5(tok/J)^0.5" in report.read_text()
