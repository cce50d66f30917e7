"""NCCL before a multi-node launch (issue 31 §4): the NCCL every node will load is read before
runs.db opens (pip `nvidia-nccl-cu*` and the system `libnccl.so.2`, with FAKE libraries from
tests/fakes/nccl_libs.py on the path, read the way the real ones are), recorded with each trial,
and what public reports show failing on Sparks is refused with the reason and the fix."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from fakes.nccl_libs import write_pip_nccl, write_system_nccl
from fakes.vllm_site import small_model_dir, use_fake_vllm

from autotune.cli import main
from autotune.launchers import nccl
from autotune.launchers.cluster import host_ip, rank_env
from autotune.models import Cluster, ClusterNode, NcclLibrary, NcclReading, NcclSource, NodeLaunch
from autotune.store import Store

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")


def read(site: Path | None, system: Path | None, **env: str) -> NcclReading:
    node_env = {"PYTHONPATH": str(site) if site else "", "LD_LIBRARY_PATH": str(system) if system else "", **env}
    return nccl.read_local(NodeLaunch(argv=[sys.executable], env=node_env))


# ---------------------------------------------------------------------- reading


def test_pip_and_system_nccl_are_read_with_their_versions_and_builds(tmp_path):
    site, system = tmp_path / "site", tmp_path / "syslib"
    pip_lib = write_pip_nccl(site, "2.28.9")
    write_system_nccl(system, "2.28.9")
    reading = read(site, system)
    assert reading.error is None, reading
    pip = next(lib for lib in reading.libraries if lib.source == NcclSource.PIP)
    sys_lib = next(lib for lib in reading.libraries if lib.source == NcclSource.SYSTEM)
    assert (pip.package, pip.package_version, pip.version, pip.cuda) == ("nvidia-nccl-cu13", "2.28.9", "2.28.9", "13.0")
    assert pip.path == str(pip_lib)
    assert sys_lib.version == "2.28.9" and sys_lib.real_path.endswith("libnccl.so.2.28.9")
    assert pip.sha256 and sys_lib.sha256 and pip.sha256 != sys_lib.sha256  # two builds of one version
    assert reading.loaded == NcclSource.PIP  # torch loads the wheel's


def test_the_system_library_alone_is_what_loads_and_its_file_name_gives_the_version(tmp_path):
    reading = read(None, write_system_nccl(tmp_path / "syslib", None, file_version="2.30.4").parent)
    assert reading.loaded == NcclSource.SYSTEM and reading.loaded_library().version == "2.30.4"


def test_vllm_nccl_so_path_overrides_and_a_real_elf_gives_its_build_id(tmp_path):
    real_elf = shutil.which("true") or "/bin/true"
    reading = read(None, None, VLLM_NCCL_SO_PATH=str(tmp_path / "x" / "libnccl.so.2.30.4"))
    assert reading.loaded is None  # the override names a file that is not there: nothing loads
    reading = read(None, None, VLLM_NCCL_SO_PATH=real_elf)
    override = next(lib for lib in reading.libraries if lib.source == NcclSource.OVERRIDE)
    assert override.build_id and len(override.build_id) >= 32 and override.sha256 is None


def test_nothing_found_is_recorded_not_refused(tmp_path):
    reading = read(tmp_path / "empty-site", tmp_path / "empty-lib")
    assert reading.loaded is None or reading.loaded == NcclSource.SYSTEM  # this host may have its own libnccl2
    assert nccl.parse_reading(3, "Traceback ...\nImportError").error.startswith("the NCCL reader printed no report")


# ---------------------------------------------------------------------- what is refused


def reading_of(node: int, *libs: NcclLibrary) -> NcclReading:
    return NcclReading(node=node, libraries=list(libs), loaded=nccl.loaded_source(list(libs)))


PIP_2289 = NcclLibrary(source="pip", path="/venv/nvidia/nccl/lib/libnccl.so.2", real_path="/venv/nvidia/nccl/lib/libnccl.so.2",
                       package="nvidia-nccl-cu13", version="2.28.9", build_id="a7f420a1")
SYS_2289 = NcclLibrary(source="system", path="/usr/lib/aarch64-linux-gnu/libnccl.so.2",
                       real_path="/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9", package="libnccl2", version="2.28.9",
                       build_id="c0db9360")


def test_pip_2_28_9_beside_the_system_2_28_9_of_another_build_is_refused_with_the_fix():
    why = nccl.launch_refusal([reading_of(0, PIP_2289, SYS_2289), reading_of(1, PIP_2289, SYS_2289)])
    assert why is not None and "node 0" in why and "vllm-project/vllm#41725, #42354" in why
    assert "ln -sf /usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9 /venv/nvidia/nccl/lib/libnccl.so.2" in why
    same = PIP_2289.model_copy(update={"real_path": SYS_2289.real_path})  # the wheel's file links to the system's
    assert nccl.launch_refusal([reading_of(0, same, SYS_2289)]) is None
    assert nccl.launch_refusal([reading_of(0, PIP_2289.model_copy(update={"build_id": "c0db9360"}), SYS_2289)]) is None


def test_nodes_loading_different_versions_are_refused():
    newer = SYS_2289.model_copy(update={"version": "2.30.4"})
    why = nccl.launch_refusal([reading_of(0, SYS_2289), reading_of(1, newer)])
    assert why is not None and "node 0: 2.28.9 (system), node 1: 2.30.4 (system)" in why


def test_cuda_graphs_across_nodes_need_nccl_2_30_4():
    why = nccl.graphs_refusal([reading_of(0, SYS_2289), reading_of(1, SYS_2289)])
    assert why is not None and "vllm-project/vllm#52504" in why and "enforce_eager=true" in why and "2.30.4" in why
    assert nccl.graphs_refusal([reading_of(0, SYS_2289.model_copy(update={"version": "2.30.4"}))]) is None


def test_every_rank_across_nodes_gets_the_init_hang_settings():
    one_gpu = Cluster(nodes=[ClusterNode(ip="10.0.0.1", hcas=["rocep1s0f1", "roceP2p1s0f1"]), ClusterNode(ip="10.0.0.2")],
                      gpus_per_node=1, nccl_env={"NCCL_DEBUG": "INFO"})
    head, worker = rank_env(one_gpu, 0), rank_env(one_gpu, 1)
    for env in (head, worker):
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["NCCL_CUMEM_ENABLE"] == "0"
        assert env["NCCL_IGNORE_CPU_AFFINITY"] == "1" and env["NCCL_DEBUG"] == "INFO"  # the cluster file wins
    assert head["NCCL_NET"] == "IB" and head["NCCL_CROSS_NIC"] == "1" and "NCCL_NET" not in worker
    eight = one_gpu.model_copy(update={"gpus_per_node": 8})
    assert "NCCL_NVLS_ENABLE" not in rank_env(eight, 0)  # NVLink inside a box: NVLS stays NCCL's choice
    single = Cluster(nodes=[ClusterNode(ip="10.0.0.1")], gpus_per_node=1)
    assert not any(k.startswith("NCCL_") for k in rank_env(single, 0))


# ---------------------------------------------------------------------- a study across two raylets

SPACE = """
name: fake-vllm-two-nodes
engine: vllm
model: {{name: gemma-3-270m, path: {model}, prompt_style: completion, head_dim: 256, n_kv_heads: 1, n_layers: 18,
        params_total_b: 0.27, weight_bits: 16, context_max: 4096}}
fixed: {{max_model_len: 4096, gpu_memory_utilization: 0.5{fixed}}}
knobs:
  - {{name: max_num_seqs, values: [8, 16], default: 8}}
{knobs}
workload:
  decode_max_tokens: 8
  prompts_per_set: 1
  repeats: 1
  concurrency: [1]
  startup_timeout_s: 150
"""


@pytest.fixture
def ray_root():
    root = Path(tempfile.mkdtemp(prefix="atn"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def two_nodes(tmp_path, monkeypatch, ray_root):
    site = use_fake_vllm(tmp_path, monkeypatch, name="site")
    model = small_model_dir(tmp_path)
    ip = host_ip()
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(f"gpus_per_node: 0\nrdma: false\nnodes:\n  - {{ip: {ip}, num_cpus: 1, temp_dir: {ray_root}/n0}}\n"
                       f"  - {{ip: {ip}, num_cpus: 1, temp_dir: {ray_root}/n1}}\n")

    def search(fixed: str = "", knobs: str = "", *extra: str) -> tuple[int, str]:
        space = tmp_path / "space.yaml"
        space.write_text(SPACE.format(model=model, fixed=fixed, knobs=knobs))
        args = ["search", "--space", str(space), "--db", str(tmp_path / "runs.db"), "--study", "n", "--trials", "1",
                "--confirm-rounds", "0", "--noise-relaunches", "0", "--launcher", "ray", "--nodes", "2",
                "--cluster", str(cluster), "--hardware", "cpu", "--logs", str(tmp_path / "logs"), *extra]
        return main(args), ""

    return site, tmp_path, search


@needs_ray
def test_a_bad_pip_and_system_pair_is_refused_before_runs_db(two_nodes, monkeypatch, capsys):
    site, tmp_path, search = two_nodes
    write_pip_nccl(site, "2.28.9")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(write_system_nccl(tmp_path / "syslib", "2.28.9").parent))
    code, _ = search(", enforce_eager: true")
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert code == 2 and not (tmp_path / "runs.db").exists(), text
    assert len(text.splitlines()) == 1 and "NCCL: node 0 loads pip nvidia-nccl-cu13 2.28.9" in text and "ln -sf" in text


@needs_ray
def test_graphs_on_an_old_nccl_are_refused_when_every_candidate_uses_them(two_nodes, monkeypatch, capsys):
    site, tmp_path, search = two_nodes
    monkeypatch.setenv("LD_LIBRARY_PATH", str(write_system_nccl(tmp_path / "syslib", "2.28.9").parent))
    code, _ = search()
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert code == 2 and not (tmp_path / "runs.db").exists(), text
    assert "every candidate uses CUDA graphs" in text and "#52504" in text


@needs_ray
def test_a_two_node_study_skips_graph_candidates_and_records_the_nccl_with_the_trial(two_nodes, monkeypatch, capsys):
    site, tmp_path, search = two_nodes
    monkeypatch.setenv("LD_LIBRARY_PATH", str(write_system_nccl(tmp_path / "syslib", "2.28.9").parent))
    code, _ = search("", "  - {name: enforce_eager, values: [true, false], default: true}", "--trials", "3")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "NCCL each node loads: node 0: NCCL 2.28.9 (system); node 1: NCCL 2.28.9 (system)" in out
    trials = Store(tmp_path / "runs.db").trials("n")
    ran = [t for t in trials if t.status == "ok"]
    skipped = [t for t in trials if t.status == "skipped"]
    assert ran and all(t.candidate.params["enforce_eager"] is True for t in ran), [t.reason for t in trials]
    assert skipped and all(t.reason.startswith("nccl: CUDA graphs across nodes deadlock") for t in skipped)
    trial = ran[0]
    assert [r.node for r in trial.nccl] == [0, 1]
    assert all(r.loaded_library().version == "2.28.9" for r in trial.nccl)
    server = trial.launch.server
    assert server.env["NCCL_NVLS_ENABLE"] == "0" and server.env["NCCL_CUMEM_ENABLE"] == "0"
    assert "2 node(s) alive; tensor_parallel_size=2" in Path(trial.log_path).read_text()
