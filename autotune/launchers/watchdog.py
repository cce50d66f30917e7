"""Host-memory watchdog for one engine process group.

On unified-memory machines (DGX Spark) an engine that over-commits can wedge the whole host before
any OOM killer acts, so the watchdog kills the group first: when MemAvailable falls under a floor,
or swap use grows past a limit since the engine started. What it did is kept in `tripped`.
"""

from __future__ import annotations

import os
import signal
import threading

from pydantic import BaseModel, ConfigDict


class WatchdogLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_available_gb: float = 1.0
    max_swap_growth_gb: float = 4.0
    interval_s: float = 1.0


def read_meminfo(path: str = "/proc/meminfo") -> dict[str, float]:
    """Fields of /proc/meminfo in GB (1e9 bytes); empty where the file does not exist."""
    values: dict[str, float] = {}
    try:
        with open(path) as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    values[name] = int(parts[0]) * 1024 / 1e9
    except OSError:
        pass
    return values


def swap_used_gb(info: dict[str, float]) -> float:
    return info.get("SwapTotal", 0.0) - info.get("SwapFree", 0.0)


class Watchdog(threading.Thread):
    def __init__(self, pgid: int, limits: WatchdogLimits, meminfo_path: str = "/proc/meminfo") -> None:
        super().__init__(name=f"watchdog-{pgid}", daemon=True)
        self.pgid = pgid
        self.limits = limits
        self.meminfo_path = meminfo_path
        self.tripped: str | None = None
        self._halt = threading.Event()
        self._swap_at_start = swap_used_gb(read_meminfo(meminfo_path))

    def stop(self) -> None:
        self._halt.set()

    def check(self) -> str | None:
        """The reason to kill the engine now, or None."""
        info = read_meminfo(self.meminfo_path)
        if not info:
            return None
        available = info.get("MemAvailable")
        if available is not None and available < self.limits.min_available_gb:
            return f"host MemAvailable {available:.1f} GB < {self.limits.min_available_gb:.1f} GB floor"
        growth = swap_used_gb(info) - self._swap_at_start
        if growth > self.limits.max_swap_growth_gb:
            return f"swap use grew {growth:.1f} GB (> {self.limits.max_swap_growth_gb:.1f} GB) during the trial"
        return None

    def run(self) -> None:
        while not self._halt.wait(self.limits.interval_s):
            reason = self.check()
            if reason:
                self.tripped = reason
                try:
                    os.killpg(self.pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return
