"""The launcher contract, checked the same way for every registered launcher (autotune.launchers.LAUNCHERS).

Entering starts the launch and returns once its health endpoint answers (`base_url`, `startup_s`,
`alive()`, `log_text()`); leaving stops everything it started; a start that fails raises
EngineStartError with the log and leaves nothing running; `stop_all()` stops a launch left up.

What runs, per launcher: `process` and `ray` start real processes on this host (a one-node Ray
cluster of real raylets, and a real HTTP server standing in for the engine). `docker` runs a real
container on the REAL local Docker daemon (the image of scripts/docker_image.sh; skipped without a
daemon unless AUTOTUNE_REQUIRE_DOCKER=1, tests/docker_daemon.py), the stand-in server in it with
host networking; `docker-ray` runs the Ray launch there (head and worker containers, the server
exec'd in the head). GPU and RDMA devices, which no daemon here has, are checked against the
hand-written fake in tests/test_launcher_docker.py.
"""

from __future__ import annotations

import importlib.util
import shutil
import socket
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from autotune.engines.vllm import VllmEngine
from autotune.errors import ConfigError, EngineStartError
from autotune.launchers import LAUNCHERS, launcher_class, open_server, stop_all
from autotune.launchers.base import Launched, free_port
from autotune.launchers.cluster import local_cluster
from autotune.models import Candidate, Cluster, ClusterNode, LaunchSpec, ModelSpec, NodeLaunch

MODEL = ModelSpec(name="gemma", path="/models/gemma")
#: what a failing engine prints before it exits (vLLM's shared-memory broadcast error)
FAILURE_LINE = "ValueError: No available shared memory broadcast block found in 60 seconds"

HEALTH_SERVER = textwrap.dedent(
    """
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
        def log_message(self, *args):
            pass
    print("Application startup complete.", flush=True)
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)
FAILING_SERVER = f"import sys; print({FAILURE_LINE!r}, file=sys.stderr, flush=True); sys.exit(3)"


@dataclass
class Rig:
    """What one launcher needs here to start a stand-in engine: the launch and the cluster."""

    make_launch: object  # (port, healthy: bool) -> LaunchSpec
    cluster: Cluster | None
    leftovers: object = None  # () -> names of what it started that is still there (docker: containers)

    def launch(self, port: int, healthy: bool = True) -> LaunchSpec:
        return self.make_launch(port, healthy)


def _server_argv(healthy: bool, port: int, folder: Path) -> list[str]:
    if not healthy:
        return [sys.executable, "-c", FAILING_SERVER]
    script = folder / "health_server.py"
    script.write_text(HEALTH_SERVER)
    return [sys.executable, str(script), str(port)]


@pytest.fixture
def process_rig(tmp_path: Path) -> Iterator[Rig]:
    def make(port: int, healthy: bool) -> LaunchSpec:
        node = NodeLaunch(argv=_server_argv(healthy, port, tmp_path))
        return LaunchSpec(engine="stand-in", nodes=[node], port=port, health_path="/health")

    yield Rig(make, None)


@pytest.fixture
def ray_rig(tmp_path: Path) -> Iterator[Rig]:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("the ray launcher needs Ray: pip install 'autotune[ray]'")
    root = Path(tempfile.mkdtemp(prefix="atc"))  # Ray's socket paths must stay short
    # its own head port: another Ray cluster on this host (a neighbour's test) holds the default one
    cluster = local_cluster(1, root).model_copy(update={"ray_port": free_port()})

    def make(port: int, healthy: bool) -> LaunchSpec:
        # the head entry is vLLM's own `ray start` for this node; the server entry is the stand-in
        rendered = VllmEngine(python=sys.executable).render_cluster(Candidate(engine="vllm", params={}), MODEL, port,
                                                                    cluster)
        argv = _server_argv(healthy, port, tmp_path)
        nodes = [n if n.role != "server" else n.model_copy(update={"argv": argv}) for n in rendered.nodes]
        return rendered.model_copy(update={"nodes": nodes, "ready": None})  # the stand-in serves no completions

    yield Rig(make, cluster)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def docker_rig(tmp_path: Path) -> Iterator[Rig]:
    from docker_daemon import daemon_image, labelled

    # the stand-in server's script lives in tmp_path: the container sees it at the same path
    cluster = Cluster(nodes=[ClusterNode(ip="127.0.0.1")], gpus_per_node=0, rdma=False, image=daemon_image(),
                      mounts={str(tmp_path): str(tmp_path)}, compile_cache=str(tmp_path / "compile-cache"))

    def make(port: int, healthy: bool) -> LaunchSpec:
        node = NodeLaunch(argv=_server_argv(healthy, port, tmp_path))
        return LaunchSpec(engine="stand-in", nodes=[node], port=port, health_path="/health")

    yield Rig(make, cluster, leftovers=lambda: labelled("autotune.study"))


@pytest.fixture
def docker_ray_rig(tmp_path: Path) -> Iterator[Rig]:
    from docker_daemon import daemon_image, labelled

    # two nodes on this host's daemon: vLLM's own `ray start` head and worker containers, the
    # stand-in server exec'd in the head container once Ray shows both nodes alive
    nodes = [ClusterNode(ip="127.0.0.1", num_cpus=1), ClusterNode(address="unix:///var/run/docker.sock",
                                                                   ip="127.0.0.1", num_cpus=1)]
    cluster = Cluster(nodes=nodes, gpus_per_node=0, rdma=False, image=daemon_image(), ray_port=free_port(),
                      mounts={str(tmp_path): str(tmp_path)}, compile_cache=None)

    def make(port: int, healthy: bool) -> LaunchSpec:
        rendered = VllmEngine(python=sys.executable).render_cluster(Candidate(engine="vllm", params={}), MODEL, port,
                                                                    cluster)
        argv = _server_argv(healthy, port, tmp_path)
        nodes = [n if n.role != "server" else n.model_copy(update={"argv": argv}) for n in rendered.nodes]
        return rendered.model_copy(update={"nodes": nodes, "ready": None})  # the stand-in serves no completions

    yield Rig(make, cluster, leftovers=lambda: labelled("autotune.study"))


#: rig -> the launcher it runs (docker twice on the real local daemon: one container, and Ray in containers)
RIGS = {"process": "process", "ray": "ray", "docker": "docker", "docker-ray": "docker"}


def test_every_registered_launcher_has_a_rig() -> None:
    assert set(RIGS.values()) == set(LAUNCHERS)


@pytest.fixture(params=sorted(RIGS))
def launcher(request: pytest.FixtureRequest) -> tuple[str, Rig]:
    """Every registered launcher, with its rig(s)."""
    return RIGS[request.param], request.getfixturevalue(request.param.replace("-", "_") + "_rig")


def _port_closed(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_registered_launcher_opens_and_stops_on_its_own(launcher: tuple[str, Rig]) -> None:
    name, _ = launcher
    cls = launcher_class(name)
    assert issubclass(cls, Launched)
    assert cls.open.__func__ is not Launched.open.__func__, f"{name} must say how it opens a launch"
    assert cls.stop_all.__func__ is not Launched.stop_all.__func__, f"{name} must say how it stops every launch"


def test_preflight_passes_its_own_rig_and_a_needed_cluster_file_is_asked_for(
    launcher: tuple[str, Rig], tmp_path: Path
) -> None:
    name, rig = launcher
    cls = launcher_class(name)
    cls.preflight(rig.cluster, cluster_file=None, reach=False)  # a dry run: nothing is reached
    if cls.needs_cluster_file:
        with pytest.raises(ConfigError, match="cluster file"):
            open_server(rig.launch(free_port()), tmp_path / "t.log", launcher=name, cluster=None)


def test_enter_is_healthy_and_leaving_stops_everything(launcher: tuple[str, Rig], tmp_path: Path) -> None:
    name, rig = launcher
    port = free_port()
    server = open_server(rig.launch(port), tmp_path / "t.log", launcher=name, cluster=rig.cluster,
                         study="contract", trial="1", startup_timeout_s=120)
    assert isinstance(server, launcher_class(name))
    with server:
        if rig.leftovers is not None:
            assert rig.leftovers(), f"{name}: what it started is not to be found while it runs"
        assert server.alive()
        assert server.startup_s is not None and server.startup_s >= 0
        assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
        assert "Application startup complete" in server.log_text()
    assert not server.alive()
    assert _port_closed(port), f"{name}: the engine's port still answers after leaving"
    if rig.leftovers is not None:
        assert not rig.leftovers(), f"{name}: left behind after the launch ended"
    server.stop()  # a second stop is harmless


def test_a_failed_start_raises_with_the_log_and_leaves_nothing(launcher: tuple[str, Rig], tmp_path: Path) -> None:
    name, rig = launcher
    server = open_server(rig.launch(free_port(), healthy=False), tmp_path / "t.log", launcher=name,
                         cluster=rig.cluster, startup_timeout_s=120)
    with pytest.raises(EngineStartError) as info:
        with server:
            pass
    assert not info.value.timed_out
    assert FAILURE_LINE in info.value.log_tail
    assert not server.alive()
    if rig.leftovers is not None:
        assert not rig.leftovers(), f"{name}: left behind after a failed start"


def test_stop_all_stops_a_launch_left_running(launcher: tuple[str, Rig], tmp_path: Path) -> None:
    name, rig = launcher
    port = free_port()
    server = open_server(rig.launch(port), tmp_path / "t.log", launcher=name, cluster=rig.cluster,
                         startup_timeout_s=120)
    server.start()
    server.wait_ready()
    assert server.alive()
    stop_all()  # what Ctrl-C, SIGTERM and atexit call
    assert not server.alive()
    assert _port_closed(port)
    if rig.leftovers is not None:
        assert not rig.leftovers(), f"{name}: left behind after stop_all()"
