"""Local engine process: its own process group, killed as one on exit, Ctrl-C or error.

`ServerProcess` is a context manager. Entering starts the process and waits for the health
endpoint; it fails at once when the process dies, and after `startup_timeout_s` when it hangs.
If autotune itself is killed, the kernel kills the server too (PR_SET_PDEATHSIG on Linux), and the
group's reaper (autotune/launchers/reap_group.py) kills the rest of its group: vLLM's EngineCore, a
child of the server that does not die with it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import IO

from autotune.launchers import preflight as checks
from autotune.launchers.base import Launched, LaunchOptions, LocalLaunched, command_line, wait_for_health
from autotune.launchers.reap_group import dismiss, group_alive, start_reaper
from autotune.launchers.watchdog import Watchdog
from autotune.models import Cluster, LaunchSpec

_LIVE: weakref.WeakSet[ServerProcess] = weakref.WeakSet()
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: ask the kernel to SIGKILL us when autotune dies."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass


def stop_all() -> None:
    """Kill every engine process group still alive (the CLI calls this on Ctrl-C, SIGTERM and errors)."""
    for server in list(_LIVE):
        server.stop()


def tail(path: Path, max_bytes: int = 20_000) -> str:
    """The last `max_bytes` of a log."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - max_bytes))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def read_log(path: Path, head_bytes: int = 1_000_000, tail_bytes: int = 2_000_000) -> str:
    """The log, or its head and tail when it is large: engines report what they selected at
    start-up and the error that ended them at the end."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(0)
            if size <= head_bytes + tail_bytes:
                return fh.read().decode(errors="replace")
            head = fh.read(head_bytes)
            fh.seek(size - tail_bytes)
            return (head + b"\n[... log cut ...]\n" + fh.read()).decode(errors="replace")
    except OSError:
        return ""


class ServerProcess(LocalLaunched):
    """One engine process on this host, in its own process group."""

    multi_node = False
    proc: subprocess.Popen[bytes] | None = None
    reaper: subprocess.Popen[bytes] | None = None
    watchdog: Watchdog | None = None
    _log: IO[bytes] | None = None

    @classmethod
    def open(cls, launch: LaunchSpec, log_path: Path, options: LaunchOptions) -> Launched:
        return cls(launch, log_path, startup_timeout_s=options.startup_timeout_s, limits=options.limits)

    @classmethod
    def stop_all(cls) -> None:
        stop_all()

    @classmethod
    def preflight(
        cls, cluster: Cluster | None, *, cluster_file: object | None, reach: bool = True,
        timeout_s: float = checks.REACH_TIMEOUT_S,
    ) -> None:
        checks.refuse_cluster_file(cluster_file)
        if cluster is not None and reach:
            checks.require_ray(cluster)  # a launch over several nodes goes to Ray on this host

    def start(self) -> None:
        node = self.launch.server
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"$ {command_line(node)}\n".encode())
        self._log.flush()
        self._t0 = time.monotonic()
        self.proc = subprocess.Popen(
            node.argv,
            env={**os.environ, **node.env},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        _LIVE.add(self)
        self.reaper = start_reaper(self.proc.pid)
        self.watchdog = Watchdog(self.proc.pid, self.limits)
        self.watchdog.start()

    def why_dead(self) -> str | None:
        """Why the engine cannot become healthy any more, or None while it still may."""
        if self.watchdog and self.watchdog.tripped:  # first: its kill also makes the process exit
            return f"watchdog stopped the engine: {self.watchdog.tripped}"
        code = self.proc.poll() if self.proc else -1
        if code is not None:
            return f"engine exited with code {code}"
        return None

    def memory_failure(self):
        return self.watchdog.failure() if self.watchdog else None

    def wait_ready(self) -> None:
        self.startup_s = wait_for_health(
            self.base_url + self.launch.health_path, self._t0, self.startup_timeout_s, self.why_dead, self.log_text,
            ready=self.launch.ready,
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        if self._log:
            self._log.flush()
        return read_log(self.log_path)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the whole group, then SIGKILL whatever is left after `grace_s`."""
        if self.watchdog:
            self.watchdog.stop()
        proc, self.proc = self.proc, None
        if proc is not None:
            for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    continue
                if not group_alive(proc.pid):
                    break
            else:
                _kill_group(proc.pid)
        reaper, self.reaper = self.reaper, None
        if reaper is not None and proc is not None:
            dismiss(reaper, proc.pid)
        _LIVE.discard(self)
        if self._log:
            self._log.close()
            self._log = None


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
