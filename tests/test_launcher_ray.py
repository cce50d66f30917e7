"""Multi-node launch: the cluster description, the per-rank env, the Ray render, and a real Ray
cluster of several raylets on this one host standing in for several boxes."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from autotune.engines.vllm import VllmEngine, ray_start_argv
from autotune.launchers.base import free_port
from autotune.errors import ConfigError, EngineStartError
from autotune.launchers import open_server
from autotune.launchers.cluster import (
    Cluster,
    ClusterNode,
    load_cluster,
    local_cluster,
    rank_env,
)
from autotune.launchers.process import ServerProcess
from autotune.launchers.ray import (
    ClusterServer,
    RayCluster,
    head_address,
    parse_nodes_report,
    pid_alive,
)
from autotune.models import Candidate, LaunchSpec, ModelSpec
from procs import processes_mentioning

MODEL = ModelSpec(name="gemma", path="/models/gemma")
HCAS = ["rocep1s0f1", "roceP2p1s0f1"]


def spark_cluster(nodes: int = 2, **kw) -> Cluster:
    members = [ClusterNode(address=f"ssh://me@spark{i}", ip=f"192.168.100.{10 + i}", ifname="enp1s0f1np1", hcas=HCAS) for i in range(nodes)]
    return Cluster(nodes=members, image="nvcr.io/nvidia/vllm:26.05-py3", **kw)


def render(params: dict, cluster: Cluster, env: dict | None = None) -> LaunchSpec:
    engine = VllmEngine(python="python3")
    return engine.render_cluster(Candidate(engine="vllm", params=params, env=env or {}), MODEL, 8000, cluster)


# ---------------------------------------------------------------------- cluster description


def test_rank_env_pins_the_cluster_network_and_hcas():
    cluster = spark_cluster(2, nccl_env={"NCCL_IB_MERGE_NICS": "0"})
    env = rank_env(cluster, 1)
    assert env == {
        "VLLM_HOST_IP": "192.168.100.11",
        "MASTER_ADDR": "192.168.100.10",
        "RAY_memory_monitor_refresh_ms": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
        "TP_SOCKET_IFNAME": "enp1s0f1np1",
        "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
        "NCCL_IB_DISABLE": "0",
        "NCCL_CUMEM_ENABLE": "0",  # the Spark setups' settings against NCCL init hangs, across nodes
        "NCCL_IGNORE_CPU_AFFINITY": "1",
        "NCCL_DEBUG": "WARN",
        "NCCL_NVLS_ENABLE": "0",  # one GPU per box: no NVLink for NVLS
        "NCCL_NET": "IB",
        "NCCL_CROSS_NIC": "1",
        "NCCL_IB_MERGE_NICS": "0",
    }


def test_rank_env_leaves_out_what_the_node_does_not_say():
    cluster = Cluster(nodes=[ClusterNode(ip="10.0.0.1"), ClusterNode(ip="10.0.0.2", env={"NCCL_IB_GID_INDEX": "5"})])
    env = rank_env(cluster, 1)
    assert not any(k.startswith(("NCCL_SOCKET", "GLOO", "TP_SOCKET", "NCCL_IB_HCA")) for k in env)
    assert env["NCCL_IB_GID_INDEX"] == "5"
    with pytest.raises(ConfigError, match="node 2"):
        rank_env(cluster, 2)


def test_cluster_refuses_secrets_home_paths_and_bad_addresses():
    with pytest.raises(ValueError, match="HF_TOKEN looks like a secret"):
        Cluster(nodes=[ClusterNode(ip="10.0.0.1", env={"HF_TOKEN": "hf_x"})])
    with pytest.raises(ValueError, match="'~' would be expanded on the wrong host"):
        Cluster(nodes=[ClusterNode(ip="10.0.0.1")], hf_cache="~/.cache/huggingface")
    with pytest.raises(ValueError, match="must be an IP address"):
        ClusterNode(ip="spark1")
    with pytest.raises(ValueError, match="address must start with"):
        ClusterNode(ip="10.0.0.1", address="spark1")


def test_load_cluster_reports_the_bad_field(tmp_path):
    good = tmp_path / "ok.yaml"
    good.write_text(textwrap.dedent("""
        image: nvcr.io/nvidia/vllm:26.05-py3
        hf_cache: /home/me/.cache/huggingface
        nodes:
          - {address: "ssh://me@spark0", ip: 192.168.100.10, ifname: enp1s0f1np1, hcas: [rocep1s0f1, roceP2p1s0f1]}
          - {address: "ssh://me@spark1", ip: 192.168.100.11, ifname: enp1s0f1np1, hcas: [rocep1s0f1, roceP2p1s0f1]}
    """))
    cluster = load_cluster(good)
    assert cluster.ray_address == "192.168.100.10:6379" and cluster.devices == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - {ip: 192.168.100.10, hcas: ['bad name']}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: nodes.0.hcas: .*not an HCA name"):
        load_cluster(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_cluster(tmp_path / "missing.yaml")


# ---------------------------------------------------------------------- render_cluster


def test_render_cluster_head_workers_and_server():
    cluster = spark_cluster(4)
    launch = render({"kv_cache_dtype": "fp8", "enforce_eager": True}, cluster, env={"VLLM_SLEEP_WHEN_IDLE": "1"})
    roles = [(n.node, n.role) for n in launch.nodes]
    assert roles == [(0, "head"), (1, "worker"), (2, "worker"), (3, "worker"), (0, "server")]
    head, worker = launch.nodes[0], launch.nodes[2]
    assert head.argv == [
        "python3", "-m", "ray.scripts.scripts", "start", "--head", "--port", "6379",
        "--node-ip-address", "192.168.100.10", "--num-gpus", "1", "--disable-usage-stats", "--block",
    ]
    assert worker.argv == [
        "python3", "-m", "ray.scripts.scripts", "start", "--address=192.168.100.10:6379",
        "--node-ip-address", "192.168.100.12", "--num-gpus", "1", "--disable-usage-stats", "--block",
    ]
    assert worker.env["VLLM_HOST_IP"] == "192.168.100.12" and worker.env["VLLM_SLEEP_WHEN_IDLE"] == "1"
    server = launch.server
    assert server.role == "server" and server.node == 0
    argv = server.argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8" and "--enforce-eager" in argv
    assert server.env["RAY_ADDRESS"] == "192.168.100.10:6379"
    # the server's flags are the single-node render's, plus the cluster's two
    single = VllmEngine(python="python3").render(
        Candidate(engine="vllm", params={"kv_cache_dtype": "fp8", "enforce_eager": True, "tensor_parallel_size": 4,
                                         "distributed_executor_backend": "ray"}), MODEL, 8000)
    assert argv == single.server.argv
    assert all(isinstance(a, str) for n in launch.nodes for a in n.argv)
    assert head_address(launch) == "192.168.100.10:6379"


def test_render_cluster_refuses_a_layout_that_does_not_fill_the_cluster():
    with pytest.raises(ConfigError, match="cluster holds 4"):
        render({"tensor_parallel_size": 2}, spark_cluster(4))
    with pytest.raises(ConfigError, match="distributed_executor_backend=ray"):
        render({"distributed_executor_backend": "mp"}, spark_cluster(2))
    launch = render({"pipeline_parallel_size": 2}, spark_cluster(4))
    argv = launch.server.argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"


def test_hf_token_never_enters_the_launch(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    launch = render({}, spark_cluster(2))
    assert "hf_secret_value" not in launch.model_dump_json()
    assert not any("HF_TOKEN" in n.env for n in launch.nodes)


def test_open_server_picks_the_launcher(tmp_path):
    single = VllmEngine(python="python3").render(Candidate(engine="vllm", params={}), MODEL, 8000)
    cluster = spark_cluster(2)
    multi = render({}, cluster)
    assert isinstance(open_server(single, tmp_path / "a.log"), ServerProcess)
    assert isinstance(open_server(multi, tmp_path / "b.log", launcher="ray", cluster=cluster), ClusterServer)
    with pytest.raises(ConfigError, match="needs a cluster file"):
        open_server(multi, tmp_path / "c.log", launcher="docker")
    pytest.importorskip("docker")
    from autotune.launchers.docker import DockerServer

    server = open_server(multi, tmp_path / "d.log", launcher="docker", cluster=cluster, study="s", trial="3")
    assert isinstance(server, DockerServer) and server.base_url == "http://127.0.0.1:8000"


def test_parse_nodes_report():
    out = 'noise\nAUTOTUNE_RAY_NODES {"alive": [{"node_id": "a", "ip": "10.0.0.1", "resources": {"GPU": 1.0}}], "task_nodes": ["a"]}\n'
    report = parse_nodes_report(out)
    assert report is not None and report.alive[0].resources == {"GPU": 1.0} and report.task_nodes == ["a"]
    assert parse_nodes_report("Traceback ...") is None


# ---------------------------------------------------------------------- real Ray on one host

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install 'autotune[ray]')"
)

# Stands in for `vllm serve --distributed-executor-backend ray`: a Ray driver on the head that runs
# one task pinned to each node, then answers HTTP with where they ran.
DRIVER_SERVER = textwrap.dedent(
    """
    import http.server, json, os, sys
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])

    @ray.remote(num_cpus=0)
    def where():
        return ray.get_runtime_context().get_node_id(), os.getpid()

    placed = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote() for n in nodes])
    body = json.dumps({"nodes": nodes, "placed": placed}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    print("serving", flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
    """
)


@pytest.fixture
def ray_root():
    # Ray's socket paths must fit in 107 bytes, so the temp root is short (not pytest's tmp_path).
    root = Path(tempfile.mkdtemp(prefix="atr"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def local_launch(cluster: Cluster, server_argv: list[str], port: int) -> LaunchSpec:
    """render_cluster's head and worker entries for real; the server entry runs the stand-in."""
    rendered = VllmEngine(python=sys.executable).render_cluster(Candidate(engine="vllm", params={}), MODEL, port, cluster)
    nodes = [n if n.role != "server" else n.model_copy(update={"argv": server_argv}) for n in rendered.nodes]
    return rendered.model_copy(update={"nodes": nodes, "ready": None})  # the stand-in serves no completions


@needs_ray
def test_three_raylets_on_one_host_run_a_task_on_each_node_then_stop_clean(ray_root, tmp_path):
    cluster = local_cluster(3, ray_root)
    port = free_port()
    script = tmp_path / "driver_server.py"
    script.write_text(DRIVER_SERVER)
    launch = local_launch(cluster, [sys.executable, str(script), str(port)], port)
    t0 = time.monotonic()
    with ClusterServer(launch, tmp_path / "server.log", startup_timeout_s=150) as server:
        up_s = time.monotonic() - t0
        report = server.ray.report
        assert report is not None and len(report.alive) == 3
        assert {n.ip for n in report.alive} == {cluster.head.ip}
        seen = httpx.get(server.base_url + "/health", timeout=10).json()
        node_ids = sorted(n.node_id for n in report.alive)
        assert seen["nodes"] == node_ids
        assert sorted(node for node, _ in seen["placed"]) == node_ids  # one task ran on each raylet
        assert server.alive()
        pids = server.ray.pids() | {pid for _, pid in seen["placed"]} | {server.server.proc.pid}
        t_stop = time.monotonic()
    stop_s = time.monotonic() - t_stop
    left = {p: Path(f"/proc/{p}/stat").read_text()[:60] for p in pids if pid_alive(p)}
    assert not left, f"processes outlived the cluster: {left}"
    assert processes_mentioning(str(ray_root)) == []
    print(f"3 raylets up and server healthy in {up_s:.1f} s; stopped in {stop_s:.1f} s")


@needs_ray
def test_a_worker_that_dies_fails_the_start_fast_and_the_head_is_stopped(ray_root, tmp_path):
    cluster = local_cluster(2, ray_root)
    good = local_launch(cluster, [sys.executable, "-c", "pass"], free_port())
    broken = [n if n.role != "worker" else n.model_copy(update={"argv": [*n.argv, "--no-such-option"]}) for n in good.nodes]
    launch = good.model_copy(update={"nodes": broken})
    ray = RayCluster(launch, tmp_path / "server.log", ready_timeout_s=90)
    t0 = time.monotonic()
    with pytest.raises(EngineStartError) as info:
        with ray:
            pass
    assert time.monotonic() - t0 < 60
    assert "node 1 (worker) exited with code" in str(info.value)
    assert "no-such-option" in info.value.log_tail
    assert processes_mentioning(str(ray_root)) == []
    assert (tmp_path / "server.node0-head.log").exists() and (tmp_path / "server.node1-worker.log").exists()


def test_ray_start_argv_for_a_local_stand_in_node(tmp_path):
    cluster = local_cluster(2, tmp_path, gpus_per_node=1)
    argv = ray_start_argv("python3", cluster, 1)
    assert argv[argv.index("--temp-dir") + 1] == str(tmp_path / "n1")
    assert argv[argv.index("--num-gpus") + 1] == "1" and argv[argv.index("--num-cpus") + 1] == "1"
    assert rank_env(cluster, 1)["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_cluster_file_of_one_gpu_raylets_sets_the_layout_not_the_profiles_gpu_count(tmp_path):
    # the two-GPU machine as two raylets of one GPU each (issue 16): the h200 profile says 8 GPUs
    # per node (an HGX board); the cluster file says 1, and the cluster is what the launch fills
    from autotune.commands.setup import prepare

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(textwrap.dedent("""\
        gpus_per_node: 1
        rdma: false
        nodes:
          - {ip: 10.1.2.3, gpus: "0", temp_dir: /tmp/at-r0}
          - {ip: 10.1.2.3, gpus: "1", temp_dir: /tmp/at-r1}
        """))
    plan = prepare(
        space_name="vllm-minimax-m2-12l-dummy", model_path=None, db_path=tmp_path / "runs.db", study=None,
        hardware="h200", nodes=2, accuracy=False, logs_dir=tmp_path / "logs", dry_run=True,
        cluster_file=cluster, launcher="ray",
    )
    assert plan.space.fixed["tensor_parallel_size"] == 2
    assert plan.hardware.gpus_per_node == 1 and plan.ctx.cluster is not None
    assert [n.gpus for n in plan.ctx.cluster.nodes] == ["0", "1"]
