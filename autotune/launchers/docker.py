"""Engine processes in containers, one Docker daemon per node (local socket or ssh://user@host).

Each NodeLaunch becomes one container on its node's daemon, started the way DGX Spark multi-node
setups run vLLM: host network, host IPC, every GPU, and for RDMA /dev/infiniband with unlimited
memlock. On a Ray launch the head and worker containers run `ray start --block`; the server entry
runs with `docker exec` inside the head container once Ray shows every node alive (NVIDIA's
playbook does the same by hand). Containers are labelled with the study and trial, so leftovers
of a crashed run can be found and removed (`cleanup`), and are not auto-removed, so their logs
survive a crash until collected. A reaper process per launch (launchers/docker_reaper.py) removes
them when autotune is killed or crashes before it can.

`DockerServer` has ServerProcess's contract. `docker_commands` renders the same launch as
`docker run` / `docker exec` argv lists for a recipe. The SDK (`docker` package) is imported only
when a DockerServer starts.

One module of ~640 lines on purpose: a container's life on every node (create, Ray head and
workers, exec, logs, stop and cleanup) is one sequence, and its cleanup must see every step.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import ConfigError, EngineStartError, EngineUnavailable
from autotune.launchers import nccl
from autotune.launchers import preflight as checks
from autotune.launchers.base import Launched, LaunchOptions, wait_for_health
from autotune.launchers.docker_reaper import release, start_reaper
from autotune.launchers.process import tail
from autotune.launchers.ray import (
    NODES_MARKER,
    nodes_check_argv,
    parse_nodes_report,
    role_log_path,
)
from autotune.models import (
    CONTAINER_HF_CACHE,
    CONTAINER_JIT_CACHE_ENV,
    CONTAINER_VLLM_CACHE,
    Cluster,
    LaunchSpec,
    NcclReading,
    NodeLaunch,
)

INSTALL_HINT = "pip install 'autotune[docker]'"
LABEL_STUDY = "autotune.study"
LABEL_TRIAL = "autotune.trial"
LABEL_NODE = "autotune.node"
LABEL_ROLE = "autotune.role"
LABEL_LAUNCH = "autotune.launch"  # one DockerServer's containers, whatever the study and trial
CONTAINER_PYTHON = "python3"  # the engine's interpreter inside the image
_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_.-]+")
_LIVE: weakref.WeakSet[DockerServer] = weakref.WeakSet()
#: why a launch is dead once stop() ran (the reason wait_for_health and the Ray wait raise with)
STOPPED = "the launch was stopped (its containers removed)"
#: read from the caller's environment when a container starts; never written anywhere
PASS_THROUGH_ENV: tuple[str, ...] = ("HF_TOKEN",)


def pass_through_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The secrets to hand a container at start: PASS_THROUGH_ENV names present now."""
    source = os.environ if environ is None else environ
    return {name: source[name] for name in PASS_THROUGH_ENV if name in source}


class ContainerSpec(BaseModel):
    """One container, described once; rendered both as Docker SDK arguments and as `docker run`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    image: str
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    ipc_host: bool = True
    shm_size: str | None = None
    gpus: bool = True
    rdma: bool = True
    privileged: bool = False
    binds: list[str] = Field(default_factory=list, description="host:container[:ro]")


def container_spec(
    node: NodeLaunch,
    cluster: Cluster,
    name: str,
    labels: dict[str, str] | None = None,
    image_env: frozenset[str] = frozenset(),
) -> ContainerSpec:
    """One node's container. With the compile cache mounted, FlashInfer's and Triton's kernel caches
    point into it too, except those the launch sets or the image's own ENV names (`image_env`: an
    image may ship prebuilt kernels where its ENV says)."""
    if not cluster.image:
        raise EngineUnavailable("the docker launcher needs `image` in the cluster file (the same image on every node)")
    binds = []
    if cluster.hf_cache:
        binds.append(f"{cluster.hf_cache}:{CONTAINER_HF_CACHE}")
    if cluster.model_dir:
        binds.append(f"{cluster.model_dir}:{cluster.model_dir}:ro")
    binds += [f"{host}:{inside}" for host, inside in cluster.mounts.items()]
    env = dict(node.env)
    if cluster.compile_cache:
        binds.append(f"{cluster.compile_cache}:{CONTAINER_VLLM_CACHE}")
        env = {**{k: v for k, v in CONTAINER_JIT_CACHE_ENV.items() if k not in image_env}, **env}
    return ContainerSpec(
        name=name,
        image=cluster.image,
        argv=_portable(node.argv),
        env=env,
        labels=labels or {},
        ipc_host=cluster.ipc_host,
        shm_size=None if cluster.ipc_host else cluster.shm_size,
        gpus=cluster.gpus_per_node > 0,
        rdma=cluster.rdma,
        privileged=cluster.privileged,
        binds=binds,
    )


def _portable(argv: list[str]) -> list[str]:
    """This host's interpreter path means the image's python3 inside a container."""
    return [CONTAINER_PYTHON if a == sys.executable else a for a in argv]


def run_argv(spec: ContainerSpec, address: str | None = None, pass_env: Iterable[str] = PASS_THROUGH_ENV) -> list[str]:
    """`docker run` for `spec`; pass-through secrets appear by name only (docker reads the value)."""
    argv = _docker(address) + ["run", "--detach", "--name", spec.name, "--network", "host"]
    argv += ["--ipc", "host"] if spec.ipc_host else (["--shm-size", spec.shm_size] if spec.shm_size else [])
    if spec.gpus:
        argv += ["--gpus", "all"]
    if spec.rdma:
        argv += ["--device", "/dev/infiniband:/dev/infiniband", "--ulimit", "memlock=-1", "--cap-add", "IPC_LOCK"]
    if spec.privileged:
        argv.append("--privileged")
    for bind in spec.binds:
        argv += ["-v", bind]
    for key, value in sorted(spec.labels.items()):
        argv += ["--label", f"{key}={value}"]
    argv += _env_args(spec.env, pass_env)
    return argv + ["--entrypoint", spec.argv[0], spec.image, *spec.argv[1:]]


def exec_argv(
    node: NodeLaunch, container: str, address: str | None = None, pass_env: Iterable[str] = PASS_THROUGH_ENV
) -> list[str]:
    """`docker exec` of `node` inside `container` (the server on the Ray head)."""
    return _docker(address) + ["exec", *_env_args(node.env, pass_env), container, *_portable(node.argv)]


def _docker(address: str | None) -> list[str]:
    return ["docker"] if address is None else ["docker", "--host", address]


def _env_args(env: dict[str, str], pass_env: Iterable[str]) -> list[str]:
    args: list[str] = []
    for key, value in sorted(env.items()):
        args += ["-e", f"{key}={value}"]
    for key in pass_env:
        if key not in env:
            args += ["-e", key]
    return args


def recipe_name(node: NodeLaunch) -> str:
    return f"autotune-node{node.node}-{node.role}"


def exec_host(launch: LaunchSpec, node: NodeLaunch) -> NodeLaunch | None:
    """The head entry a server entry is exec'd in: the head on the same node, if there is one."""
    if node.role != "server":
        return None
    return next((n for n in launch.nodes if n.role == "head" and n.node == node.node), None)


def docker_commands(launch: LaunchSpec, cluster: Cluster) -> list[list[str]]:
    """The launch as the docker commands a person runs, in order: `docker run` per container,
    then `docker exec` of the server in the head container. Deterministic container names."""
    commands = []
    for node in launch.nodes:
        address = cluster.nodes[node.node].address
        head = exec_host(launch, node)
        if head is not None:
            commands.append(exec_argv(node, recipe_name(head), address))
        else:
            commands.append(run_argv(container_spec(node, cluster, recipe_name(node)), address))
    return commands


def sdk_kwargs(spec: ContainerSpec) -> dict[str, Any]:
    """Keyword arguments of `DockerClient.containers.create` for `spec`."""
    types = _sdk().types
    DeviceRequest, Ulimit = types.DeviceRequest, types.Ulimit

    kwargs: dict[str, Any] = dict(
        image=spec.image,
        entrypoint=[spec.argv[0]],
        command=spec.argv[1:],
        name=spec.name,
        environment=dict(spec.env),
        labels=dict(spec.labels),
        network_mode="host",
        privileged=spec.privileged,
        auto_remove=False,
        detach=True,
    )
    if spec.ipc_host:
        kwargs["ipc_mode"] = "host"
    elif spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.gpus:
        kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if spec.rdma:
        kwargs["devices"] = ["/dev/infiniband:/dev/infiniband"]
        kwargs["ulimits"] = [Ulimit(name="memlock", soft=-1, hard=-1)]
        kwargs["cap_add"] = ["IPC_LOCK"]
    if spec.binds:
        kwargs["volumes"] = list(spec.binds)
    return kwargs


# ---------------------------------------------------------------------- daemons


def _sdk():
    try:
        import docker
    except ImportError:
        raise EngineUnavailable(f"the docker launcher needs the Docker SDK: {INSTALL_HINT}") from None
    return docker


def docker_client(address: str | None):
    """A client for one daemon: None = local (DOCKER_HOST or the default socket), ssh:// through
    the system ssh client (so ~/.ssh/config applies). EngineUnavailable when it cannot be reached."""
    docker = _sdk()
    where = address or "the local Docker daemon (DOCKER_HOST or /var/run/docker.sock)"
    try:
        if address is None:
            return docker.from_env()
        return docker.DockerClient(base_url=address, use_ssh_client=address.startswith("ssh://"))
    except docker.errors.DockerException as exc:
        raise EngineUnavailable(f"cannot reach the Docker daemon at {where}: {exc}") from None


ClientFactory = Callable[[str | None], Any]


def remove_labelled(
    cluster: Cluster, labels: list[str], client_factory: ClientFactory = docker_client,
    log_path: Path | None = None,
) -> list[str]:
    """Remove every container carrying all `labels` (key=value) on every node's daemon; the names
    removed. With `log_path` (the trial's log), each container's log is saved first, where
    DockerServer.stop saves it."""
    removed = []
    for address in dict.fromkeys(n.address for n in cluster.nodes):
        client = client_factory(address)
        try:
            # the stop and the reaper both remove: a container gone meanwhile is skipped, not an error
            for container in client.containers.list(all=True, filters={"label": labels}, ignore_removed=True):
                if log_path is not None:
                    _save_log(container, log_path)
                try:
                    container.remove(force=True)
                except _sdk().errors.NotFound:
                    continue
                removed.append(container.name)
        finally:
            client.close()
    return removed


def _save_log(container: Any, log_path: Path) -> None:
    labels = container.labels
    path = role_log_path(log_path, int(labels.get(LABEL_NODE, 0)), labels.get(LABEL_ROLE, "server"))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.write_bytes(container.logs(stdout=True, stderr=True))
    except Exception as exc:  # a daemon that went away must not stop the removal
        path.write_text(f"(log not collected: {exc})\n")


def cleanup(
    cluster: Cluster,
    study: str,
    trial: str | None = None,
    client_factory: ClientFactory = docker_client,
) -> list[str]:
    """Remove every container labelled with `study` (and `trial`) on every node's daemon; the
    names removed. For leftovers of a crashed or killed run."""
    filters = [f"{LABEL_STUDY}={study}"] + ([f"{LABEL_TRIAL}={trial}"] if trial is not None else [])
    return remove_labelled(cluster, filters, client_factory)


def stop_all() -> None:
    """Remove the containers of every DockerServer still up (the CLI calls this on Ctrl-C, SIGTERM and errors)."""
    for server in list(_LIVE):
        server.stop(raise_errors=False)


def _slug(text: str) -> str:
    return _NAME_CHARS.sub("-", text).strip("-.") or "x"


# ---------------------------------------------------------------------- the server


class DockerServer(Launched):
    """The launch in containers on the cluster's daemons; ServerProcess's contract.

    Entering: check the image on every node (same build), start one container per node entry,
    wait until Ray shows every node alive (Ray launches), exec the server in the head container,
    wait for its health endpoint. Any failure removes every container made so far and raises
    EngineStartError with the logs. Leaving saves each container's log next to `log_path`, then
    removes the containers.
    """

    def __init__(
        self,
        launch: LaunchSpec,
        cluster: Cluster,
        log_path: Path,
        *,
        study: str = "autotune",
        trial: str = "0",
        startup_timeout_s: float = 180.0,
        client_factory: ClientFactory = docker_client,
        poll_s: float = 0.5,
    ) -> None:
        for node in launch.nodes:
            if not 0 <= node.node < len(cluster.nodes):
                raise EngineUnavailable(f"the launch uses node {node.node}, the cluster has {len(cluster.nodes)} nodes")
        self.launch = launch
        self.cluster = cluster
        self.log_path = log_path
        self.study = study
        self.trial = str(trial)
        self.startup_timeout_s = startup_timeout_s
        self.client_factory = client_factory
        self.poll_s = poll_s
        self.base_url = f"http://{cluster.client_host}:{launch.port}"
        self.startup_s: float | None = None
        self.containers: list[tuple[NodeLaunch, Any]] = []
        self._clients: dict[str | None, Any] = {}
        self._image_env: frozenset[str] = frozenset()  # the names the image's own ENV sets (_check_images)
        self._exec_id: str | None = None
        self._exec_client: Any = None
        self._exec_stream: Any = None
        self._exec_thread: threading.Thread | None = None
        self.launch_id = uuid.uuid4().hex[:12]
        self._reaper: subprocess.Popen[bytes] | None = None
        self.cleanup_errors: list[str] = []
        # stop() may come from another thread (Ctrl-C with trials in flight: the controller stops
        # every launch while each launch's thread is still starting its own)
        self._lock = threading.Lock()
        self._stopped = False

    @classmethod
    def open(cls, launch: LaunchSpec, log_path: Path, options: LaunchOptions) -> Launched:
        if options.cluster is None:
            raise ConfigError("the docker launcher needs a cluster file (nodes, image)")
        return cls(launch, options.cluster, log_path, study=options.study, trial=options.trial,
                   startup_timeout_s=options.startup_timeout_s)

    @classmethod
    def stop_all(cls) -> None:
        stop_all()

    needs_cluster_file = "nodes with their Docker daemons, and the image"

    @classmethod
    def nodes_here(cls, launch: LaunchSpec, cluster: Cluster | None) -> list[int]:
        """The nodes whose daemon is this host's own (a unix socket); one behind ssh:// or tcp:// is
        taken for another host, even where that address loops back."""
        def here(node: int) -> bool:
            address = (cluster.nodes[node].address if cluster and node < len(cluster.nodes) else None) or os.environ.get(
                "DOCKER_HOST")
            return address is None or address.startswith("unix://")

        return [n for n in super().nodes_here(launch, cluster) if here(n)]

    @classmethod
    def preflight(
        cls, cluster: Cluster | None, *, cluster_file: object | None, reach: bool = True,
        timeout_s: float = checks.REACH_TIMEOUT_S,
    ) -> None:
        if cluster is not None and reach:
            checks.require_docker(cluster, timeout_s)

    # -------------------------------------------------------------- lifecycle

    @classmethod
    def read_nccl(cls, launch: LaunchSpec, cluster: Cluster | None) -> list[NcclReading]:
        """The reader in a throw-away container of the image on each node's daemon (host network,
        the node's environment; no GPU needed to read files)."""
        if cluster is None or not cluster.image:
            return []
        readings = []
        for node in nccl.rank_nodes(launch):
            address = cluster.nodes[node.node].address
            try:
                output = docker_client(address).containers.run(
                    cluster.image, entrypoint=[CONTAINER_PYTHON], command=["-c", nccl.READER],
                    environment=dict(node.env), network_mode="host", remove=True, stdout=True, stderr=True,
                )
            except Exception as exc:  # the SDK's errors, an unreachable daemon: this node could not be read
                readings.append(NcclReading(node=node.node, error=f"the NCCL reader did not run: {type(exc).__name__}: {exc}"))
                continue
            text = output.decode(errors="replace") if isinstance(output, bytes) else str(output)
            readings.append(nccl.parse_reading(node.node, text))
        return readings

    def stop_after_failed_start(self) -> None:
        self.stop(raise_errors=False)  # the start failure is the news; leftovers stay in cleanup_errors

    def start(self) -> None:
        self._t0 = time.monotonic()
        _LIVE.add(self)
        self._check_images()
        # before the first container: a reaper must exist whenever a container does
        self._reaper = start_reaper(self.cluster, self.launch_id, self.log_path)
        server = self.launch.server
        head = exec_host(self.launch, server)
        for node in self.launch.nodes:
            if node is server and head is not None:
                continue
            self._run_container(node)
        if any(n.role == "head" for n in self.launch.nodes):
            self._wait_ray()
        if head is not None:
            self._exec_server(server, head)

    def wait_ready(self) -> None:
        self.startup_s = wait_for_health(
            self.base_url + self.launch.health_path, self._t0, self.startup_timeout_s, self._dead, self.log_text,
            ready=self.launch.ready,
        )

    def alive(self) -> bool:
        """Up: started, not stopped (stopping removes every container), and nothing has ended."""
        return bool(self.containers) and self._dead() is None

    def log_text(self, max_bytes: int = 8_000) -> str:
        """Each container's recent log, then the server's (exec'd server: its streamed output)."""
        parts = []
        for node, container in self.containers:
            parts.append(f"--- {self._label(node)} ---\n{self._container_log(container, max_bytes)}")
        if self._exec_id is not None:
            parts.append(f"--- server (exec) ---\n{tail(self.log_path, max_bytes)}")
        return "\n".join(parts)

    def stop(self, raise_errors: bool = True) -> None:
        """Save every container's full log, then remove the containers (force: running ones too).
        A container that cannot be removed raises EngineUnavailable (it may hold GPU memory). From
        then on the launch is dead: a start still under way in another thread ends at once."""
        with self._lock:
            self._stopped = True
            containers, self.containers = self.containers, []
            reaper, self._reaper = self._reaper, None
            exec_stream, self._exec_stream = self._exec_stream, None
        if exec_stream is not None:
            try:
                exec_stream.close()
            except Exception:  # the connection may already be gone with the container
                pass
        for _, container in containers:
            _save_log(container, self.log_path)
        errors = []
        for node, container in containers:
            try:
                container.remove(force=True)
            except Exception as exc:
                if getattr(exc, "status_code", None) != 404:
                    errors.append(f"{container.name} on {self.cluster.nodes[node.node].address or 'local'}: {exc}")
        if self._exec_thread is not None:
            self._exec_thread.join(timeout=5.0)
            self._exec_thread = None
        for client in self._clients.values():
            client.close()
        self._clients, self._exec_client = {}, None
        if reaper is not None:  # containers it could not remove are the reaper's to retry
            release(reaper, done=not errors)
        _LIVE.discard(self)
        if containers:  # a second stop (the launch's own, after another thread's) found nothing
            self.cleanup_errors = errors
        if errors and raise_errors:
            raise EngineUnavailable(
                f"could not remove containers ({'; '.join(errors)}); remove them with `docker rm -f` "
                f"(they carry the label {LABEL_STUDY}={self.study}) before the next trial"
            )

    # -------------------------------------------------------------- steps

    def _client(self, index: int) -> Any:
        address = self.cluster.nodes[index].address
        if address not in self._clients:
            self._clients[address] = self.client_factory(address)
        return self._clients[address]

    def _check_images(self) -> None:
        docker = _sdk()

        image = self.cluster.image
        if not image:
            raise EngineUnavailable("the docker launcher needs `image` in the cluster file")
        ids: dict[int, str] = {}
        found: Any = None
        for index in sorted({n.node for n in self.launch.nodes}):
            address = self.cluster.nodes[index].address or "local daemon"
            try:
                found = self._client(index).images.get(image)
                ids[index] = found.id
            except docker.errors.ImageNotFound:
                host = "" if address == "local daemon" else f"--host {address} "
                raise EngineUnavailable(
                    f"image {image} is not on node {index} ({address}); pull it there first: docker {host}pull {image}"
                ) from None
        if len(set(ids.values())) > 1:
            listed = ", ".join(f"node {i}: {v[:19]}" for i, v in ids.items())
            raise EngineUnavailable(
                f"nodes hold different builds of {image} ({listed}); pull the same digest everywhere"
            )
        # one build on every node: the names its own ENV sets
        config_env = ((found.attrs.get("Config") or {}).get("Env") or []) if found is not None else []
        self._image_env = frozenset(item.split("=", 1)[0] for item in config_env)

    def _run_container(self, node: NodeLaunch) -> None:
        docker = _sdk()

        labels = {
            LABEL_STUDY: self.study,
            LABEL_TRIAL: self.trial,
            LABEL_NODE: str(node.node),
            LABEL_ROLE: node.role,
            LABEL_LAUNCH: self.launch_id,
        }
        name = _slug(f"autotune-{self.study}-{self.trial}-n{node.node}-{node.role}-{self.launch_id[:6]}")
        spec = container_spec(node, self.cluster, name, labels, self._image_env)
        kwargs = sdk_kwargs(spec)
        kwargs["environment"] = {**kwargs["environment"], **pass_through_env()}
        client = self._client(node.node)
        with self._lock:  # a stop() either comes first and no container is made, or removes this one
            if self._stopped:
                raise EngineStartError(f"{STOPPED} before the {self._label(node)} container was created")
            try:
                container = client.containers.create(**kwargs)
            except docker.errors.APIError as exc:
                what = f"could not create the {self._label(node)} container: {exc}"
                raise EngineStartError(what, self.log_text()) from None
            self.containers.append((node, container))
        try:
            container.start()
        except docker.errors.APIError as exc:
            what = f"could not start the {self._label(node)} container: {exc}"
            raise EngineStartError(what, self.log_text()) from None

    def _head_container(self, node: NodeLaunch | None = None) -> Any:
        for launched, container in self.containers:
            if launched.role == "head" and (node is None or launched.node == node.node):
                return container
        raise EngineStartError("no head container is running")

    def _wait_ray(self) -> None:
        """Run Ray's node check inside the head container until every node is alive."""
        want = sum(n.role in ("head", "worker") for n in self.launch.nodes)
        head = self._head_container()
        address = self.cluster.ray_address
        deadline = self._t0 + self.startup_timeout_s
        output = ""
        while True:
            dead = self._dead()
            if dead:
                raise EngineStartError(f"{dead} while the Ray cluster started", log_tail=self.log_text())
            left = deadline - time.monotonic()
            if left <= 0:
                raise EngineStartError(
                    f"Ray did not show {want} alive nodes at {address} within {self.startup_timeout_s:.0f} s",
                    log_tail=self.log_text() + "\n--- ray nodes check ---\n" + output[-3000:],
                    timed_out=True,
                )
            argv = nodes_check_argv(CONTAINER_PYTHON, address, want, min(left, 20.0))
            code, raw = head.exec_run(argv, environment={"RAY_USAGE_STATS_ENABLED": "0"})
            output = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            report = parse_nodes_report(output) if NODES_MARKER in output else None
            if code == 0 and report is not None and len(report.alive) >= want:
                return
            time.sleep(self.poll_s)

    def _exec_server(self, server: NodeLaunch, head_node: NodeLaunch) -> None:
        container = self._head_container(head_node)
        api = self._client(head_node.node).api
        env = {**server.env, **pass_through_env()}
        created = api.exec_create(container.id, _portable(server.argv), environment=env)
        self._exec_id, self._exec_client = created["Id"], api
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text(f"$ {shlex.join(_portable(server.argv))}\n")
        self._exec_stream = api.exec_start(self._exec_id, stream=True)
        self._exec_thread = threading.Thread(target=self._copy_exec_output, name="docker-exec-log", daemon=True)
        self._exec_thread.start()

    def _copy_exec_output(self) -> None:
        with self.log_path.open("ab") as log:
            try:
                for chunk in self._exec_stream:
                    log.write(chunk)
                    log.flush()
            except Exception as exc:  # the stream ends abruptly when the container is removed
                log.write(f"\n(log stream ended: {type(exc).__name__})\n".encode())

    # -------------------------------------------------------------- state

    def _dead(self) -> str | None:
        """A message naming the first container that is not running, or the exec'd server that ended
        (or that the launch was stopped)."""
        if self._stopped:
            return STOPPED
        for node, container in list(self.containers):
            try:
                container.reload()
            except Exception as exc:
                return f"{self._label(node)} container is gone ({exc})"
            if container.status != "running":
                code = container.attrs.get("State", {}).get("ExitCode")
                return f"{self._label(node)} container {container.status} (exit code {code})"
        if self._exec_id is not None and self._exec_client is not None:
            info = self._exec_client.exec_inspect(self._exec_id)
            if not info.get("Running"):
                return f"engine exited with code {info.get('ExitCode')}"
        return None

    def _label(self, node: NodeLaunch) -> str:
        address = self.cluster.nodes[node.node].address or "local"
        return f"node {node.node} ({node.role}, {address})"

    @staticmethod
    def _container_log(container: Any, max_bytes: int) -> str:
        try:
            return container.logs(stdout=True, stderr=True, tail=400)[-max_bytes:].decode(errors="replace")
        except Exception as exc:
            return f"(log not available: {exc})"


__all__ = [
    "ContainerSpec",
    "DockerServer",
    "cleanup",
    "container_spec",
    "docker_client",
    "docker_commands",
    "exec_argv",
    "remove_labelled",
    "run_argv",
    "sdk_kwargs",
    "stop_all",
]
