"""Launcher registry: name -> Launched class, as the engines register (autotune/engines/__init__.py).

A launcher starts a LaunchSpec and stops everything it started: `process` (one local process),
`ray` (Ray head + workers as local processes, then the server), `docker` (one container per node
launch on each node's Docker daemon). Every one keeps ServerProcess's contract: entering = started
and healthy, `base_url`, `startup_s`, `alive()`, `log_text()`, `stop()`.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import ConfigError
from autotune.launchers.base import LaunchOptions

if TYPE_CHECKING:
    from autotune.launchers.base import Launched
    from autotune.launchers.watchdog import WatchdogLimits
    from autotune.models import Cluster, LaunchSpec

LAUNCHERS: dict[str, str] = {
    "process": "autotune.launchers.process:ServerProcess",
    "ray": "autotune.launchers.ray:ClusterServer",
    "docker": "autotune.launchers.docker:DockerServer",
}
#: the launcher that runs a launch over several nodes on this host when the one asked for runs one process
LOCAL_CLUSTER_LAUNCHER = "ray"


def launcher_class(name: str) -> type[Launched]:
    if name not in LAUNCHERS:
        *others, last = LAUNCHERS
        raise ConfigError(f"unknown launcher {name!r}; use {', '.join(others)} or {last}")
    module, _, cls = LAUNCHERS[name].partition(":")
    return getattr(import_module(module), cls)


def open_server(
    launch: LaunchSpec,
    log_path: Path,
    *,
    launcher: str = "process",
    cluster: Cluster | None = None,
    study: str = "autotune",
    trial: str = "0",
    startup_timeout_s: float = 180.0,
    limits: WatchdogLimits | None = None,
) -> Launched:
    """The server context manager for `launch`, from the launcher named `launcher` (a launch with
    Ray head/worker nodes goes to LOCAL_CLUSTER_LAUNCHER when that one runs a single process)."""
    chosen = launcher_class(launcher)
    if not chosen.multi_node and any(n.role != "server" for n in launch.nodes):
        chosen = launcher_class(LOCAL_CLUSTER_LAUNCHER)
    options = LaunchOptions(cluster=cluster, study=study, trial=trial, startup_timeout_s=startup_timeout_s,
                            limits=limits)
    return chosen.open(launch, log_path, options)


def stop_all() -> None:
    """Stop every launch still up, of every launcher (the CLI calls this on Ctrl-C, SIGTERM and errors)."""
    for name in LAUNCHERS:
        launcher_class(name).stop_all()


__all__ = ["LAUNCHERS", "launcher_class", "open_server", "stop_all"]
