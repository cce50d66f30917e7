"""Checks of how a study will launch, made before runs.db is opened: the launcher fits the cluster
file, the libraries that launcher needs are installed, and every box of the cluster answers.

- `--cluster FILE` with the process launcher is refused: that launcher runs one engine process on
  this host and would ignore every box the file names.
- The Ray launcher starts each node as a local process (several raylets on this host stand in for
  boxes), so each node's `ip` must be an address of this host; real boxes go through docker.
- The docker launcher needs the `docker` SDK, and for `ssh://` daemons also paramiko (the SDK's ssh
  transport imports it) and the `ssh` client; each daemon must accept a connection within
  `timeout_s` (TCP to the ssh or Docker port, or the local socket).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
from urllib.parse import urlsplit

from autotune.errors import ConfigError, EngineUnavailable
from autotune.models import Cluster

REACH_TIMEOUT_S = 3.0
DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def is_local_address(ip: str) -> bool:
    """True when this host owns `ip` (binding a socket to it succeeds)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((ip, 0))
        return True
    except OSError:
        return False


def daemon_endpoint(address: str | None) -> tuple[str, str | tuple[str, int]]:
    """('unix', path) or ('tcp', (host, port)) that a Docker daemon address is reached through."""
    if address is None:
        address = os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_DOCKER_SOCKET}"
    parts = urlsplit(address)
    if parts.scheme == "unix":
        return "unix", parts.path or DEFAULT_DOCKER_SOCKET
    default_port = {"ssh": 22, "https": 2376}.get(parts.scheme, 2375)
    if not parts.hostname:
        raise ConfigError(f"Docker address {address!r} names no host")
    return "tcp", (parts.hostname, parts.port or default_port)


def reach_error(address: str | None, timeout_s: float = REACH_TIMEOUT_S) -> str | None:
    """Why the daemon at `address` cannot be reached now (None when a connection opens)."""
    kind, where = daemon_endpoint(address)
    try:
        if kind == "unix":
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout_s)
                sock.connect(str(where))
        else:
            with socket.create_connection(where, timeout=timeout_s):  # type: ignore[arg-type]
                pass
    except TimeoutError:
        return f"no answer from {where} within {timeout_s:.0f} s"
    except OSError as exc:
        return f"cannot connect to {where}: {exc.strerror or exc}"
    return None


def check_launch(
    launcher: str, cluster: Cluster | None, *, cluster_file: object | None, reach: bool = True,
    timeout_s: float = REACH_TIMEOUT_S,
) -> None:
    """Refuse a launch that cannot work, before anything is written: the launcher's own checks
    (`Launched.preflight`). `reach=False` (dry runs) skips where the nodes are, the libraries and
    the network."""
    from autotune.launchers import launcher_class

    launcher_class(launcher).preflight(cluster, cluster_file=cluster_file, reach=reach, timeout_s=timeout_s)


def refuse_cluster_file(cluster_file: object | None) -> None:
    """The process launcher runs one engine process on this host: a cluster file would be ignored."""
    if cluster_file is not None:
        raise ConfigError(
            f"--cluster {cluster_file} needs --launcher docker (or ray); the process launcher runs one "
            "engine process on this host and would ignore the boxes the file lists"
        )


def require_ray(cluster: Cluster, *, one_node_too: bool = False) -> None:
    """A launch over several nodes runs Ray (the ray launcher runs it for one node too)."""
    if (len(cluster.nodes) > 1 or one_node_too) and not _installed("ray"):
        raise EngineUnavailable("the launch runs Ray, which is not installed: pip install 'autotune[ray]'")


def require_local_nodes(cluster: Cluster) -> None:
    """The Ray launcher starts every node on this host: each node's ip must be one of its addresses."""
    remote = [f"node {i} ({n.ip})" for i, n in enumerate(cluster.nodes) if not is_local_address(n.ip)]
    if remote:
        raise ConfigError(
            f"the ray launcher starts every node on this host, but {', '.join(remote)} is not an address "
            "of this host; launch real boxes with --launcher docker"
        )


def require_docker(cluster: Cluster, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """The docker SDK (and paramiko and `ssh` for ssh:// daemons) here, and every daemon answering."""
    if not _installed("docker"):
        raise EngineUnavailable("the docker launcher needs the docker SDK: pip install 'autotune[docker]'")
    ssh = [n.address for n in cluster.nodes if n.address and n.address.startswith("ssh://")]
    if ssh and not _installed("paramiko"):
        raise EngineUnavailable(
            f"{ssh[0]}: the docker SDK's ssh:// transport needs paramiko: pip install 'autotune[docker]'"
        )
    if ssh and shutil.which("ssh") is None:
        raise EngineUnavailable(f"{ssh[0]}: ssh:// daemons are reached through the `ssh` client, which is not installed")
    for index, node in enumerate(cluster.nodes):
        why = reach_error(node.address, timeout_s)
        if why:
            raise ConfigError(
                f"cluster node {index}: Docker daemon {node.address or 'local'} is not reachable ({why}); "
                "check the address in the cluster file"
            )
