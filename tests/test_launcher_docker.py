"""The docker launcher against the hand-written FAKE Docker Engine API (tests/fakes/docker_api.py),
for what a local daemon without GPUs cannot show: GPU device requests, RDMA devices, Ray head and
worker containers with the server exec'd in the head, daemons that refuse. What is real: the
Docker SDK, its HTTP requests, the launcher's logic, a real HTTP server standing in for vLLM's
port. What is fake: the daemon and everything "in" a container. The same launcher against the
real local daemon: tests/test_launcher_docker_daemon.py and the contract suite's docker leg.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("docker", reason="the docker launcher needs the Docker SDK: pip install 'autotune[docker]'")

from fakes.docker_api import FakeContainer, FakeDockerEngine, FakeExec  # noqa: E402

from autotune.engines.vllm import VllmEngine  # noqa: E402
from autotune.launchers.base import free_port  # noqa: E402
from autotune.errors import EngineStartError, EngineUnavailable  # noqa: E402
from autotune.launchers.cluster import Cluster, ClusterNode  # noqa: E402
from autotune.launchers.docker import (  # noqa: E402
    DockerServer,
    cleanup,
    container_spec,
    docker_client,
    docker_commands,
    run_argv,
)
from autotune.models import (  # noqa: E402
    CONTAINER_JIT_CACHE_ENV, CONTAINER_VLLM_CACHE, DEFAULT_COMPILE_CACHE, Candidate, LaunchSpec, ModelSpec, NodeLaunch,
)

IMAGE = "nvcr.io/nvidia/vllm:26.05-py3"
IMAGE_ID = "sha256:" + "3f" * 32
MODEL = ModelSpec(name="gemma", path="/models/gemma")
HCAS = ["rocep1s0f1", "roceP2p1s0f1"]
SECRET = "hf_not_a_real_token_123"


class Health:
    """A real HTTP server on the launch port: what vLLM would be, reached over host networking."""

    def __init__(self, port: int) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Script:
    """What the fake containers do: Ray nodes print and keep running; the Ray check reports
    `alive` nodes; the server prints, opens the health port, and runs until its container goes."""

    def __init__(self, alive: int = 2, server_exit: int | None = None, worker_exit: int | None = None) -> None:
        self.alive = alive
        self.server_exit = server_exit
        self.worker_exit = worker_exit
        self.order: list[str] = []

    def on_start(self, container: FakeContainer) -> None:
        role = container.labels.get("autotune.role")
        self.order.append(f"start {role}")
        if "ray.scripts.scripts" in container.argv:
            container.write("Ray runtime started.\n")
            if role == "worker" and self.worker_exit is not None:
                container.write("NCCL WARN NET/IB : Got async event : port error\nNCCL error: unhandled system error\n")
                container.exit(self.worker_exit)
        elif "--port" in container.argv:  # single-node: the server is the container
            self._serve(container.argv, on_stop=lambda: None, log=container.write)

    def on_exec(self, ex: FakeExec) -> None:
        if "-c" in ex.cmd and "AUTOTUNE_RAY_NODES" in ex.cmd[ex.cmd.index("-c") + 1]:
            self.order.append("ray check")
            nodes = [{"node_id": f"n{i}", "ip": "10.0.0.1", "resources": {"GPU": 1.0}} for i in range(self.alive)]
            ex.write('AUTOTUNE_RAY_NODES {"alive": %s}\n' % str(nodes).replace("'", '"'))
            ex.finish(0 if self.alive >= int(ex.cmd[-3]) else 1)
            return
        self.order.append("exec server")
        if self.server_exit is not None:
            ex.write("ValueError: No available shared memory broadcast block found in 60 seconds\n")
            ex.finish(self.server_exit)
            return
        self._serve(ex.cmd, on_stop=None, log=ex.write, ex=ex)

    @staticmethod
    def _serve(argv: list[str], on_stop, log, ex: FakeExec | None = None) -> None:
        health = Health(int(argv[argv.index("--port") + 1]))
        log("INFO:     Application startup complete.\n")
        if ex is not None:
            ex.on_stop.append(health.close)
        else:
            Script.servers.append(health)

    servers: list[Health] = []


@pytest.fixture
def daemons():
    script = Script()
    engines = [
        FakeDockerEngine(images={IMAGE: IMAGE_ID}, on_start=script.on_start, on_exec=script.on_exec, name=f"node{i}")
        for i in range(2)
    ]
    for engine in engines:
        engine.__enter__()
    yield script, engines
    for engine in engines:
        engine.__exit__()
    for health in Script.servers:
        health.close()
    Script.servers.clear()


def cluster_on(engines, **kw) -> Cluster:
    nodes = [
        ClusterNode(address=e.base_url, ip=f"192.168.100.{10 + i}", ifname="enp1s0f1np1", hcas=HCAS)
        for i, e in enumerate(engines)
    ]
    return Cluster(nodes=nodes, image=IMAGE, hf_cache="/home/me/.cache/huggingface", model_dir="/models", **kw)


def ray_launch(cluster: Cluster, port: int) -> LaunchSpec:
    engine = VllmEngine()  # this interpreter's path: the launcher must turn it into the image's python3
    launch = engine.render_cluster(Candidate(engine="vllm", params={"kv_cache_dtype": "fp8"}), MODEL, port, cluster)
    return launch.model_copy(update={"ready": None})  # the fake daemon's containers serve /health only


# ---------------------------------------------------------------------- the whole launch


def test_ray_launch_on_two_daemons_sends_the_exact_container_config(daemons, tmp_path, monkeypatch):
    script, (node0, node1) = daemons
    monkeypatch.setenv("HF_TOKEN", SECRET)
    cluster = cluster_on([node0, node1])
    port = free_port()
    launch = ray_launch(cluster, port)
    server = DockerServer(launch, cluster, tmp_path / "trial.log", study="gemma-spark-x2", trial="7", startup_timeout_s=20, poll_s=0.05)
    with server:
        assert server.alive() and server.startup_s is not None
        assert script.order == ["start head", "start worker", "ray check", "exec server"]
        (head_body,) = node0.created_bodies()
        (worker_body,) = node1.created_bodies()
        assert "Application startup complete" in server.log_text()

    head = launch.nodes[0]
    assert head_body["Image"] == IMAGE
    assert head_body["Entrypoint"] == ["python3"]
    assert head_body["Cmd"] == head.argv[1:]
    assert head_body["Cmd"][:4] == ["-m", "ray.scripts.scripts", "start", "--head"]
    env = dict(item.split("=", 1) for item in head_body["Env"])
    # the secret passes through at create time only; the kernels' caches point into the mounted folder
    assert env == {**CONTAINER_JIT_CACHE_ENV, **head.env, "HF_TOKEN": SECRET}
    assert head_body["Labels"] == {
        "autotune.study": "gemma-spark-x2", "autotune.trial": "7", "autotune.node": "0", "autotune.role": "head",
        "autotune.launch": server.launch_id,  # what the reaper removes if autotune dies
    }
    host = head_body["HostConfig"]
    assert host["NetworkMode"] == "host" and host["IpcMode"] == "host"
    assert host["DeviceRequests"] == [
        {"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}  # = --gpus all
    ]
    assert host["Ulimits"] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
    assert host["Devices"] == [
        {"PathOnHost": "/dev/infiniband", "PathInContainer": "/dev/infiniband", "CgroupPermissions": "rwm"}
    ]
    assert host["CapAdd"] == ["IPC_LOCK"]
    assert host["Binds"] == [
        "/home/me/.cache/huggingface:/root/.cache/huggingface", "/models:/models:ro",
        f"{DEFAULT_COMPILE_CACHE}:{CONTAINER_VLLM_CACHE}",  # compiled graphs outlive the container
    ]
    assert not host.get("AutoRemove") and not host.get("Privileged")  # logs survive a crash

    worker_env = dict(item.split("=", 1) for item in worker_body["Env"])
    assert worker_body["Cmd"][:4] == ["-m", "ray.scripts.scripts", "start", "--address=192.168.100.10:6379"]
    assert worker_env["VLLM_HOST_IP"] == "192.168.100.11" and worker_env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"

    (ray_check, exec_server) = node0.calls("POST", r"/containers/[0-9a-f]+/exec")
    assert exec_server.body["Cmd"] == ["python3", *launch.server.argv[1:]]
    server_env = dict(item.split("=", 1) for item in exec_server.body["Env"])
    assert server_env["RAY_ADDRESS"] == "192.168.100.10:6379" and server_env["HF_TOKEN"] == SECRET
    assert not node1.calls("POST", r"/containers/[0-9a-f]+/exec")

    # stop removed everything it made, forcefully, after saving the logs
    assert node0.containers == {} and node1.containers == {}
    for engine in (node0, node1):
        (delete,) = engine.calls("DELETE", r"/containers/[0-9a-f]+")
        assert delete.query["force"] == ["True"]
    assert "Ray runtime started." in (tmp_path / "trial.node1-worker.log").read_text()
    assert SECRET not in launch.model_dump_json()


def test_worker_crash_during_start_fails_with_its_log_and_removes_everything(daemons, tmp_path):
    script, (node0, node1) = daemons
    script.worker_exit = 1
    cluster = cluster_on([node0, node1])
    server = DockerServer(ray_launch(cluster, free_port()), cluster, tmp_path / "t.log", startup_timeout_s=20, poll_s=0.05)
    with pytest.raises(EngineStartError) as info:
        with server:
            pass
    assert "node 1 (worker" in str(info.value) and "exit code 1" in str(info.value)
    assert "unhandled system error" in info.value.log_tail
    assert node0.containers == {} and node1.containers == {}
    assert "exec server" not in script.order


def test_server_exiting_during_start_fails_with_its_output(daemons, tmp_path):
    script, (node0, node1) = daemons
    script.server_exit = 1
    cluster = cluster_on([node0, node1])
    server = DockerServer(ray_launch(cluster, free_port()), cluster, tmp_path / "t.log", startup_timeout_s=20, poll_s=0.05)
    with pytest.raises(EngineStartError) as info:
        with server:
            pass
    assert "engine exited with code 1" in str(info.value)
    assert "No available shared memory broadcast block" in info.value.log_tail
    assert node0.containers == {} and node1.containers == {}


def test_ray_that_never_shows_every_node_times_out(daemons, tmp_path):
    script, (node0, node1) = daemons
    script.alive = 1
    cluster = cluster_on([node0, node1])
    server = DockerServer(ray_launch(cluster, free_port()), cluster, tmp_path / "t.log", startup_timeout_s=1.5, poll_s=0.05)
    with pytest.raises(EngineStartError) as info:
        with server:
            pass
    assert info.value.timed_out and "Ray did not show 2 alive nodes" in str(info.value)
    assert node0.containers == {} and node1.containers == {}


def test_single_node_launch_is_one_container(daemons, tmp_path):
    _, (node0, _) = daemons
    cluster = cluster_on([node0], rdma=False, gpus_per_node=1)
    port = free_port()
    launch = VllmEngine(python="python3").render(Candidate(engine="vllm", params={}), MODEL, port)
    launch = launch.model_copy(update={"ready": None})  # the fake daemon's containers serve /health only
    with DockerServer(launch, cluster, tmp_path / "t.log", startup_timeout_s=20, poll_s=0.05) as server:
        assert server.alive()
        (body,) = node0.created_bodies()
        assert body["Entrypoint"] == ["python3"] and body["Cmd"] == launch.server.argv[1:]
        assert "Devices" not in body["HostConfig"] or not body["HostConfig"]["Devices"]
        assert "Application startup complete" in server.log_text()
    assert node0.containers == {}


def test_create_failing_on_the_second_node_removes_the_first_nodes_container(daemons, tmp_path):
    _, (node0, node1) = daemons
    runtime_error = "failed to create task for container: OCI runtime create failed: nvidia-container-cli: initialization error"
    node1._create = lambda query, body, reply: reply(500, {"message": runtime_error})
    cluster = cluster_on([node0, node1])
    with pytest.raises(EngineStartError, match=r"could not create the node 1 \(worker.*nvidia-container-cli"):
        with DockerServer(ray_launch(cluster, free_port()), cluster, tmp_path / "t.log", poll_s=0.05):
            pass
    assert len(node0.created_bodies()) == 1 and node0.containers == {}


# ---------------------------------------------------------------------- environment problems


def test_missing_image_is_named_with_the_pull_command_and_nothing_is_created(daemons, tmp_path):
    _, (node0, node1) = daemons
    node1.images.clear()
    cluster = cluster_on([node0, node1])
    server = DockerServer(ray_launch(cluster, free_port()), cluster, tmp_path / "t.log", startup_timeout_s=5)
    with pytest.raises(EngineUnavailable, match=rf"image {IMAGE} is not on node 1 \({node1.base_url}\); pull it there first: docker --host {node1.base_url} pull {IMAGE}"):
        with server:
            pass
    assert not node0.calls("POST", "/containers/create") and not node1.calls("POST", "/containers/create")


def test_different_image_builds_on_two_nodes_are_refused(daemons, tmp_path):
    _, (node0, node1) = daemons
    node1.images[IMAGE] = "sha256:" + "00" * 32
    cluster = cluster_on([node0, node1])
    with pytest.raises(EngineUnavailable, match="different builds"):
        with DockerServer(ray_launch(cluster, free_port()), cluster, tmp_path / "t.log"):
            pass


def test_unreachable_daemon_names_its_address():
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(EngineUnavailable, match=f"cannot reach the Docker daemon at {address}"):
        docker_client(address)


def test_cleanup_removes_only_the_labelled_leftovers(daemons):
    _, (node0, node1) = daemons
    client = docker_client(node0.base_url)
    for name, labels in (
        ("left-1", {"autotune.study": "s", "autotune.trial": "1"}),
        ("left-2", {"autotune.study": "s", "autotune.trial": "2"}),
        ("someone-else", {"autotune.study": "other"}),
    ):
        client.containers.create(IMAGE, ["x"], name=name, labels=labels).start()
    client.close()
    cluster = cluster_on([node0, node1])
    assert cleanup(cluster, "s", "1") == ["left-1"]
    assert cleanup(cluster, "s") == ["left-2"]
    assert sorted(c.name for c in node0.containers.values()) == ["someone-else"]


# ---------------------------------------------------------------------- recipe rendering


def test_docker_commands_render_the_exact_per_node_launch(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    nodes = [ClusterNode(address=f"ssh://me@spark{i}", ip=f"192.168.100.{10 + i}", ifname="enp1s0f1np1", hcas=HCAS) for i in range(2)]
    cluster = Cluster(nodes=nodes, image=IMAGE, hf_cache="/home/me/.cache/huggingface")
    launch = VllmEngine(python=sys.executable).render_cluster(Candidate(engine="vllm", params={}), MODEL, 8000, cluster)
    head, worker, server = docker_commands(launch, cluster)
    env0 = {**CONTAINER_JIT_CACHE_ENV, **launch.nodes[0].env}  # the kernels' caches in the mounted folder
    assert head == [
        "docker", "--host", "ssh://me@spark0", "run", "--detach", "--name", "autotune-node0-head",
        "--network", "host", "--ipc", "host", "--gpus", "all",
        "--device", "/dev/infiniband:/dev/infiniband", "--ulimit", "memlock=-1", "--cap-add", "IPC_LOCK",
        "-v", "/home/me/.cache/huggingface:/root/.cache/huggingface",
        "-v", f"{DEFAULT_COMPILE_CACHE}:{CONTAINER_VLLM_CACHE}",
        *[x for k in sorted(env0) for x in ("-e", f"{k}={env0[k]}")], "-e", "HF_TOKEN",
        "--entrypoint", "python3", IMAGE, *launch.nodes[0].argv[1:],
    ]
    assert worker[:3] == ["docker", "--host", "ssh://me@spark1"] and "autotune-node1-worker" in worker
    assert server[:4] == ["docker", "--host", "ssh://me@spark0", "exec"]
    assert server[-len(launch.server.argv) - 1:] == ["autotune-node0-head", "python3", *launch.server.argv[1:]]
    assert all(SECRET not in arg for cmd in (head, worker, server) for arg in cmd)


def test_run_argv_without_ipc_host_uses_shm_size():
    cluster = Cluster(nodes=[ClusterNode(ip="10.0.0.1")], image=IMAGE, ipc_host=False, shm_size="64g", rdma=False, privileged=True)
    spec = container_spec(NodeLaunch(argv=["vllm", "serve", "m"]), cluster, "x")
    argv = run_argv(spec, pass_env=())
    assert argv == ["docker", "run", "--detach", "--name", "x", "--network", "host", "--shm-size", "64g",
                    "--gpus", "all", "--privileged", "-v", f"{DEFAULT_COMPILE_CACHE}:{CONTAINER_VLLM_CACHE}",
                    "-e", f"FLASHINFER_WORKSPACE_BASE={CONTAINER_VLLM_CACHE}/flashinfer",
                    "-e", f"TRITON_CACHE_DIR={CONTAINER_VLLM_CACHE}/triton",
                    "--entrypoint", "vllm", IMAGE, "serve", "m"]


def test_the_compile_cache_is_one_host_folder_for_every_launch_unless_turned_off():
    """Without it each container starts with an empty vLLM cache and compiles again (22-35 s of
    torch.compile per start on the H200 for 270M-45B shapes, docs/measurements.md)."""
    nodes = [ClusterNode(ip="10.0.0.1")]
    on = container_spec(NodeLaunch(argv=["python3", "-m", "vllm"]), Cluster(nodes=nodes, image=IMAGE), "n")
    assert on.binds == [f"{DEFAULT_COMPILE_CACHE}:{CONTAINER_VLLM_CACHE}"]
    mine = Cluster(nodes=nodes, image=IMAGE, compile_cache="/data/vllm-cache")
    assert container_spec(NodeLaunch(argv=["python3"]), mine, "n").binds == [f"/data/vllm-cache:{CONTAINER_VLLM_CACHE}"]
    off = Cluster(nodes=nodes, image=IMAGE, compile_cache=None)
    assert container_spec(NodeLaunch(argv=["python3"]), off, "n").binds == []
    with pytest.raises(ValueError, match="absolute"):
        Cluster(nodes=nodes, image=IMAGE, compile_cache="relative/dir")


def test_flashinfer_and_triton_kernels_compiled_in_a_container_go_to_the_mounted_cache():
    """FlashInfer JIT-compiles its attention kernels where no prebuilt cubin is installed (on an H100
    the first FLASHINFER start of a KV dtype took 188-274 s, a later one on the same machine 71 s:
    docs/measurements.md); in a container they went to its own home and died with it, so every
    FLASHINFER trial compiled them again. Both caches now live under the mounted folder."""
    nodes = [ClusterNode(ip="10.0.0.1")]
    on = container_spec(NodeLaunch(argv=["python3", "-m", "vllm"]), Cluster(nodes=nodes, image=IMAGE), "n")
    assert on.env == {"FLASHINFER_WORKSPACE_BASE": f"{CONTAINER_VLLM_CACHE}/flashinfer",
                      "TRITON_CACHE_DIR": f"{CONTAINER_VLLM_CACHE}/triton"}
    # the launch's own setting wins (a space or an image that places them elsewhere on purpose)
    own = NodeLaunch(argv=["python3"], env={"TRITON_CACHE_DIR": "/mine", "VLLM_X": "1"})
    assert container_spec(own, Cluster(nodes=nodes, image=IMAGE), "n").env == {
        "FLASHINFER_WORKSPACE_BASE": f"{CONTAINER_VLLM_CACHE}/flashinfer", "TRITON_CACHE_DIR": "/mine", "VLLM_X": "1"}
    # one the image's own ENV sets stays where the image puts it (prebuilt kernels may be there)
    image_own = container_spec(NodeLaunch(argv=["python3"]), Cluster(nodes=nodes, image=IMAGE), "n",
                               image_env=frozenset({"TRITON_CACHE_DIR", "PATH"}))
    assert image_own.env == {"FLASHINFER_WORKSPACE_BASE": f"{CONTAINER_VLLM_CACHE}/flashinfer"}
    # no mounted cache: nothing to point them at
    off = Cluster(nodes=nodes, image=IMAGE, compile_cache=None)
    assert container_spec(own, off, "n").env == {"TRITON_CACHE_DIR": "/mine", "VLLM_X": "1"}
    # the exported docker lines say the same
    argv = run_argv(on, pass_env=())
    assert argv[argv.index("-v") + 1] == f"{DEFAULT_COMPILE_CACHE}:{CONTAINER_VLLM_CACHE}"
    assert f"TRITON_CACHE_DIR={CONTAINER_VLLM_CACHE}/triton" in argv


# ---------------------------------------------------------------------- the reaper's protocol


def _order(launch_id: str = "abc123") -> str:
    from autotune.launchers.docker_reaper import ReaperOrder

    cluster = Cluster(nodes=[ClusterNode(ip="10.0.0.1")], image=IMAGE)
    return ReaperOrder(cluster=cluster, launch_id=launch_id, log_path="trial.log").model_dump_json()


def test_the_reaper_removes_nothing_after_done_and_the_launch_after_eof():
    import io

    from autotune.launchers.docker_reaper import reap

    asked: list[str] = []

    def remove(order):
        asked.append(order.launch_id)
        return [f"c-{order.launch_id}"]

    assert reap(io.StringIO(_order() + "\ndone\n"), remove) == [] and asked == []
    assert reap(io.StringIO(_order("k9") + "\n"), remove) == ["c-k9"]  # autotune died: the pipe just closed
    assert reap(io.StringIO(""), remove) == [] and asked == ["k9"]  # died before the order: nothing was made


def test_the_reaper_retries_a_daemon_that_does_not_answer_then_gives_up_with_one_line(capsys):
    import io

    from autotune.launchers.docker_reaper import reap

    calls = []

    def flaky(order):
        calls.append(1)
        if len(calls) < 3:
            raise EngineUnavailable("cannot reach the Docker daemon")
        return ["c"]

    assert reap(io.StringIO(_order() + "\n"), flaky, sleep=lambda s: None) == ["c"] and len(calls) == 3

    def down(order):
        raise EngineUnavailable("cannot reach the Docker daemon")

    with pytest.raises(SystemExit):
        reap(io.StringIO(_order() + "\n"), down, retry_for_s=0.0, sleep=lambda s: None)
    assert "could not remove the containers of launch abc123" in capsys.readouterr().out
