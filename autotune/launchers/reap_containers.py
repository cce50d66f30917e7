"""The reaper's process (autotune/launchers/docker_reaper.py starts it): reads its order, waits for
autotune to go, and removes the launch's containers through the docker launcher's own removal."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from autotune.launchers.docker import LABEL_LAUNCH, remove_labelled
from autotune.launchers.docker_reaper import ReaperOrder, reap


def _remove_launch(order: ReaperOrder) -> list[str]:
    return remove_labelled(order.cluster, [f"{LABEL_LAUNCH}={order.launch_id}"], log_path=order.log_path)


def main(log_path: Path) -> None:
    """Its output goes to `log_path`, which it deletes when it had nothing to say."""
    for sig in (signal.SIGINT, signal.SIGHUP):  # a closing terminal or a Ctrl-C is not the reaper's end
        signal.signal(sig, signal.SIG_IGN)
    try:
        for name in reap(sys.stdin, _remove_launch):
            print(f"reaper: removed {name} (autotune did not)", flush=True)
    finally:
        if log_path.exists() and log_path.stat().st_size == 0:
            log_path.unlink()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
