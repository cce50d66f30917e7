"""Removes one docker launch's containers once the autotune that started them is gone, however it went.

A container is not a child of autotune: SIGKILL or a hard crash of autotune leaves it running, and
nothing of autotune runs afterwards to remove it. So each DockerServer starts this module as a
process in its own session (a Ctrl-C at autotune's terminal or a kill of its process group does
not reach it) and writes one line on its stdin, the cluster and the launch id; autotune alone
holds the other end of that pipe. When the pipe closes, the reaper reads what came last: `done`
(autotune removed the containers itself) ends it; anything else, EOF included, means autotune
died or could not remove them, and the reaper removes every container labelled with the launch
id on every node's daemon, retrying a daemon that does not answer for a while. The pipe's protocol
(`DONE`, `release`) is the one local engine groups' reaper keeps (autotune/launchers/reap_group.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict

from autotune.launchers.reap_group import DONE, release
from autotune.models import Cluster

__all__ = ["DONE", "ReaperOrder", "reap", "release", "start_reaper"]

RETRY_FOR_S = 60.0


class ReaperOrder(BaseModel):
    """The reaper's first line: whose containers to remove if autotune goes away."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: Cluster
    launch_id: str
    log_path: Path  # the trial's log: container logs are saved beside it before removal


def start_reaper(cluster: Cluster, launch_id: str, log_path: Path) -> subprocess.Popen[bytes]:
    """The reaper for one launch, already given its order (see the module docstring); it writes
    to `<log_path stem>.reaper.log` only when it removes something."""
    own_log = log_path.with_suffix(".reaper.log")
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with own_log.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.launchers.reap_containers", str(own_log)],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, close_fds=True,
        )
    assert proc.stdin is not None
    order = ReaperOrder(cluster=cluster, launch_id=launch_id, log_path=log_path)
    proc.stdin.write(order.model_dump_json().encode() + b"\n")
    proc.stdin.flush()
    return proc


def reap(stream: TextIO, remove: Callable[[ReaperOrder], list[str]], retry_for_s: float = RETRY_FOR_S,
         sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Wait for the pipe to close; the names removed (none after `done`)."""
    first = stream.readline()
    if not first.strip():
        return []
    order = ReaperOrder.model_validate_json(first)
    if stream.read().strip() == DONE:
        return []
    deadline = time.monotonic() + retry_for_s
    while True:
        try:
            return remove(order)
        except Exception as exc:  # a daemon that does not answer now may answer in a moment
            if time.monotonic() > deadline:
                print(f"reaper: could not remove the containers of launch {order.launch_id}: {exc}", flush=True)
                raise SystemExit(1) from None
            sleep(2.0)
