"""The boxes one launch spans (a cluster file): their addresses, networks, mounts and container settings."""

from __future__ import annotations

import ipaddress
import re
from pathlib import PurePosixPath

from pydantic import Field, field_validator, model_validator

from autotune.models.base import Record

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY", re.IGNORECASE)
_IFNAME = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
_HCA = re.compile(r"^[A-Za-z0-9_.:-]+$")
_DOCKER_SCHEMES = ("unix://", "tcp://", "ssh://", "http://", "https://")

#: where the playbook mounts the Hugging Face cache inside vLLM containers.
CONTAINER_HF_CACHE = "/root/.cache/huggingface"
#: vLLM's cache root inside its containers (torch.compile artifacts live under it).
CONTAINER_VLLM_CACHE = "/root/.cache/vllm"
#: the host folder every docker launch mounts there, so compiled graphs outlive the container.
DEFAULT_COMPILE_CACHE = "/var/tmp/autotune-vllm-cache"
#: where a container's JIT-compiled kernels go, inside that mount: FlashInfer's (its workspace base;
#: the kernels land under .cache/flashinfer of it) and Triton's, so they outlive the container too.
CONTAINER_JIT_CACHE_ENV: dict[str, str] = {
    "FLASHINFER_WORKSPACE_BASE": f"{CONTAINER_VLLM_CACHE}/flashinfer",
    "TRITON_CACHE_DIR": f"{CONTAINER_VLLM_CACHE}/triton",
}


class ClusterNode(Record):
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


class Cluster(Record):
    """The boxes one launch spans, node 0 first (it runs the Ray head and the HTTP server)."""

    nodes: list[ClusterNode] = Field(min_length=1)
    gpus_per_node: int = Field(1, ge=0, description="GPUs each node gives Ray (Spark: 1); 0 = CPU only")
    ray_port: int = Field(6379, ge=1, le=65535)
    image: str | None = Field(None, description="container image for the docker launcher (same on every node)")
    hf_cache: str | None = Field(None, description=f"host folder mounted at {CONTAINER_HF_CACHE}")
    model_dir: str | None = Field(None, description="host folder holding the model, mounted read-only at the same path")
    mounts: dict[str, str] = Field(default_factory=dict, description="more host folder -> container folder")
    compile_cache: str | None = Field(
        DEFAULT_COMPILE_CACHE,
        description=f"host folder mounted at {CONTAINER_VLLM_CACHE} in every container, so a config's "
        "torch.compile output, and the FlashInfer and Triton kernels its container JIT-compiles, are "
        "reused by later launches (a container's own cache dies with it); None = every container "
        "compiles from scratch",
    )
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

    @field_validator("hf_cache", "model_dir", "compile_cache")
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
