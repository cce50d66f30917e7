"""A multi-node trial's GPU energy (issue 33): every node's GPUs read in the same pass at each window
boundary, summed, each node's part recorded. Two "nodes" on this host, each with its own GPU of the
stand-in NVML (tests/fakes/nvml.py), as Ray's raylets of one GPU each on a multi-GPU host; the
launches are the vLLM engine's real cluster renders; a node on another host is not read."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from autotune.bench.energy import EnergyMeter, energy_measurements
from autotune.engines.vllm import VllmEngine
from autotune.launchers.cluster import local_cluster
from autotune.models import Candidate, Cluster, ClusterNode, ModelSpec, RequestResult, TrialResult
from autotune.output.energy import multi_node_line, recipe_lines
from autotune.trial.run import gpus_by_node
from fakes import nvml as fake_nvml
from fakes.nvml import FakeGpu

MODEL = ModelSpec(name="m", path="/models/m")
WINDOW_S = 0.3


@pytest.fixture(autouse=True)
def no_rapl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_POWERCAP_ROOT", str(tmp_path / "no-powercap"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("DOCKER_HOST", raising=False)


def measured(meter: EnergyMeter, tokens: int = 150) -> None:
    meter.before_launch(idle_s=0.05)
    with meter.window("prose"):
        time.sleep(WINDOW_S)
        meter.request_done(RequestResult(ok=True, n_out=tokens))


def two_node_launch(cluster: Cluster):
    return VllmEngine(python=sys.executable).render_cluster(
        Candidate(engine="vllm", params={"tensor_parallel_size": 2}), MODEL, 8000, cluster)


@pytest.mark.parametrize("counter", [True, False], ids=["energy counter", "power samples"])
def test_two_nodes_on_this_host_are_summed_with_each_nodes_part(monkeypatch, counter):
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=300.0, counter=counter), FakeGpu(power_w=200.0, counter=counter)])
    meter = EnergyMeter.open_nodes({0: "0", 1: "1"}, nodes=2)
    measured(meter)
    energy = meter.record()
    meter.close()
    assert (energy.nodes_counted, energy.nodes, energy.gpus) == (2, 2, [0, 1])
    assert energy.idle_gpu_power_w == pytest.approx(500.0, rel=0.05)
    gpu = energy.of("prose").gpu
    assert gpu is not None and gpu.mean_power_w == pytest.approx(500.0, rel=0.05)
    parts = {p.node: p for p in gpu.nodes}
    assert parts[0].devices == [0] and parts[1].devices == [1]
    assert parts[0].joules / gpu.seconds == pytest.approx(300.0, rel=0.05)
    assert parts[1].joules / gpu.seconds == pytest.approx(200.0, rel=0.05)
    assert sum(p.joules for p in gpu.nodes) == pytest.approx(gpu.joules, abs=0.01)
    assert gpu.skew_ms is not None and gpu.skew_ms < 50
    # every node counted: the trial has its J/token, of both nodes' GPUs
    by_name = {m.name: m.median for m in energy_measurements(energy)}
    assert by_name["gpu_j_per_token.prose"] == pytest.approx(gpu.joules / 150, rel=1e-3)


def test_a_slow_nodes_reads_shift_both_boundaries_and_the_skew_says_so(monkeypatch):
    fake = fake_nvml.install(monkeypatch, [FakeGpu(power_w=300.0), FakeGpu(power_w=300.0)])
    fast = fake.nvmlDeviceGetTotalEnergyConsumption

    def slow_second(gpu: FakeGpu) -> int:
        if gpu is fake.nvmlDeviceGetHandleByIndex(1):
            time.sleep(0.03)  # a node whose reading takes 30 ms to come back
        return fast(gpu)

    fake.nvmlDeviceGetTotalEnergyConsumption = slow_second
    meter = EnergyMeter.open_nodes({0: "0", 1: "1"}, nodes=2)
    measured(meter)
    gpu = meter.record().of("prose").gpu
    meter.close()
    assert gpu is not None and gpu.skew_ms is not None and gpu.skew_ms >= 30
    # both nodes' windows are equally long (each read the same delay after the other at both ends):
    # neither node is counted over a longer window than the other
    first, second = (p.joules for p in gpu.nodes)
    assert second == pytest.approx(first, rel=0.05)


def test_a_gpu_two_nodes_name_is_counted_once(monkeypatch):
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=300.0), FakeGpu(power_w=200.0)])
    meter = EnergyMeter.open_nodes({0: None, 1: "1"}, nodes=2)  # node 0 sees every GPU
    measured(meter)
    energy = meter.record()
    meter.close()
    gpu = energy.of("prose").gpu
    assert gpu is not None and [(p.node, p.devices) for p in gpu.nodes] == [(0, [0, 1]), (1, [])]
    assert gpu.mean_power_w == pytest.approx(500.0, rel=0.05)


def test_the_nodes_read_are_the_launchs_nodes_on_this_host(tmp_path):
    ray = local_cluster(2, tmp_path / "ray", gpus_per_node=1)
    assert gpus_by_node(two_node_launch(ray), Candidate(engine="vllm", params={}), "ray", ray) == {0: "0", 1: "1"}
    # docker: a node behind ssh:// is another host (not read here), a node on the local daemon is this one
    mixed = Cluster(nodes=[ClusterNode(ip="10.0.0.1", gpus="0"), ClusterNode(address="ssh://me@box1", ip="10.0.0.2")],
                    image="img")
    assert gpus_by_node(two_node_launch(mixed), Candidate(engine="vllm", params={}), "docker", mixed) == {0: "0"}


def test_a_node_on_another_host_is_not_read_and_gives_no_j_per_token(monkeypatch, tmp_path):
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=300.0)])
    remote = Cluster(nodes=[ClusterNode(address="ssh://me@box0", ip="10.0.0.1")], image="img")
    one = VllmEngine(python=sys.executable).render_cluster(Candidate(engine="vllm", params={}), MODEL, 8000, remote)
    nodes = gpus_by_node(one, Candidate(engine="vllm", params={}), "docker", remote)
    assert nodes == {}  # the one node runs on box0: this host's GPU is not its GPU
    meter = EnergyMeter.open_nodes(nodes, nodes=1)
    measured(meter)
    energy = meter.record()
    meter.close()
    assert energy.gpu_method is None and energy.nodes_counted == 0 and "another host" in (energy.absent or "")
    assert energy_measurements(energy) == []


def test_show_and_the_recipe_give_each_nodes_part(monkeypatch):
    fake_nvml.install(monkeypatch, [FakeGpu(power_w=300.0), FakeGpu(power_w=200.0)])
    meter = EnergyMeter.open_nodes({0: "0", 1: "1"}, nodes=2)
    measured(meter)
    energy = meter.record()
    meter.close()
    trial = TrialResult(study="s", number=3, candidate=Candidate(engine="vllm", params={}), status="ok",
                        energy=energy, measurements=energy_measurements(energy))
    line = multi_node_line([trial]) or ""
    assert line.startswith("GPU energy per node, every node read in the same pass")
    assert "trial 3 prose: node 0 (GPUs 0)" in line and "node 1 (GPUs 1)" in line and "ms apart at most" in line
    prose = next(x for x in recipe_lines(trial, [trial]) if x.startswith("prose:"))
    assert "node 0 (GPUs 0)" in prose and "node 1 (GPUs 1)" in prose
    partial = trial.model_copy(update={"energy": energy.model_copy(update={"nodes_counted": 1, "nodes": 2})})
    assert "1 of 2 nodes (those on this host" in (multi_node_line([partial]) or "")
