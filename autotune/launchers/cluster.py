"""A cluster of boxes: which hosts, how they reach each other, and the environment every rank gets.

`Cluster` describes the machines (one `ClusterNode` per box, node 0 is the head), the container
image and the host folders to mount. `rank_env()` gives one node's environment for a multi-node
vLLM launch (facts: the NVIDIA DGX Spark playbook and community Spark setups; each variable is
listed with why it is set). Which launcher starts a LaunchSpec: autotune/launchers/__init__.py.

Secrets never enter a Cluster or a LaunchSpec: HF_TOKEN passes through from the caller's
environment at launch time (processes inherit it; containers get it from PASS_THROUGH_ENV in
launchers/docker.py).
"""

from __future__ import annotations

import socket
from pathlib import Path

from autotune.errors import ConfigError
from autotune.models import Cluster, ClusterNode
from autotune.yaml_files import load_yaml_model


def load_cluster(path: Path) -> Cluster:
    """A cluster file (YAML with `nodes:` ...); ConfigError with the first problems when it is wrong."""
    return load_yaml_model(path, Cluster, "cluster file")


def first_nodes(cluster: Cluster, nodes: int, cluster_file: Path) -> Cluster:
    """The first `nodes` boxes of a cluster file (a launch of fewer nodes leaves the rest alone);
    ConfigError when the file lists fewer."""
    if len(cluster.nodes) < nodes:
        raise ConfigError(f"--nodes {nodes} but the cluster file {cluster_file} lists {len(cluster.nodes)} nodes")
    return cluster.model_copy(update={"nodes": cluster.nodes[:nodes]})


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


def placeholder_cluster(nodes: int, gpus_per_node: int) -> Cluster:
    """N separate boxes with placeholder addresses 192.168.100.1..N, for rendering a launch
    nobody runs here (predicted recipes, plans, dry runs); replace the IPs with the boxes' real ones."""
    members = [ClusterNode(ip=f"192.168.100.{i + 1}") for i in range(nodes)]
    return Cluster(nodes=members, gpus_per_node=max(gpus_per_node, 1))


def is_placeholder(cluster: Cluster) -> bool:
    """Whether `cluster` is `placeholder_cluster`'s (the image aside), not boxes someone described."""
    fake = placeholder_cluster(len(cluster.nodes), cluster.gpus_per_node)
    return cluster.model_copy(update={"image": None}) == fake


def placeholder_note(nodes: int) -> str:
    return (
        f"hosts are placeholders (192.168.100.1-{nodes}, no interface or HCA names): describe your boxes in a "
        "cluster file and pass --cluster FILE to see their own addresses and NCCL settings"
    )


# ---------------------------------------------------------------------- per-rank environment


#: every rank of a launch across nodes: what the community 4-Spark MiniMax setups (tonyd2wild's
#: node script, CosmicRaisins' recipe) set on every rank against NCCL init hangs
INIT_HANG_ENV: dict[str, str] = {
    "NCCL_CUMEM_ENABLE": "0",
    "NCCL_IGNORE_CPU_AFFINITY": "1",
    "NCCL_DEBUG": "WARN",  # also puts NCCL's warnings in the engine log, where the failure signatures read them
}


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
    Across nodes (more than one), the settings the Spark playbooks give against NCCL init hangs
    (`INIT_HANG_ENV`), NCCL_NVLS_ENABLE=0 where a node has one GPU (NVLink SHARP has no NVLink to
    use; NCCL 2.30.4's NVLS path hung MoE weight loading on Sparks, NVIDIA/nccl#2167), and with
    HCAs NCCL_NET=IB (a broken RDMA path fails instead of falling back to sockets and measuring
    TCP) and, for several HCAs, NCCL_CROSS_NIC=1. NCCL_IB_GID_INDEX differs per node (3 or 5): set
    it in that node's `env`.
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
    if len(cluster.nodes) > 1:
        env.update(INIT_HANG_ENV)
        if cluster.gpus_per_node <= 1:
            env["NCCL_NVLS_ENABLE"] = "0"
        if node.hcas:
            env["NCCL_NET"] = "IB"
        if len(node.hcas) > 1:
            env["NCCL_CROSS_NIC"] = "1"
    env.update(cluster.nccl_env)
    env.update(node.env)
    return env
