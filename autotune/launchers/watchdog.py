"""Host-memory watchdog for one engine process group.

On unified-memory machines (DGX Spark) an engine that over-commits can wedge the whole host before
any OOM killer acts, so the watchdog kills the group first: when MemAvailable is about to fall
under a floor, or swap use grows past a limit since the engine started. An engine can grab several
GB per second (weights streamed into unified memory), so each check projects MemAvailable one poll
ahead at the rate it is falling and kills when the projection is under the floor, not only once
the floor is crossed. The floor comes from the hardware profile (`limits_for`). What it did, and
the readings that made it act, are kept in `tripped` and `readings`.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from pydantic import BaseModel, ConfigDict

from autotune.models import FailureCause, FailureInfo, HardwareProfile

HOST_MEMORY = "host_memory"  # failure class of a trial the watchdog stopped


class WatchdogLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_available_gb: float = 1.0
    max_swap_growth_gb: float = 4.0
    interval_s: float = 0.1
    #: how far ahead (s) the falling MemAvailable is projected; covers the poll gap and the kill
    lookahead_s: float = 0.5
    floor_source: str = "default"


def limits_for(profile: HardwareProfile, memory_total_gb: float) -> WatchdogLimits:
    """The floor for this hardware. Unified memory (Spark: GPU and host share one pool): what the
    profile leaves to the OS (`os_reserve_gb`), at least 3 % of the host's memory. Discrete GPUs:
    the host only feeds the GPU, 1 % of its memory, between 1 and 8 GB."""
    if profile.unified_memory:
        floor = max(profile.os_reserve_gb, 0.03 * memory_total_gb, 1.0)
        source = f"{profile.name}: unified memory, OS reserve {profile.os_reserve_gb:g} GB of {memory_total_gb:.0f} GB"
    else:
        floor = min(max(0.01 * memory_total_gb, 1.0), 8.0)
        source = f"{profile.name}: discrete GPU memory, 1 % of {memory_total_gb:.0f} GB host memory"
    return WatchdogLimits(min_available_gb=round(floor, 2), floor_source=source)


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
    KEEP_READINGS = 20

    def __init__(self, pgid: int, limits: WatchdogLimits, meminfo_path: str = "/proc/meminfo") -> None:
        super().__init__(name=f"watchdog-{pgid}", daemon=True)
        self.pgid = pgid
        self.limits = limits
        self.meminfo_path = meminfo_path
        self.tripped: str | None = None
        #: (seconds since start, MemAvailable GB), the newest last
        self.readings: list[tuple[float, float]] = []
        self._halt = threading.Event()
        self._t0 = time.monotonic()
        self._swap_at_start = swap_used_gb(read_meminfo(meminfo_path))

    def stop(self) -> None:
        self._halt.set()

    def check(self) -> str | None:
        """The reason to kill the engine now, or None."""
        info = read_meminfo(self.meminfo_path)
        if not info:
            return None
        available = info.get("MemAvailable")
        floor = self.limits.min_available_gb
        if available is not None:
            now = time.monotonic() - self._t0
            previous = self.readings[-1] if self.readings else None
            self.readings = [*self.readings[-(self.KEEP_READINGS - 1):], (now, available)]
            if available < floor:
                return f"host MemAvailable {available:.1f} GB < {floor:.1f} GB floor"
            if previous is not None and now > previous[0]:
                rate = (previous[1] - available) / (now - previous[0])  # GB/s, > 0 while falling
                projected = available - rate * self.limits.lookahead_s
                if rate > 0 and projected < floor:
                    return (
                        f"host MemAvailable {available:.2f} GB falling {rate:.1f} GB/s: under the "
                        f"{floor:.2f} GB floor within {self.limits.lookahead_s:g} s"
                    )
        growth = swap_used_gb(info) - self._swap_at_start
        if growth > self.limits.max_swap_growth_gb:
            return f"swap use grew {growth:.1f} GB (> {self.limits.max_swap_growth_gb:.1f} GB) during the trial"
        return None

    def failure(self) -> FailureInfo | None:
        """The trial's failure when the watchdog stopped the engine, with its readings."""
        if self.tripped is None:
            return None
        evidence = [f"t={t:.2f}s MemAvailable={gb:.2f} GB" for t, gb in self.readings[-8:]]
        evidence.append(f"floor {self.limits.min_available_gb:.2f} GB ({self.limits.floor_source})")
        return FailureInfo(
            failure_class=HOST_MEMORY,
            feature="host memory",
            message=f"watchdog stopped the engine: {self.tripped}",
            evidence=evidence,
            cause=FailureCause.LIMITS,  # memory, which depends on every knob together
        )

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
