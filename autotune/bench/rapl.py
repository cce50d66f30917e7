"""The CPU packages' energy from RAPL through Linux powercap (`intel-rapl:N/energy_uj`).

A package zone is `intel-rapl:N` (its sub-zones `intel-rapl:N:M`, core and dram, are inside it and
not added again). The counter wraps at `max_energy_range_uj`. Where no zone is readable (no RAPL,
a VM, energy_uj readable by root only since Linux 5.10) there is no reading: absent, never zero.
The root is configurable (AUTOTUNE_POWERCAP_ROOT) so tests can hand it a tree of their own.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

DEFAULT_ROOT = "/sys/class/powercap"
_PACKAGE = re.compile(r"^intel-rapl:(\d+)$")


def powercap_root() -> Path:
    return Path(os.environ.get("AUTOTUNE_POWERCAP_ROOT", DEFAULT_ROOT))


class Zone(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    path: Path
    max_uj: int

    def read_uj(self) -> int | None:
        try:
            return int((self.path / "energy_uj").read_text().strip())
        except (OSError, ValueError):
            return None


def packages(root: Path | None = None) -> list[Zone]:
    """The package zones whose counter reads now (none: RAPL absent or unreadable)."""
    root = root or powercap_root()
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    zones = []
    for entry in entries:
        found = _PACKAGE.match(entry.name)
        if not found:
            continue
        try:
            max_uj = int((entry / "max_energy_range_uj").read_text().strip())
        except (OSError, ValueError):
            continue
        zone = Zone(index=int(found.group(1)), path=entry, max_uj=max_uj)
        if zone.read_uj() is not None:
            zones.append(zone)
    return zones


def delta_uj(before: int, after: int, max_uj: int) -> int:
    """Microjoules between two readings of one counter, across one wrap at max_uj."""
    return after - before if after >= before else after + max_uj - before


def read_all(zones: list[Zone]) -> dict[int, int] | None:
    """Every zone's counter now (None if one could not be read)."""
    out = {}
    for zone in zones:
        value = zone.read_uj()
        if value is None:
            return None
        out[zone.index] = value
    return out


def joules_between(zones: list[Zone], before: dict[int, int], after: dict[int, int]) -> float:
    return sum(delta_uj(before[z.index], after[z.index], z.max_uj) for z in zones) / 1e6
