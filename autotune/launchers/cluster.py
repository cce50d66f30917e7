"""A cluster of boxes: which hosts, how they reach each other, and the environment every rank gets.

`Cluster` describes the machines (one `ClusterNode` per box, node 0 is the head), the container
image and the host folders to mount. `rank_env()` gives one node's environment for a multi-node
vLLM launch (facts: the NVIDIA DGX Spark playbook and community Spark setups; each variable is
listed with why it is set). `open_server()` picks the launcher for a LaunchSpec.

Secrets never enter a Cluster or a LaunchSpec: HF_TOKEN passes through from the caller's
environment at launch time (see PASS_THROUGH_ENV).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autotune.errors import ConfigError
from autotune.models import LaunchSpec

if TYPE_CHECKING:
    from autotune.launchers.watchdog import WatchdogLimits

#: read from the caller's environment when a process or container starts; never written anywhere
PASS_THROUGH_ENV: tuple[str, ...] = ("HF_TOKEN",)
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY", re.IGNORECASE)
_IFNAME = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
_HCA = re.compile(r"^[A-Za-z0-9_.:-]+$")
_DOCKER_SCHEMES = ("unix://", "tcp://", "ssh://", "http://", "https://")

# Where the playbook mounts the Hugging Face cache inside vLLM containers.
CONTAINER_HF_CACHE = "/root/.cache/huggingface"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# TODO(lead): move to models.py
class ClusterNode(_Strict):
    """One box of the cluster."""

    address: str | None = Field(
        None,
        description="Docker daemon of this box: ssh://user@host, tcp://host:2375 or unix:///path; "
        "None = the local daemon (DOCKER_HOST or the default socket)",
    )
    ip: str = Field(description="this box's address on the cluster network (ConnectX-7 on a Spark)")
    ifname: str | None = Field(None, description="Ethernet interface of that network, e.g. enp1s0f1np1")
    hcas: list[str] = Field(
        default_factory=list, description="RoCE HCAs that are up, e.g. [rocep1s0f1, roceP2p1s0f1]"
    )
    gpus: str | None = Field(None, description="CUDA_VISIBLE_DEVICES for this node (one host standing in for several)")
    num_cpus: int | None = Field(None, ge=1, description="CPUs Ray may schedule on this node (None: Ray counts)")
    temp_dir: str | None = Field(None, description="Ray's temp dir (needed when several nodes share one host)")
    env: dict[str, str] = Field(default_factory=dict, description="extra env for this node only")

    @field_validator("ip")
    @classmethod
    def _ip(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"ip must be an IP address, got {value!r}") from None
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(_DOCKER_SCHEMES):
            raise ValueError(f"address must start with one of {', '.join(_DOCKER_SCHEMES)}, got {value!r}")
        return value

    @field_validator("ifname")
    @classmethod
    def _ifname(cls, value: str | None) -> str | None:
        if value is not None and not _IFNAME.match(value):
            raise ValueError(f"ifname {value!r} is not a network interface name")
        return value

    @field_validator("hcas")
    @classmethod
    def _hcas(cls, value: list[str]) -> list[str]:
        bad = [h for h in value if not _HCA.match(h)]
        if bad:
            raise ValueError(f"not an HCA name: {', '.join(map(repr, bad))}")
        return value


# TODO(lead): move to models.py
class Cluster(_Strict):
    """The boxes one launch spans, node 0 first (it runs the Ray head and the HTTP server)."""

    nodes: list[ClusterNode] = Field(min_length=1)
    gpus_per_node: int = Field(1, ge=0, description="GPUs each node gives Ray (Spark: 1); 0 = CPU only")
    ray_port: int = Field(6379, ge=1, le=65535)
    image: str | None = Field(None, description="container image for the docker launcher (same on every node)")
    hf_cache: str | None = Field(None, description=f"host folder mounted at {CONTAINER_HF_CACHE}")
    model_dir: str | None = Field(None, description="host folder holding the model, mounted read-only at the same path")
    mounts: dict[str, str] = Field(default_factory=dict, description="more host folder -> container folder")
    rdma: bool = Field(True, description="give containers /dev/infiniband, unlimited memlock and IPC_LOCK")
    privileged: bool = False
    ipc_host: bool = Field(True, description="--ipc host; when False, shm_size is used")
    shm_size: str | None = Field(None, description="e.g. 64g, only used without ipc_host")
    nccl_env: dict[str, str] = Field(
        default_factory=dict,
        description="topology env for every rank, e.g. a 3-node mesh: NCCL_IB_MERGE_NICS=0, NCCL_NET_PLUGIN=none",
    )
    bind_host: str = Field(
        "127.0.0.1", description="where the server listens on node 0; 0.0.0.0 to reach it from another host"
    )

    @field_validator("hf_cache", "model_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None:
            _check_absolute(value)
        return value

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: dict[str, str]) -> dict[str, str]:
        for host, inside in value.items():
            _check_absolute(host)
            _check_absolute(inside)
        return value

    @model_validator(mode="after")
    def _no_secrets(self) -> Cluster:
        named = set(self.nccl_env) | {k for n in self.nodes for k in n.env}
        secret = sorted(k for k in named if _SECRET_NAME.search(k))
        if secret:
            raise ValueError(
                f"{', '.join(secret)} looks like a secret; export it in the shell that runs autotune "
                "(HF_TOKEN passes through) instead of writing it into the cluster file"
            )
        return self

    @property
    def head(self) -> ClusterNode:
        return self.nodes[0]

    @property
    def ray_address(self) -> str:
        return f"{self.head.ip}:{self.ray_port}"

    @property
    def devices(self) -> int:
        """Ranks the cluster holds: GPUs, or one device per node on CPU-only nodes."""
        return len(self.nodes) * max(self.gpus_per_node, 1)

    @property
    def client_host(self) -> str:
        """Where autotune's HTTP client reaches the server on node 0."""
        return self.head.ip if self.bind_host in ("0.0.0.0", "::") else self.bind_host


def _check_absolute(path: str) -> None:
    if path.startswith("~"):
        raise ValueError(f"{path}: write the full path; '~' would be expanded on the wrong host")
    if not PurePosixPath(path).is_absolute():
        raise ValueError(f"{path}: mount paths must be absolute")


def load_cluster(path: Path) -> Cluster:
    """A cluster file (YAML with `nodes:` ...); ConfigError with the first problem when it is wrong."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"cluster file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"cluster file {path} is not valid YAML: {exc}") from None
    try:
        return Cluster.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ConfigError(f"cluster file {path}: {where}: {err['msg']}") from None


def host_ip() -> str:
    """This host's outward address (the one Ray resolves 127.0.0.1 to). A UDP connect sends nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the route, no packet leaves
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def local_cluster(nodes: int, temp_root: Path, *, gpus_per_node: int = 0, num_cpus: int | None = 1) -> Cluster:
    """`nodes` Ray nodes on this one host standing in for boxes (test bed, or one raylet per GPU).

    Each node gets its own Ray temp dir under `temp_root` (keep it short: Ray's socket paths must
    fit in 107 bytes) and, with GPUs, its own CUDA_VISIBLE_DEVICES slice.
    """
    if nodes < 1:
        raise ConfigError(f"a cluster needs at least one node, got {nodes}")
    ip = host_ip()
    members = []
    for index in range(nodes):
        gpus = ",".join(str(g) for g in range(index * gpus_per_node, (index + 1) * gpus_per_node)) or None
        members.append(
            ClusterNode(ip=ip, gpus=gpus, num_cpus=num_cpus, temp_dir=str(temp_root / f"n{index}"))
        )
    return Cluster(nodes=members, gpus_per_node=gpus_per_node, rdma=False)


# ---------------------------------------------------------------------- per-rank environment


def rank_env(cluster: Cluster, index: int) -> dict[str, str]:
    """The environment of node `index` for a multi-node vLLM launch (no secrets).

    Every variable has a reason:
    - VLLM_HOST_IP: the address vLLM announces for this rank; must match the Ray node IP.
    - MASTER_ADDR: torch.distributed rendezvous host, the head (NVIDIA playbook).
    - NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME: keep NCCL's bootstrap, Gloo (CPU
      collectives) and TensorPipe on the cluster network instead of the first interface found.
    - NCCL_IB_HCA: pin the HCAs that are up; GB10 exposes four and two are down, and an unpinned
      NCCL can pick a dead one ("unhandled system error"). NCCL_IB_DISABLE=0: use RDMA.
    - RAY_memory_monitor_refresh_ms=0: Ray's memory monitor kills workers on unified-memory hosts
      where host and GPU memory are one pool (playbook); autotune's watchdog guards the host instead.
    - RAY_USAGE_STATS_ENABLED=0: no usage reports from machines that may have no route out.
    Topology extras (Cluster.nccl_env) and the node's own env come last and win.
    """
    if not 0 <= index < len(cluster.nodes):
        raise ConfigError(f"node {index} is not in a cluster of {len(cluster.nodes)} nodes")
    node = cluster.nodes[index]
    env = {
        "VLLM_HOST_IP": node.ip,
        "MASTER_ADDR": cluster.head.ip,
        "RAY_memory_monitor_refresh_ms": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    if node.ifname:
        for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
            env[name] = node.ifname
    if node.hcas:
        env["NCCL_IB_HCA"] = ",".join(node.hcas)
        env["NCCL_IB_DISABLE"] = "0"
    if node.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = node.gpus
    env.update(cluster.nccl_env)
    env.update(node.env)
    return env


def pass_through_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The secrets to hand a process or container at start: PASS_THROUGH_ENV names present now."""
    source = os.environ if environ is None else environ
    return {name: source[name] for name in PASS_THROUGH_ENV if name in source}


# ---------------------------------------------------------------------- launcher choice

Launcher = Literal["process", "ray", "docker"]


def open_server(
    launch: LaunchSpec,
    log_path: Path,
    *,
    launcher: Launcher = "process",
    cluster: Cluster | None = None,
    study: str = "autotune",
    trial: str = "0",
    startup_timeout_s: float = 180.0,
    limits: WatchdogLimits | None = None,
):
    """The server context manager for `launch`: ServerProcess (one local process), ClusterServer
    (Ray head + workers as local processes, then the server) or DockerServer (one container per
    node launch on each node's Docker daemon). All share ServerProcess's contract: enter = started
    and healthy, `base_url`, `startup_s`, `alive()`, `log_text()`, `stop()`."""
    multi = any(n.role != "server" for n in launch.nodes)
    if launcher == "docker":
        from autotune.launchers.docker import DockerServer

        if cluster is None:
            raise ConfigError("the docker launcher needs a cluster file (nodes, image)")
        return DockerServer(
            launch, cluster, log_path, study=study, trial=trial, startup_timeout_s=startup_timeout_s
        )
    if multi:
        from autotune.launchers.ray import ClusterServer

        host = cluster.client_host if cluster else "127.0.0.1"
        return ClusterServer(launch, log_path, startup_timeout_s=startup_timeout_s, limits=limits, host=host)
    from autotune.launchers.process import ServerProcess

    return ServerProcess(launch, log_path, startup_timeout_s=startup_timeout_s, limits=limits)
