"""The docker launcher against the REAL local Docker daemon (tests/docker_daemon.py: skipped
without one unless AUTOTUNE_REQUIRE_DOCKER=1, as .ci/run sets). Containers of the image built by
scripts/docker_image.sh run a stand-in server (a real HTTP server on the launch port, host
network); what only the hand-written fake can show (GPU device requests, RDMA devices, Ray in
containers) stays in tests/test_launcher_docker.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from docker_daemon import daemon_client, daemon_image, labelled, wait_until_none

from autotune.launchers.base import free_port
from autotune.launchers.docker import LABEL_LAUNCH, DockerServer
from autotune.models import CONTAINER_VLLM_CACHE, Cluster, ClusterNode, LaunchSpec, NodeLaunch

ROOT = Path(__file__).resolve().parent.parent

SERVER = textwrap.dedent(
    """
    import http.server, os, sys
    os.makedirs(sys.argv[2], exist_ok=True)
    open(os.path.join(sys.argv[2], "written-in-the-container"), "w").write("compiled")
    # where FlashInfer's JIT (under its workspace base's .cache/flashinfer) and Triton put their kernels
    flashinfer = os.path.join(os.environ["FLASHINFER_WORKSPACE_BASE"], ".cache", "flashinfer")
    for where in (flashinfer, os.environ["TRITON_CACHE_DIR"]):
        os.makedirs(where, exist_ok=True)
        open(os.path.join(where, "kernel"), "w").write("jit")
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
        def log_message(self, *args):
            pass
    print("Application startup complete.", flush=True)
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)
WORKER = "import time; print('worker up', flush=True); time.sleep(3600)"


@pytest.fixture
def image() -> str:
    return daemon_image()


def two_node_cluster(image: str, folder: Path) -> Cluster:
    """Two "nodes" on this host's daemon, reached two ways: the default socket and its unix:// address."""
    nodes = [ClusterNode(ip="127.0.0.1"), ClusterNode(address="unix:///var/run/docker.sock", ip="127.0.0.1")]
    return Cluster(nodes=nodes, gpus_per_node=0, rdma=False, image=image, mounts={str(folder): str(folder)},
                   compile_cache=str(folder / "compile-cache"))


def server_launch(folder: Path, port: int, worker: bool = True) -> LaunchSpec:
    script = folder / "server.py"
    script.write_text(SERVER)
    nodes = [NodeLaunch(node=0, argv=[sys.executable, str(script), str(port), CONTAINER_VLLM_CACHE])]
    if worker:
        nodes.append(NodeLaunch(node=1, role="worker", argv=[sys.executable, "-c", WORKER]))
    return LaunchSpec(engine="stand-in", nodes=nodes, port=port, health_path="/health")


def kernels_in(cache: Path) -> list[str]:
    """The kernel files SERVER wrote under a host cache folder, relative to it."""
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("kernel"))


def test_one_container_per_node_with_host_network_ipc_labels_compile_cache_and_logs(image, tmp_path):
    cluster = two_node_cluster(image, tmp_path)
    port = free_port()
    server = DockerServer(server_launch(tmp_path, port), cluster, tmp_path / "trial.log", study="daemon-test",
                          trial="3", startup_timeout_s=60)
    with server:
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200  # host network
        client = daemon_client()
        try:
            made = client.containers.list(filters={"label": ["autotune.study=daemon-test"]})
            assert len(made) == 2
            by_role = {c.labels["autotune.role"]: c for c in made}
            assert set(by_role) == {"server", "worker"}
            for role, container in by_role.items():
                host = container.attrs["HostConfig"]
                assert host["NetworkMode"] == "host" and host["IpcMode"] == "host"
                assert f"{tmp_path / 'compile-cache'}:{CONTAINER_VLLM_CACHE}" in host["Binds"]
                assert container.labels["autotune.trial"] == "3"
                assert container.labels[LABEL_LAUNCH] == server.launch_id
                assert container.attrs["Config"]["Entrypoint"] == ["python3"]  # this host's python -> the image's
        finally:
            client.close()
        assert "Application startup complete" in server.log_text()
    # what the container wrote under vLLM's cache root is on the host, after the container is gone
    assert (tmp_path / "compile-cache" / "written-in-the-container").read_text() == "compiled"
    # and so are FlashInfer's JIT kernels and Triton's: the next container of the config loads them
    assert kernels_in(tmp_path / "compile-cache") == ["flashinfer/.cache/flashinfer/kernel", "triton/kernel"]
    assert "Application startup complete" in (tmp_path / "trial.node0-server.log").read_text()
    assert "worker up" in (tmp_path / "trial.node1-worker.log").read_text()
    assert labelled("autotune.study=daemon-test") == []


def test_an_image_that_places_a_kernel_cache_itself_keeps_its_place(image, tmp_path):
    """An image whose own ENV sets TRITON_CACHE_DIR (prebuilt kernels shipped there, say) keeps it:
    the launcher points only the caches the image leaves unset into the mounted folder."""
    import io

    client = daemon_client()
    derived = "autotune-test-own-triton-cache:1"
    dockerfile = f"FROM {image}\nENV TRITON_CACHE_DIR=/opt/image-triton\n"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=derived, rm=True)
    try:
        nodes = [ClusterNode(ip="127.0.0.1")]
        cluster = Cluster(nodes=nodes, gpus_per_node=0, rdma=False, image=derived, mounts={str(tmp_path): str(tmp_path)},
                          compile_cache=str(tmp_path / "compile-cache"))
        server = DockerServer(server_launch(tmp_path, free_port(), worker=False), cluster, tmp_path / "trial.log",
                              study="daemon-own-cache", trial="0", startup_timeout_s=60)
        with server:
            (made,) = client.containers.list(filters={"label": ["autotune.study=daemon-own-cache"]})
            env = dict(item.split("=", 1) for item in made.attrs["Config"]["Env"])
            assert env["TRITON_CACHE_DIR"] == "/opt/image-triton"
            assert env["FLASHINFER_WORKSPACE_BASE"] == f"{CONTAINER_VLLM_CACHE}/flashinfer"
        # Triton's went where the image keeps it
        assert kernels_in(tmp_path / "compile-cache") == ["flashinfer/.cache/flashinfer/kernel"]
    finally:
        client.images.remove(derived, force=True)
        client.close()
    assert labelled("autotune.study=daemon-own-cache") == []


def test_an_image_missing_on_the_daemon_is_named_and_nothing_is_created(image, tmp_path):
    cluster = two_node_cluster("autotune-no-such-image:0", tmp_path)
    server = DockerServer(server_launch(tmp_path, free_port()), cluster, tmp_path / "t.log", study="daemon-missing")
    with pytest.raises(Exception, match="image autotune-no-such-image:0 is not on node 0"):
        with server:
            pass
    assert labelled("autotune.study=daemon-missing") == []


DRIVER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from autotune.launchers.docker import DockerServer
    from autotune.models import Cluster, LaunchSpec
    cluster = Cluster.model_validate_json(Path(sys.argv[1]).read_text())
    launch = LaunchSpec.model_validate_json(Path(sys.argv[2]).read_text())
    server = DockerServer(launch, cluster, Path(sys.argv[3]), study="daemon-kill", trial="0", startup_timeout_s=60)
    server.__enter__()
    print("READY", server.launch_id, flush=True)
    if sys.argv[4] == "crash":
        os._exit(3)  # dies as a segfault would: no finally, no atexit
    time.sleep(3600)
    """
)


@pytest.mark.parametrize("how", ["kill -9", "crash"])
def test_containers_do_not_outlive_autotune_killed_or_crashed(image, tmp_path, how):
    """Nothing in autotune runs after SIGKILL or a hard crash: the reaper DockerServer starts in
    its own session sees its pipe close and removes the launch's containers."""
    cluster, launch = tmp_path / "cluster.json", tmp_path / "launch.json"
    cluster.write_text(two_node_cluster(image, tmp_path).model_dump_json())
    launch.write_text(server_launch(tmp_path, free_port()).model_dump_json())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", DRIVER, str(cluster), str(launch), str(tmp_path / "t.log"), how]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line
        launch_id = line.split()[1]
        assert len(labelled(f"{LABEL_LAUNCH}={launch_id}")) == 2
        if how == "kill -9":
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group, as a terminal's kill would
        assert proc.wait(timeout=30) in (-signal.SIGKILL, 3)
        assert wait_until_none(f"{LABEL_LAUNCH}={launch_id}") == []
        # the reaper writes its lines once both removals returned: the containers can be gone a moment
        # before (CI's two workers made that moment visible)
        reaper_log = tmp_path / "t.reaper.log"
        deadline = time.monotonic() + 10
        while reaper_log.read_text().count("reaper: removed") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reaper_log.read_text().count("reaper: removed") == 2
        assert "Application startup complete" in (tmp_path / "t.node0-server.log").read_text()  # saved first
        assert "worker up" in (tmp_path / "t.node1-worker.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["docker", "rm", "-f", *labelled("autotune.study=daemon-kill")], capture_output=True)


def test_a_launch_stopped_from_another_thread_while_it_starts_ends_at_once(image, tmp_path):
    """Ctrl-C with trials in flight: the controller's thread stops every launch (stop_all) while
    each launch's own thread waits for its engine's health. That wait must end at once, not at the
    startup timeout, and the launch must leave no container."""
    import threading
    import time

    from autotune.errors import EngineStartError
    from autotune.launchers.docker import stop_all

    never_healthy = LaunchSpec(engine="stand-in", port=free_port(), health_path="/health",
                               nodes=[NodeLaunch(node=0, argv=[sys.executable, "-c", WORKER])])
    server = DockerServer(never_healthy, two_node_cluster(image, tmp_path), tmp_path / "t.log",
                          study="daemon-stopped", startup_timeout_s=60)
    raised: list[BaseException] = []

    def launch() -> None:
        try:
            with server:
                pass
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=launch)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not labelled("autotune.study=daemon-stopped", running=True) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert labelled("autotune.study=daemon-stopped", running=True), "the container never ran"
        stop_all()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the launch still waits for the health of a container it no longer has"
        assert [type(e) for e in raised] == [EngineStartError] and "stopped" in str(raised[0]), raised
        assert labelled("autotune.study=daemon-stopped") == []
    finally:
        server.stop(raise_errors=False)
        thread.join(timeout=70)
        subprocess.run(["docker", "rm", "-f", *labelled("autotune.study=daemon-stopped")], capture_output=True)


def test_removing_by_label_survives_a_container_removed_meanwhile(image, tmp_path):
    """The reaper and the launcher's stop both remove a trial's containers: one gone between the
    daemon's list and the inspect of it made remove_labelled raise NotFound and leave the others
    (the tests' own helper had the same race: a 404 failed the SIGKILL docker study test once in
    three full runs). Here the race is made on the real daemon."""
    from autotune.launchers.docker import remove_labelled

    label = f"autotune.test-race={os.getpid()}-{tmp_path.name}"
    client = daemon_client()
    made = [client.containers.run(image, ["sleep", "300"], detach=True, labels=dict([label.split("=")]))
            for _ in range(3)]
    client.close()

    def racing_client(address: str):
        racing = daemon_client()
        listed = racing.api.containers

        def containers(*args, **kwargs):
            found = listed(*args, **kwargs)
            racing.api.remove_container(found[0]["Id"], force=True)  # gone before it is inspected
            return found

        racing.api.containers = containers
        return racing

    cluster = Cluster(nodes=[ClusterNode(ip="127.0.0.1")], gpus_per_node=0, rdma=False, image=image)
    try:
        removed = remove_labelled(cluster, [label], racing_client)
        assert len(removed) == 2 and labelled(label) == []
    finally:
        for container in made:
            subprocess.run(["docker", "rm", "-f", container.id], capture_output=True)
