"""Multi-node on Ray, as local processes: a Ray head and workers, then the engine server on the head.

vLLM's own Ray executor spreads the ranks; autotune only starts the Ray nodes and the server.
`RayCluster` runs the `head`/`worker` entries of a LaunchSpec (each `ray start ... --block` in its
own process group, so SIGTERM makes that node drain and shut its Ray processes down) and waits until
Ray reports every node alive. `ClusterServer` brings the cluster up, then the `server` entry with
ServerProcess, and has ServerProcess's contract, so a trial can use it in place of ServerProcess.

Here every node runs on this host: the test bed (several raylets on one host stand in for boxes,
each with its own temp dir) or a multi-GPU host with one raylet per GPU. Real boxes run the same
NodeLaunch entries in containers through the docker launcher.

`ray stop` is not used: it kills every Ray process of the user on the host, other clusters included.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import ConfigError, EngineStartError
from autotune.launchers import nccl
from autotune.launchers import preflight as checks
from autotune.launchers.base import (
    Launched,
    LaunchOptions,
    LocalLaunched,
    command_line,
    ray_launch_problem,
    wait_for_health,
)
from autotune.launchers.process import ServerProcess, _die_with_parent, tail
from autotune.launchers.reap_group import dismiss, start_reaper
from autotune.launchers.watchdog import Watchdog, WatchdogLimits
from autotune.models import Cluster, LaunchSpec, NcclReading, NodeLaunch

_LIVE: weakref.WeakSet[RayCluster] = weakref.WeakSet()

NODES_MARKER = "AUTOTUNE_RAY_NODES "

# Run with the head's Python: connect as a driver, wait until `want` nodes are alive, optionally
# run one task pinned to each node (proof that every raylet executes work), print one JSON line.
NODES_SCRIPT = """\
import json, sys, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
address, want, timeout_s, place = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
deadline = time.monotonic() + timeout_s
ray.init(address=address, logging_level="ERROR", log_to_driver=False)
while True:
    alive = [n for n in ray.nodes() if n.get("Alive")]
    if len(alive) >= want or time.monotonic() > deadline:
        break
    time.sleep(0.5)
report = {"alive": [
    {"node_id": n["NodeID"], "ip": n["NodeManagerAddress"], "resources": n.get("Resources", {})} for n in alive
]}
if place and len(alive) >= want:
    @ray.remote(num_cpus=0)
    def where():
        return ray.get_runtime_context().get_node_id()
    pinned = [NodeAffinitySchedulingStrategy(n["NodeID"], soft=False) for n in alive]
    refs = [where.options(scheduling_strategy=s).remote() for s in pinned]
    report["task_nodes"] = ray.get(refs, timeout=max(deadline - time.monotonic(), 30.0))
print("AUTOTUNE_RAY_NODES " + json.dumps(report), flush=True)
sys.exit(0 if len(alive) >= want else 1)
"""


class RayNode(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node_id: str
    ip: str
    resources: dict[str, float] = Field(default_factory=dict)


class RayNodesReport(BaseModel):
    """What Ray said about the cluster: alive nodes, and where the pinned tasks ran (if asked)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alive: list[RayNode]
    task_nodes: list[str] = Field(default_factory=list)


def nodes_check_argv(python: str, address: str, want: int, timeout_s: float, place_tasks: bool = False) -> list[str]:
    return [python, "-c", NODES_SCRIPT, address, str(want), f"{timeout_s:.0f}", "1" if place_tasks else "0"]


def parse_nodes_report(output: str) -> RayNodesReport | None:
    line = next((ln for ln in reversed(output.splitlines()) if ln.startswith(NODES_MARKER)), None)
    return None if line is None else RayNodesReport.model_validate(json.loads(line.removeprefix(NODES_MARKER)))


def head_address(launch: LaunchSpec) -> str:
    """`ip:port` of the Ray head, from its `ray start --head` argv."""
    head = next((n for n in launch.nodes if n.role == "head"), None)
    if head is None:
        raise ValueError("the launch has no head node")
    return f"{_option(head.argv, '--node-ip-address') or '127.0.0.1'}:{_option(head.argv, '--port') or '6379'}"


def _option(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def port_open(address: str, timeout_s: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------------- one node process


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (from /proc), so none escapes by changing its group."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def pid_alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class NodeProcess:
    """One NodeLaunch as a local process in its own process group, logging to a file."""

    def __init__(self, node: NodeLaunch, log_path: Path, limits: WatchdogLimits | None = None) -> None:
        self.node = node
        self.log_path = log_path
        self.limits = limits
        self.proc: subprocess.Popen[bytes] | None = None
        self.reaper: subprocess.Popen[bytes] | None = None  # kills the group if autotune goes first
        self.watchdog: Watchdog | None = None
        self.pids_seen: set[int] = set()
        self._log: IO[bytes] | None = None

    @property
    def label(self) -> str:
        return f"node {self.node.node} ({self.node.role})"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"$ {command_line(self.node)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            self.node.argv,
            env={**os.environ, **self.node.env},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self.reaper = start_reaper(self.proc.pid)
        if self.limits is not None:
            self.watchdog = Watchdog(self.proc.pid, self.limits)
            self.watchdog.start()

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_text(self, max_bytes: int = 8_000) -> str:
        if self._log:
            self._log.flush()
        return tail(self.log_path, max_bytes)

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the `ray start --block` leader (Ray drains and stops this node's processes),
        then SIGKILL its group and any descendant still alive."""
        if self.watchdog:
            self.watchdog.stop()
        proc, self.proc = self.proc, None
        if proc is not None:
            self.pids_seen.update([proc.pid, *descendants(proc.pid)])
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in self.pids_seen:
                if pid != proc.pid and pid_alive(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
            deadline = time.monotonic() + 5.0  # SIGKILLed processes take a moment to go
            while any(pid_alive(p) for p in self.pids_seen) and time.monotonic() < deadline:
                time.sleep(0.05)
        reaper, self.reaper = self.reaper, None
        if reaper is not None and proc is not None:
            dismiss(reaper, proc.pid)
        if self._log:
            self._log.close()
            self._log = None

    def remember_children(self) -> None:
        """Note the processes below the leader now (Ray's workers come and go)."""
        if self.proc is not None:
            self.pids_seen.update(descendants(self.proc.pid))


# ---------------------------------------------------------------------- the cluster


def stop_all() -> None:
    """Stop every Ray cluster still up (the CLI calls this on Ctrl-C, SIGTERM and errors)."""
    for cluster in list(_LIVE):
        cluster.stop()


def node_log_path(log_path: Path, node: NodeLaunch) -> Path:
    return role_log_path(log_path, node.node, node.role)


def role_log_path(log_path: Path, node: int, role: str) -> Path:
    """Where the log of node `node`'s `role` process goes, beside the trial's log."""
    return log_path.with_name(f"{log_path.stem}.node{node}-{role}{log_path.suffix or '.log'}")


class RayCluster(Launched):
    """The head and worker entries of a LaunchSpec as local Ray nodes.

    Entering starts the head, waits for its GCS port, starts the workers and waits until Ray
    reports every node alive; a node process that exits, or `ready_timeout_s`, raises
    EngineStartError with the node logs. Leaving stops every node.
    """

    def __init__(
        self,
        launch: LaunchSpec,
        log_path: Path,
        *,
        ready_timeout_s: float = 120.0,
        limits: WatchdogLimits | None = None,
    ) -> None:
        problem = ray_launch_problem(launch)
        if problem:
            raise ConfigError(problem)
        members = [n for n in launch.nodes if n.role in ("head", "worker")]
        self.launch = launch
        self.address = head_address(launch)
        self.python = members[0].argv[0]
        self.ready_timeout_s = ready_timeout_s
        self.nodes = [NodeProcess(n, node_log_path(log_path, n), limits) for n in members]
        self.report: RayNodesReport | None = None
        self.ready_s: float | None = None

    def start(self) -> None:
        self._t0 = time.monotonic()
        _LIVE.add(self)
        head, *workers = self.nodes
        head.start()
        self._wait(lambda: port_open(self.address), f"Ray head GCS at {self.address}")
        for worker in workers:
            worker.start()

    def wait_ready(self) -> RayNodesReport:
        """Block until Ray reports every node alive; the report is kept in `self.report`."""
        left = self.ready_timeout_s - (time.monotonic() - self._t0)
        self.report = self.check(left)
        self.ready_s = time.monotonic() - self._t0
        for node in self.nodes:
            node.remember_children()
        return self.report

    def check(self, timeout_s: float = 60.0, place_tasks: bool = False) -> RayNodesReport:
        """Ask Ray (as a short-lived driver) for the alive nodes; with `place_tasks`, also run one
        task pinned to each node. Raises EngineStartError when fewer than all nodes come alive."""
        want = len(self.nodes)
        argv = nodes_check_argv(self.python, self.address, want, max(timeout_s, 1.0), place_tasks)
        env = {**os.environ, **self.nodes[0].node.env, "RAY_USAGE_STATS_ENABLED": "0"}
        with tempfile.TemporaryFile() as out:  # a file, not a pipe: nobody reads while it runs
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            deadline = time.monotonic() + timeout_s + 30.0  # the driver's own connect and teardown
            while proc.poll() is None:
                dead = self.dead_node()
                if dead or time.monotonic() > deadline:
                    _kill_quietly(proc)
                    if dead:
                        raise EngineStartError(dead, log_tail=self.log_text())
                    break
                time.sleep(0.2)
            out.seek(0)
            output = out.read().decode(errors="replace")
        report = parse_nodes_report(output)
        alive = len(report.alive) if report else 0
        if report is None or alive < want:
            raise EngineStartError(
                f"Ray shows {alive} of {want} nodes alive at {self.address} after {timeout_s:.0f} s",
                log_tail=self.log_text() + "\n--- ray nodes check ---\n" + output[-3000:],
                timed_out=True,
            )
        return report

    def dead_node(self) -> str | None:
        """A message naming the first node process that exited or was stopped by the watchdog."""
        for node in self.nodes:
            if node.watchdog and node.watchdog.tripped:
                return f"watchdog stopped Ray {node.label}: {node.watchdog.tripped}"
            code = node.exit_code()
            if code is not None:
                return f"Ray {node.label} exited with code {code}"
        return None

    def log_text(self) -> str:
        return "\n".join(f"--- Ray {n.label} ---\n{n.log_text()}" for n in self.nodes)

    def pids(self) -> set[int]:
        """Every process id this cluster started or saw below its node processes."""
        seen: set[int] = set()
        for node in self.nodes:
            node.remember_children()
            seen |= node.pids_seen | ({node.proc.pid} if node.proc else set())
        return seen

    def stop(self, grace_s: float = 30.0) -> None:
        """Workers first, then the head; each drains, then whatever is left is killed."""
        for node in reversed(self.nodes):
            node.stop(grace_s)
        _LIVE.discard(self)

    def _wait(self, ready, what: str) -> None:
        deadline = self._t0 + self.ready_timeout_s
        while not ready():
            dead = self.dead_node()
            if dead:
                raise EngineStartError(dead, log_tail=self.log_text())
            if time.monotonic() > deadline:
                raise EngineStartError(
                    f"{what} not up after {self.ready_timeout_s:.0f} s", log_tail=self.log_text(), timed_out=True
                )
            time.sleep(0.2)


def _kill_quietly(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


# ---------------------------------------------------------------------- cluster + server


class ClusterServer(LocalLaunched):
    """Ray cluster up, then the `server` entry (vLLM on the head) as a ServerProcess.

    Same contract as ServerProcess: entering returns once the server's health endpoint answers;
    a node or the server dying, the watchdog, or `startup_timeout_s` (for the whole start) raise
    EngineStartError with the server log and every node's log. Leaving stops the server, then Ray.
    """

    def __init__(
        self,
        launch: LaunchSpec,
        log_path: Path,
        *,
        startup_timeout_s: float = 180.0,
        host: str = "127.0.0.1",
        limits: WatchdogLimits | None = None,
    ) -> None:
        super().__init__(launch, log_path, startup_timeout_s=startup_timeout_s, host=host, limits=limits)
        self.ray = RayCluster(launch, log_path, ready_timeout_s=startup_timeout_s, limits=self.limits)
        self.server: ServerProcess | None = None

    #: a one-node launch is a Ray head and the server too (the one-Spark case of the same path)
    ray_nodes_only = True

    @classmethod
    def open(cls, launch: LaunchSpec, log_path: Path, options: LaunchOptions) -> Launched:
        host = options.cluster.client_host if options.cluster else "127.0.0.1"
        return cls(launch, log_path, startup_timeout_s=options.startup_timeout_s, limits=options.limits, host=host)

    @classmethod
    def stop_all(cls) -> None:
        ServerProcess.stop_all()  # the server on the head first, then the Ray nodes under it
        stop_all()

    @classmethod
    def preflight(
        cls, cluster: Cluster | None, *, cluster_file: object | None, reach: bool = True,
        timeout_s: float = checks.REACH_TIMEOUT_S,
    ) -> None:
        if cluster is None or not reach:  # a dry run only shows the launch
            return
        if cluster_file is not None:
            checks.require_local_nodes(cluster)
        checks.require_ray(cluster, one_node_too=True)

    @classmethod
    def read_nccl(cls, launch: LaunchSpec, cluster: Cluster | None) -> list[NcclReading]:
        """Every node runs on this host: the reader runs with each node's Python and environment."""
        return [nccl.read_local(node) for node in nccl.rank_nodes(launch)]

    def start(self) -> None:
        self._t0 = time.monotonic()
        self.ray.start()
        self.ray.wait_ready()
        left = self.startup_timeout_s - (time.monotonic() - self._t0)
        self.server = ServerProcess(
            self.launch, self.log_path, startup_timeout_s=left, host=self.host, limits=self.limits
        )
        self.server.start()

    def wait_ready(self) -> None:
        assert self.server is not None

        def why_dead() -> str | None:
            return (self.server.why_dead() if self.server else "engine gone") or self.ray.dead_node()

        self.startup_s = wait_for_health(
            self.base_url + self.launch.health_path,
            self._t0,
            self.startup_timeout_s,
            why_dead,
            self.log_text,
            what="startup timeout, Ray cluster start included",
            ready=self.launch.ready,
        )

    def alive(self) -> bool:
        return self.server is not None and self.server.alive() and self.ray.dead_node() is None

    def memory_failure(self):
        dogs = [n.watchdog for n in self.ray.nodes] + [self.server.watchdog if self.server else None]
        return next((d.failure() for d in dogs if d is not None and d.tripped), None)

    def log_text(self) -> str:
        server = self.server.log_text() if self.server else tail(self.log_path)
        return f"{self.ray.log_text()}\n--- server ---\n{server}"

    def stop(self, grace_s: float = 10.0) -> None:
        if self.server is not None:
            self.server.stop(grace_s)
        self.ray.stop()


__all__ = [
    "ClusterServer",
    "NodeProcess",
    "RayCluster",
    "RayNodesReport",
    "head_address",
    "nodes_check_argv",
    "parse_nodes_report",
    "stop_all",
]
