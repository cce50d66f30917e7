"""Kills one engine's process group once the autotune that started it is gone, however it went.

vLLM's API server starts its EngineCore as a child in the server's process group, and the
EngineCore does not die with its parent: the kernel's parent-death signal (PR_SET_PDEATHSIG, set
on the server) reaches only the server, so a kill -9 of autotune, or a SIGTERM to a script that
installs no handler, left an EngineCore holding the GPU (73 GiB of an H100, every later launch
refused). So each local engine group gets this reaper: a process in its own session (a Ctrl-C at
autotune's terminal or a kill of autotune's group does not reach it), started as a plain script
with the standard library only, whose stdin is a pipe that autotune alone holds. When the pipe
closes, the reaper reads what came last: `done` (autotune stopped the group itself) ends it;
anything else, EOF included, means autotune went away first, and the reaper SIGTERMs the group,
then SIGKILLs what is left after a grace period.

The same pipe protocol serves the docker launcher's reaper (autotune/launchers/docker_reaper.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import IO, TextIO

DONE = "done"
#: how long the group has to go after SIGTERM before the SIGKILL
GRACE_S = 10.0


def start_reaper(pgid: int) -> subprocess.Popen[bytes]:
    """The reaper of process group `pgid` (see the module docstring)."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", os.path.abspath(__file__), str(pgid)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )


def release(proc: subprocess.Popen[bytes], done: bool) -> None:
    """autotune's side at stop: `done` when what the reaper guards is gone, then close the pipe."""
    pipe: IO[bytes] | None = proc.stdin
    if pipe is None or pipe.closed:
        return
    try:
        if done:
            pipe.write(f"{DONE}\n".encode())
        pipe.close()
    except OSError:  # the reaper is gone already: nothing to tell it
        pass


def dismiss(proc: subprocess.Popen[bytes], pgid: int) -> None:
    """After autotune stopped group `pgid`: `done` when it is gone (else the reaper stops it now),
    then wait for the reaper to end."""
    release(proc, done=not group_alive(pgid))
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def reap(pgid: int, stream: TextIO, grace_s: float = GRACE_S) -> bool:
    """Wait for the pipe to close; True when the group had to be stopped here."""
    if stream.read().strip() == DONE or not group_alive(pgid):
        return False
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not group_alive(pgid):
            break
    return True


if __name__ == "__main__":
    reap(int(sys.argv[1]), sys.stdin)
