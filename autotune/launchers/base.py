"""What every launcher shares: the context-manager lifecycle and the wait for the health endpoint.

A launcher is entered to start the engine and wait until it is ready; any failure on the way
(including Ctrl-C) stops everything it started before the error propagates. Leaving stops it.
"""

from __future__ import annotations

import shlex
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import httpx

from autotune.errors import EngineStartError
from autotune.launchers.preflight import REACH_TIMEOUT_S
from autotune.launchers.watchdog import WatchdogLimits
from autotune.models import (
    Cluster,
    FailureInfo,
    GenerationCheck,
    GenerationOutcome,
    LaunchSpec,
    NcclReading,
    NodeLaunch,
    ReadyRequest,
)

#: the least time a generation check at start-up gets, however little of the startup timeout is left
MIN_GENERATION_S = 30.0


_ports_lock = threading.Lock()
_ports_given: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now and that this process has not
    handed out before (launches started side by side from threads get different ports)."""
    with _ports_lock:
        while True:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _ports_given:
                _ports_given.add(port)
                return port


def command_line(node: NodeLaunch) -> str:
    """The launch as one shell line that pastes safely: env assignments, then the argv, each word
    shell-quoted (a config value such as `$(touch x)` stays text)."""
    env = [f"{k}={shlex.quote(v)}" for k, v in sorted(node.env.items())]
    return " ".join([*env, shlex.join(node.argv)])


@dataclass(frozen=True)
class LaunchOptions:
    """What a launcher is told besides the launch: the boxes, whose launch it is, how long to wait."""

    cluster: Cluster | None = None
    study: str = "autotune"
    trial: str = "0"
    startup_timeout_s: float = 180.0
    limits: WatchdogLimits | None = None


class Launched:
    """Subclasses implement open(), start(), wait_ready(), stop() and stop_all(); the registry
    (autotune/launchers/__init__.py) names them."""

    #: whether it runs launches with Ray head/worker nodes (the process launcher runs one server)
    multi_node: ClassVar[bool] = True
    #: whether it runs only such launches: a Ray head (and workers) before the server, one node too
    ray_nodes_only: ClassVar[bool] = False

    @classmethod
    def launch_problem(cls, launch: LaunchSpec) -> str | None:
        """Why this launcher cannot run `launch` (None: it can); checked before runs.db opens."""
        if not cls.multi_node and any(n.role != "server" for n in launch.nodes):
            return None  # open_server hands a Ray launch to the local cluster launcher
        if cls.ray_nodes_only:
            return ray_launch_problem(launch)
        return None

    @classmethod
    def open(cls, launch: LaunchSpec, log_path: Path, options: LaunchOptions) -> Launched:
        """This launcher for `launch`, not started yet (entering it starts it)."""
        raise NotImplementedError

    @classmethod
    def nodes_here(cls, launch: LaunchSpec, cluster: Cluster | None) -> list[int]:
        """The launch's nodes that run on this host (whose GPUs a meter here can read): every one
        unless the launcher reaches other hosts."""
        return sorted({n.node for n in launch.nodes})

    @classmethod
    def stop_all(cls) -> None:
        """Stop every launch of this launcher still up (the CLI calls this on Ctrl-C, SIGTERM and errors)."""
        raise NotImplementedError

    #: what the cluster file it cannot launch without must describe (None: it needs none)
    needs_cluster_file: ClassVar[str | None] = None

    @classmethod
    def preflight(
        cls, cluster: Cluster | None, *, cluster_file: object | None, reach: bool = True,
        timeout_s: float = REACH_TIMEOUT_S,
    ) -> None:
        """Refuse, before anything is written, a launch this launcher cannot run (see
        launchers/preflight.py); `reach=False` (a dry run) skips the libraries and the network."""

    @classmethod
    def read_nccl(cls, launch: LaunchSpec, cluster: Cluster | None) -> list[NcclReading]:
        """The NCCL each node of `launch` will load, read there before it starts (launchers/nccl.py);
        [] where this launcher cannot read it."""
        return []

    def start(self) -> None:
        raise NotImplementedError

    def wait_ready(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def memory_failure(self) -> FailureInfo | None:
        """The host_memory failure when the memory watchdog stopped the engine (None otherwise)."""
        return None

    def stop_after_failed_start(self) -> None:
        """Stopping when start-up failed: the start error is the news, so this must not raise."""
        self.stop()

    def __enter__(self):  # -> Self (each launcher returns itself)
        try:
            self.start()
            self.wait_ready()
        except BaseException:
            self.stop_after_failed_start()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalLaunched(Launched):
    """A launch whose server listens on this host: what the process and Ray launchers share."""

    def __init__(
        self,
        launch: LaunchSpec,
        log_path: Path,
        *,
        startup_timeout_s: float = 180.0,
        host: str = "127.0.0.1",
        limits: WatchdogLimits | None = None,
    ) -> None:
        self.launch = launch
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.host = host
        self.limits = limits or WatchdogLimits()
        self.base_url = f"http://{host}:{launch.port}"
        self.startup_s: float | None = None


def ray_launch_problem(launch: LaunchSpec) -> str | None:
    """Why `launch` is not a Ray cluster launch: one `head` entry first, `worker`s, one `server`."""
    members = [n for n in launch.nodes if n.role in ("head", "worker")]
    if not members or members[0].role != "head" or sum(n.role == "head" for n in members) != 1:
        return "a Ray cluster launch needs exactly one head entry, listed first"
    if sum(n.role == "server" for n in launch.nodes) != 1:
        return "a Ray cluster launch needs exactly one server entry"
    return None


def generation_check(base_url: str, ready: ReadyRequest, timeout_s: float) -> GenerationCheck:
    """Post the one-token greedy generation once; what came back (never raises for the engine's sake)."""
    t0 = time.monotonic()

    def done(outcome: GenerationOutcome, detail: str = "") -> GenerationCheck:
        return GenerationCheck(outcome=outcome, seconds=round(time.monotonic() - t0, 3), timeout_s=timeout_s,
                               detail=detail[:300])

    try:
        with httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))) as http:
            response = http.post(base_url + ready.path, json={**ready.body, "stream": False})
    except httpx.TimeoutException:
        return done(GenerationOutcome.TIMED_OUT)
    except httpx.HTTPError as exc:
        return done(GenerationOutcome.UNREACHABLE, f"{type(exc).__name__}: {exc}")
    if response.status_code != 200:
        return done(GenerationOutcome.HTTP_ERROR, f"HTTP {response.status_code}: {response.text}")
    try:
        data = response.json()
        choices = data.get("choices") or []
        tokens = (data.get("usage") or {}).get("completion_tokens")
    except (ValueError, AttributeError):
        return done(GenerationOutcome.NO_TOKEN, f"not an OpenAI completion: {response.text}")
    if not choices or tokens == 0:
        return done(GenerationOutcome.NO_TOKEN, f"no token in the reply: {response.text}")
    return done(GenerationOutcome.GENERATED)


def wait_for_health(
    url: str,
    started_at: float,
    timeout_s: float,
    why_dead: Callable[[], str | None],
    log_text: Callable[[], str],
    what: str = "startup timeout",
    ready: ReadyRequest | None = None,
) -> float:
    """Poll `url` until it answers 200 and then (with `ready`) until a one-token greedy generation
    returns: only then is the engine up. Returns seconds since `started_at` (time.monotonic).

    Raises EngineStartError at once when `why_dead()` names a reason (process exited, watchdog,
    a node gone), and with timed_out=True after `timeout_s`; both carry the log for classification.
    When health answered but no generation came back by then, the error is `stalled`, with the
    last check as evidence.
    """
    deadline = started_at + timeout_s
    base = url.split("/", 3)
    base_url = "/".join(base[:3])
    last: GenerationCheck | None = None
    with httpx.Client(timeout=5.0) as http:
        while True:
            dead = why_dead()
            if dead:
                raise EngineStartError(f"{dead} before the engine became healthy", log_tail=log_text())
            try:
                healthy = http.get(url).status_code == 200
            except httpx.HTTPError:
                healthy = False
            if healthy and ready is None:
                return time.monotonic() - started_at
            if healthy and ready is not None:
                last = generation_check(base_url, ready, max(deadline - time.monotonic(), MIN_GENERATION_S))
                if last.generated:
                    return time.monotonic() - started_at
            if time.monotonic() > deadline:
                if last is not None:
                    evidence = [f"GET {url}: 200", last.evidence(ready.path if ready else "")]
                    raise EngineStartError(
                        "the engine answers its health check but no one-token generation came back "
                        f"within {timeout_s:.0f} s ({last.outcome.value})",
                        log_tail=log_text(), timed_out=True, stalled=True, evidence=evidence,
                    )
                raise EngineStartError(
                    f"engine not healthy at {url} after {timeout_s:.0f} s ({what})",
                    log_tail=log_text(),
                    timed_out=True,
                )
            time.sleep(0.5)
