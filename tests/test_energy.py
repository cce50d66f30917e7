"""Energy per workload and the GPU's state (issue 33), without a GPU: the meter over a stand-in
NVML (tests/fakes/nvml.py: a counter that advances with time, a GPU without the counter, a throttled
GPU) and a powercap tree in a temp dir; the objective and the gates as a space states them."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from autotune.bench import rapl
from autotune.bench.energy import EnergyMeter, energy_measurements
from autotune.bench.throughput import MeasurementFailed, objective_value
from autotune.gates.score import evaluate_gates
from autotune.models import (
    Candidate,
    ClockEvent,
    EnergyMethod,
    Gates,
    GpuStateFlag,
    Objective,
    RequestResult,
    SearchSpace,
    TrialResult,
)
from autotune.store import Store
from autotune.verdict.gpu_state import study_usual_clock, trial_flags
from autotune.verdict.noise import NoiseKey
from fakes import nvml as fake_nvml
from fakes.nvml import FakeGpu, throttled_gpu
from stand_in import placeholder_gguf

WINDOW_S = 0.3


def served(tokens: int) -> RequestResult:
    return RequestResult(ok=True, n_out=tokens)


def run_window(meter: EnergyMeter, name: str = "prose", tokens: int = 120, seconds: float = WINDOW_S) -> None:
    with meter.window(name):
        time.sleep(seconds)
        meter.request_done(served(tokens))
        meter.request_done(RequestResult(ok=False, n_out=50))  # a failed request's tokens are not counted


@pytest.fixture
def no_rapl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "no-powercap"
    monkeypatch.setenv("AUTOTUNE_POWERCAP_ROOT", str(root))
    return root


def test_the_counter_gives_joules_of_every_gpu_in_the_window(monkeypatch, no_rapl):
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=300.0), FakeGpu(power_w=200.0)])
    meter = EnergyMeter.open(None)
    meter.before_launch(idle_s=0.2)
    run_window(meter)
    energy = meter.record()
    meter.close()
    assert energy.gpu_method is EnergyMethod.COUNTER and energy.gpus == [0, 1] and energy.absent is None
    assert energy.idle_gpu_power_w == pytest.approx(500.0, rel=0.1)
    [w] = energy.workloads
    assert w.gpu is not None and w.output_tokens == 120
    assert w.gpu.joules == pytest.approx(500.0 * w.gpu.seconds, rel=0.05)
    assert w.gpu.seconds == pytest.approx(WINDOW_S, abs=0.1)
    assert w.gpu.mean_power_w == pytest.approx(500.0, rel=0.05)
    assert w.gpu_j_per_token == pytest.approx(w.gpu.joules / 120)
    assert w.tokens_per_gpu_joule == pytest.approx(120 / w.gpu.joules)
    assert w.active_gpu_j_per_token is not None and w.active_gpu_j_per_token < 0.2 * w.gpu_j_per_token  # idle = load
    assert w.cpu is None  # no RAPL: absent, never zero
    assert [s.sm_clock_mhz for s in w.gpu_state] == [1980, 1980] and not energy.throttled
    names = {m.name: m for m in energy_measurements(energy)}
    assert names["tokens_per_gpu_joule.prose"].median == pytest.approx(120 / w.gpu.joules, rel=1e-3)
    assert "GPU energy only" in names["gpu_j_per_token.prose"].condition


def test_a_gpu_without_the_counter_is_read_by_power_samples_at_10_hz_or_more(monkeypatch, no_rapl):
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=250.0, counter=False)])
    meter = EnergyMeter.open(None)
    meter.before_launch(idle_s=0.2)
    run_window(meter, seconds=0.5)
    energy = meter.record()
    assert energy.gpu_method is EnergyMethod.POWER_SAMPLES
    [w] = energy.workloads
    assert w.gpu is not None and w.gpu.method is EnergyMethod.POWER_SAMPLES
    assert w.gpu.joules == pytest.approx(250.0 * w.gpu.seconds, rel=0.02)
    assert energy.idle_gpu_power_w == pytest.approx(250.0)


def test_power_samples_come_at_10_hz_or_more(monkeypatch, no_rapl):
    fake = fake_nvml.install(monkeypatch, [FakeGpu(counter=False)])
    reads: list[float] = []
    power = fake.nvmlDeviceGetPowerUsage
    fake.nvmlDeviceGetPowerUsage = lambda gpu: (reads.append(time.monotonic()), power(gpu))[1]
    meter = EnergyMeter.open(None)
    reads.clear()
    run_window(meter, seconds=1.0)
    assert len(reads) >= 10


def test_no_nvml_and_no_rapl_is_absent_never_zero(monkeypatch, no_rapl):
    fake_nvml.no_nvml(monkeypatch)
    meter = EnergyMeter.open(None)
    started = time.monotonic()
    meter.before_launch()
    assert time.monotonic() - started < 0.1  # nothing to read: no idle wait
    run_window(meter, seconds=0.01)
    energy = meter.record()
    assert energy.gpu_method is None and "nvidia-ml-py" in (energy.absent or "")
    assert energy.workloads[0].gpu is None and energy.workloads[0].cpu is None
    assert energy.workloads[0].gpu_j_per_token is None
    assert energy_measurements(energy) == []


def test_an_nvml_that_fails_to_start_is_absent(monkeypatch, no_rapl):
    fake_nvml.install(monkeypatch, [FakeGpu()], init_error=True)
    energy = EnergyMeter.open(None).record()
    assert energy.gpu_method is None and energy.absent and energy.absent.startswith("no NVML")


def test_a_gpu_with_neither_counter_nor_power_says_no_counter(monkeypatch, no_rapl):
    fake_nvml.install(monkeypatch, [FakeGpu(counter=False, power=False)])
    meter = EnergyMeter.open(None)
    run_window(meter, seconds=0.05)
    energy = meter.record()
    assert energy.gpu_method is None and "no counter" in (energy.absent or "")
    assert energy.workloads[0].gpu is None and energy.workloads[0].gpu_state  # clocks are still read


def test_cuda_visible_devices_picks_the_gpus_counted(monkeypatch, no_rapl):
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=100.0), FakeGpu(power_w=400.0, uuid="GPU-abc")])
    meter = EnergyMeter.open("1")
    run_window(meter)
    w = meter.record().workloads[0]
    assert meter.gpus == [1] and w.gpu is not None and w.gpu.mean_power_w == pytest.approx(400.0, rel=0.05)
    assert EnergyMeter.open("GPU-abc").gpus == [1]
    assert EnergyMeter.open("").absent is not None  # CUDA_VISIBLE_DEVICES="" hides every GPU


def test_a_throttled_gpu_is_flagged_and_low_clocks_against_the_usual(monkeypatch, no_rapl):
    fake_nvml.install(monkeypatch, [throttled_gpu()])
    meter = EnergyMeter.open(None)
    run_window(meter, seconds=0.1)
    hot = meter.record()
    [state] = hot.workloads[0].gpu_state
    assert ClockEvent.HW_THERMAL in state.events and state.temperature_c == 89 and hot.throttled
    fake_nvml.install(monkeypatch, [FakeGpu(sm_mhz=1500, reasons=fake_nvml.SW_POWER_CAP)])
    meter = EnergyMeter.open(None)
    run_window(meter, seconds=0.1)
    capped = meter.record()
    assert not capped.throttled  # a power cap reached under load is the config's own cost: recorded only
    assert ClockEvent.SW_POWER_CAP in capped.workloads[0].gpu_state[0].events
    assert trial_flags(hot, 1980.0) == [GpuStateFlag.THROTTLED, GpuStateFlag.LOW_CLOCKS]
    assert trial_flags(capped, 1980.0) == [GpuStateFlag.LOW_CLOCKS]  # 24 % below the usual
    assert trial_flags(capped, 1600.0) == []  # within the share


def powercap_tree(root: Path, energy_uj: int, max_uj: int = 262_143_328_850) -> Path:
    for zone, value in (("intel-rapl:0", energy_uj), ("intel-rapl:0:0", 5), ("intel-rapl:1", energy_uj)):
        (root / zone).mkdir(parents=True, exist_ok=True)
        (root / zone / "energy_uj").write_text(f"{value}\n")
        (root / zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return root


def test_rapl_reads_package_zones_and_wraps(tmp_path):
    root = powercap_tree(tmp_path / "powercap", 1_000)
    zones = rapl.packages(root)
    assert [z.index for z in zones] == [0, 1]  # the core sub-zone is inside package 0: not added again
    before = rapl.read_all(zones)
    powercap_tree(root, 3_000_000)
    after = rapl.read_all(zones)
    assert before and after and rapl.joules_between(zones, before, after) == pytest.approx(2 * 2.999)
    assert rapl.delta_uj(before=990, after=10, max_uj=1000) == 20  # across the wrap
    assert rapl.packages(tmp_path / "none") == []


def test_a_readable_rapl_gives_cpu_energy_in_the_window(tmp_path, monkeypatch):
    root = powercap_tree(tmp_path / "powercap", 1_000)
    monkeypatch.setenv("AUTOTUNE_POWERCAP_ROOT", str(root))
    fake_nvml.no_nvml(monkeypatch)
    meter = EnergyMeter.open(None)
    with meter.window("prose"):
        powercap_tree(root, 10_001_000)
    [w] = meter.record().workloads
    assert w.gpu is None and w.cpu is not None and w.cpu.method is EnergyMethod.RAPL
    assert w.cpu.joules == pytest.approx(20.0) and w.cpu.devices == [0, 1]


def test_rapl_unreadable_is_absent(tmp_path):
    root = powercap_tree(tmp_path / "powercap", 1_000)
    (root / "intel-rapl:0" / "energy_uj").chmod(0)
    (root / "intel-rapl:1" / "energy_uj").unlink()
    readable = [z.index for z in rapl.packages(root)]
    assert 1 not in readable  # no counter file: no zone (0 stays only where root reads anything)


def test_this_hosts_rapl_when_readable():
    zones = rapl.packages(Path(rapl.DEFAULT_ROOT))
    if not zones:
        pytest.skip("no readable RAPL package zone on this host (/sys/class/powercap)")
    before = rapl.read_all(zones)
    time.sleep(0.2)
    after = rapl.read_all(zones)
    assert before and after and rapl.joules_between(zones, before, after) > 0


# ------------------------------------------------------------------ objective and gates in the space

def space_with(**parts: object) -> SearchSpace:
    data = {"name": "e", "engine": "llamacpp", "model": {"name": "m", "path": "/models/m.gguf"}, "knobs": [], **parts}
    return SearchSpace.model_validate(data)


def test_tokens_per_joule_is_an_objective_of_one_workload():
    assert space_with(objective={"metric": "tokens_per_joule"}).objective.energy_of == "prose"
    wave = space_with(objective={"metric": "tokens_per_joule", "energy_workload": "c8"},
                      workload={"concurrency": [1, 8]}).objective
    assert wave.concurrency == 8 and wave.unit == "tok/J" and wave.sample_metric == "tokens_per_joule.c8"
    assert "GPU" in wave.label and "GPU only" in wave.short
    for bad, words in (
        ({"objective": {"metric": "tokens_per_joule", "energy_workload": "c8"}}, "8 in workload.concurrency"),
        ({"objective": {"metric": "tokens_per_joule", "energy_workload": "prefill"}}, "unknown energy_workload"),
        ({"objective": {"metric": "decode_tps_prose", "energy_workload": "prose"}}, "used by metric tokens_per_joule"),
        ({"objective": {"metric": "tokens_per_joule", "energy_workload": "structured"},
          "workload": {"prompt_sets": ["prose"]}}, "prompt set the workload does not decode"),
        ({"gates": {"max_power_w": 0}}, "greater than 0"),
        ({"gates": {"max_gpu_j_per_token": -1.0}}, "greater than 0"),
    ):
        with pytest.raises(ValidationError, match=words):
            space_with(**bad)


def test_a_bad_energy_gate_exits_2_before_runs_db_opens(tmp_path, capsys):
    from autotune.cli import main

    model = placeholder_gguf(tmp_path)
    path = tmp_path / "bad.yaml"
    db = tmp_path / "runs.db"
    for bad, words in (({"gates": {"max_power_w": -5}}, "max_power_w"),
                       ({"objective": {"metric": "tokens_per_joule", "energy_workload": "c4"}}, "energy_workload")):
        path.write_text(yaml.safe_dump({"name": "e", "engine": "llamacpp", "model": {"name": "m", "path": str(model)},
                                        "knobs": [], **bad}))
        assert main(["search", "--space", str(path), "--db", str(db)]) == 2
        assert words in capsys.readouterr().err.replace("\n", " ") and not db.exists()


def energy_trial(monkeypatch, gpus: list[FakeGpu], number: int = 1, tokens: int = 100) -> TrialResult:
    fake_nvml.install(monkeypatch, gpus)
    meter = EnergyMeter.open(None)
    meter.before_launch(idle_s=0.05, settle_s=0.0)  # a throttled stand-in never reports idle
    run_window(meter, "prose", tokens=tokens, seconds=0.2)
    run_window(meter, "prefill", tokens=4, seconds=0.05)
    energy = meter.record()
    meter.close()
    return TrialResult(study="s", number=number, candidate=Candidate(engine="llamacpp", params={"n": number}),
                       status="ok", measurements=energy_measurements(energy), energy=energy)


def test_the_objective_reads_tokens_per_gpu_joule_and_fails_without_it(monkeypatch, no_rapl):
    trial = energy_trial(monkeypatch, [FakeGpu(power_w=100.0)])
    value, score = objective_value(trial.measurements, Objective(metric="tokens_per_joule"))
    assert value == score == pytest.approx(trial.energy.of("prose").tokens_per_gpu_joule, rel=1e-3)
    assert trial.energy.of("prefill").gpu_j_per_token is None  # two tokens per prompt: no J/token of prefill
    with pytest.raises(MeasurementFailed, match="no GPU energy counter"):
        objective_value([], Objective(metric="tokens_per_joule"))


def test_energy_gates_pass_fail_and_unchecked(monkeypatch, no_rapl):
    trial = energy_trial(monkeypatch, [FakeGpu(power_w=100.0)])
    per_token = trial.energy.of("prose").gpu_j_per_token
    gates = lambda **g: {o.gate: o for o in evaluate_gates(trial, None, Gates(needle=None, qeval=None, **g))}  # noqa: E731
    assert gates(max_gpu_j_per_token=per_token * 1.1)["gpu_j_per_token"].status == "pass"
    assert gates(max_gpu_j_per_token=per_token * 0.9)["gpu_j_per_token"].status == "fail"
    assert gates(max_power_w=150)["power"].status == "pass"
    assert gates(max_power_w=50)["power"].status == "fail"
    fake_nvml.no_nvml(monkeypatch)
    meter = EnergyMeter.open(None)
    run_window(meter, seconds=0.01)
    bare = trial.model_copy(update={"energy": meter.record(), "measurements": []})
    outcomes = {o.gate: o for o in evaluate_gates(bare, None, Gates(needle=None, qeval=None, max_power_w=50,
                                                                        max_gpu_j_per_token=1.0))}
    assert outcomes["power"].status == outcomes["gpu_j_per_token"].status == "unchecked"
    assert "nvidia-ml-py" in outcomes["power"].detail


def test_a_slowed_launch_joins_no_noise_pool(monkeypatch, no_rapl, tmp_path):
    steady = energy_trial(monkeypatch, [FakeGpu()])
    hot = energy_trial(monkeypatch, [throttled_gpu()])
    slow = energy_trial(monkeypatch, [FakeGpu(sm_mhz=1400)])
    assert study_usual_clock([steady, hot, slow]) == pytest.approx(1690.0)  # the throttled one is not the usual
    store = Store(tmp_path / "runs.db")
    cand = Candidate(engine="llamacpp", params={})
    key = NoiseKey(host="h", engine="llamacpp", metric="m")
    for value, trial in ((100.0, steady), (101.0, steady), (99.0, steady), (60.0, hot), (70.0, slow)):
        store.add_launch_sample(key, "s", cand, value, "trial", 0, energy=trial.energy)
    store.add_launch_sample(key, "s", cand, 100.5, "trial", 0)  # stored before: no state
    assert store.launch_groups(key) == [[100.0, 101.0, 99.0, 100.5]]


@pytest.mark.parametrize(("objective", "instead"), [
    ({"metric": "tokens_per_joule"}, "decode_tps_prose"),
    ({"metric": "speed_energy", "weights": [{"quantity": "tokens_per_joule", "workload": "c4", "weight": 0.5},
                                            {"quantity": "tokens_per_s", "workload": "c4", "weight": 0.5}]},
     "output_tps_c4"),
], ids=["tokens_per_joule", "speed_energy"])
def test_an_energy_objective_on_a_host_without_energy_exits_3_before_runs_db_opens(tmp_path, monkeypatch, no_rapl,
                                                                                  capsys, objective, instead):
    from autotune.cli import main

    pytest.importorskip("llama_cpp", reason="pip install -e '.[llamacpp]'")
    fake_nvml.no_nvml(monkeypatch)
    model = placeholder_gguf(tmp_path)
    path = tmp_path / "energy.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "engine": "llamacpp", "model": {"name": "m", "path": str(model)},
                                    "knobs": [], "objective": objective,
                                    "workload": {"concurrency": [1, 4]}}))
    db = tmp_path / "runs.db"
    assert main(["search", "--space", str(path), "--db", str(db)]) == 3
    err = capsys.readouterr().err.replace("\n", " ")
    assert "needs the GPU's energy" in err and f"objective.metric {instead})" in err and not db.exists()
    assert main(["search", "--space", str(path), "--db", str(db), "--dry-run"]) == 0  # a dry run reads nothing


def test_the_gpus_counted_are_the_ones_the_launch_uses(monkeypatch):
    from autotune.models import LaunchSpec, NodeLaunch
    from autotune.trial.run import visible_gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    one = LaunchSpec(engine="vllm", nodes=[NodeLaunch(argv=["vllm"])], port=1)
    cand = lambda **p: Candidate(engine="vllm", params=p)  # noqa: E731
    assert visible_gpus(one, cand()) is None  # nothing says: every GPU of the host
    assert visible_gpus(one, cand(tensor_parallel_size=2, pipeline_parallel_size=2)) == "0,1,2,3"
    assert visible_gpus(one, cand(tensor_parallel_size=None)) is None
    pinned = LaunchSpec(engine="vllm", nodes=[NodeLaunch(argv=["vllm"], env={"CUDA_VISIBLE_DEVICES": "3"})], port=1)
    assert visible_gpus(pinned, cand(tensor_parallel_size=1)) == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    assert visible_gpus(one, cand(tensor_parallel_size=1)) == "5,6"


@pytest.mark.parametrize("busy", [
    # H200, 2026-12-03: the second trial read 127 W at 1980 MHz, no idle reason, an engine stopped a second before
    dict(reasons=0),
    # H200 and H100, 2026-12-06: every trial after the first read 126-151 W with NVML's gpu_idle reason
    # already set, the SM clock still at its maximum; after a CUDA process exits it stays there 2-4 s
    dict(reasons=fake_nvml.GPU_IDLE, max_sm_mhz=1980),
], ids=["no-idle-reason", "idle-reason-at-full-clock"])
def test_the_idle_power_waits_for_the_gpu_to_be_at_rest(monkeypatch, no_rapl, busy):
    """The idle power is read once the GPU gives the idle reason with its clock down (78 W at 345 MHz
    here), never from a GPU still at full clock after the last engine."""
    gpu = FakeGpu(power_w=127.0, sm_mhz=1980, **busy)

    def rest() -> None:
        time.sleep(0.6)
        gpu.power_w, gpu.sm_mhz, gpu.reasons = 78.0, 345, fake_nvml.GPU_IDLE
        gpu.base_mj, gpu.start = gpu.energy_mj(), time.monotonic()

    fake_nvml.install(monkeypatch, [gpu])
    meter = EnergyMeter.open(None)
    threading.Thread(target=rest, daemon=True).start()
    meter.before_launch(idle_s=0.2)
    meter.close()
    assert meter.idle_gpu_w == pytest.approx(78.0, rel=0.1)
    assert [(s.sm_clock_mhz, s.events) for s in meter.start_state] == [(345, [ClockEvent.GPU_IDLE])]


def test_a_gpu_that_never_reports_idle_gives_no_idle_power(monkeypatch, no_rapl):
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=127.0, reasons=0)])
    meter = EnergyMeter.open(None)
    started = time.monotonic()
    meter.before_launch(idle_s=0.2, settle_s=0.5)
    meter.close()
    assert time.monotonic() - started < 2.0
    assert meter.idle_gpu_w is None  # absent, never a busy GPU's power passed off as idle


def test_no_idle_wait_when_no_idle_power_is_read(monkeypatch, no_rapl):
    """NVML gives neither counter nor power: no idle power can be read, so a GPU that never says
    it is idle must not hold the launch for the settle time."""
    fake_nvml.install(monkeypatch, [FakeGpu(counter=False, power=False, reasons=0)])
    meter = EnergyMeter.open(None)
    assert meter.method is None
    started = time.monotonic()
    meter.before_launch(idle_s=0.05, settle_s=30.0)
    meter.close()
    assert time.monotonic() - started < 10.0
    assert meter.idle_gpu_w is None and len(meter.start_state) == 1


def test_an_idle_read_at_full_clock_is_not_shown_as_idle():
    """Trials stored before the idle read waited for the clock to drop (H200, 2026-12-06: trial 1
    read 151 W at 1980 MHz of 1980 with gpu_idle set, trial 0 76 W at 345 MHz) keep their reading
    in runs.db, but `show`, the report and the recipe give no idle and no active J/token for them."""
    from autotune.models import EnergyReading, GpuState, TrialEnergy, WorkloadEnergy
    from autotune.output.energy import recipe_lines, workload_row

    def trial(idle: float, clock: float) -> TrialEnergy:
        reading = EnergyReading(joules=428.2, seconds=0.9, mean_power_w=477.3, idle_power_w=idle,
                                method=EnergyMethod.COUNTER, devices=[0])
        return TrialEnergy(gpus=[0], gpu_method=EnergyMethod.COUNTER, idle_gpu_power_w=idle,
                           start_state=[GpuState(index=0, sm_clock_mhz=clock, max_sm_clock_mhz=1980.0,
                                                 events=[ClockEvent.GPU_IDLE])],
                           workloads=[WorkloadEnergy(workload="c8", output_tokens=2048, gpu=reading)])

    held, rested = trial(151.35, 1980.0), trial(76.26, 345.0)
    assert not held.idle_at_rest and rested.idle_at_rest
    assert held.idle_gpu_power_w == 151.35  # stored as read: nothing is dropped
    row = workload_row(1, held, held.workloads[0])
    assert row[4] == "477 (not at rest)" and row[7] == "-"
    assert workload_row(0, rested, rested.workloads[0])[7] == "0.1756"  # (428.2 - 76.26 x 0.9) / 2048
    assert any("idle not read: the GPU was still at full clock" in line for line in recipe_lines(
        TrialResult(study="s", number=1, candidate=Candidate(engine="vllm", params={}), status="ok", energy=held), []))
