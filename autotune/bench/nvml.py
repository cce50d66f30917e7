"""The GPUs' energy, power and clocks through NVML (nvidia-ml-py's `pynvml`), one reading at a time.

Reading only: a value NVML refuses (not supported on this GPU, no permission) is None, never a
guess and never zero. Which GPUs a trial uses comes from CUDA_VISIBLE_DEVICES (indexes or UUIDs);
without it, every GPU NVML sees. Units as NVML gives them, converted once here: energy mJ -> J,
power mW -> W, clocks MHz.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from autotune.models import ClockEvent, GpuState

# NVML's clocks-event reason bits (nvml.h: nvmlClocksEventReason*), stable across driver versions
CLOCK_EVENT_BITS: dict[int, ClockEvent] = {
    0x1: ClockEvent.GPU_IDLE,
    0x2: ClockEvent.APPLICATIONS_CLOCKS,
    0x4: ClockEvent.SW_POWER_CAP,
    0x8: ClockEvent.HW_SLOWDOWN,
    0x10: ClockEvent.SYNC_BOOST,
    0x20: ClockEvent.SW_THERMAL,
    0x40: ClockEvent.HW_THERMAL,
    0x80: ClockEvent.HW_POWER_BRAKE,
    0x100: ClockEvent.DISPLAY_CLOCKS,
}
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0


class NvmlUnavailable(Exception):
    """NVML cannot be read on this host (no nvidia-ml-py, no driver, no GPU): energy is not measured."""


def clock_events(mask: int) -> list[ClockEvent]:
    return [event for bit, event in CLOCK_EVENT_BITS.items() if mask & bit]


def _bytes(value: Any) -> int | None:
    """A byte count as NVML gives it: None for no value, and for NVML_VALUE_NOT_AVAILABLE (the
    unsigned -1 a driver reports where it keeps no per-process figure)."""
    return None if value is None or value >= 2**63 else int(value)


def _module() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise NvmlUnavailable("no NVML: nvidia-ml-py (pynvml) is not installed") from exc


class Nvml:
    """An initialised NVML with the handles of the GPUs a trial uses on this host, and which node of
    the trial each belongs to (`nodes`: node -> its GPU indexes; one node, 0, unless opened for
    several). Close it when done."""

    def __init__(self, nvml: ModuleType, handles: dict[int, Any], nodes: dict[int, list[int]] | None = None) -> None:
        self._nvml = nvml
        self.handles = handles
        self.nodes = nodes if nodes is not None else {0: list(handles)}

    @classmethod
    def open(cls, visible: str | None) -> Nvml:
        """NVML for the GPUs `visible` names (CUDA_VISIBLE_DEVICES); raises NvmlUnavailable."""
        return cls.open_nodes({0: visible})

    @classmethod
    def open_nodes(cls, visible: dict[int, str | None]) -> Nvml:
        """NVML for the GPUs of several nodes on this host, node -> its CUDA_VISIBLE_DEVICES; a GPU
        two nodes name is counted once, for the first. Raises NvmlUnavailable."""
        nvml = _module()
        try:
            nvml.nvmlInit()
        except Exception as exc:  # pynvml.NVMLError and its per-code subclasses: no driver, no library
            raise NvmlUnavailable(f"no NVML: {exc}") from exc
        handles: dict[int, Any] = {}
        nodes: dict[int, list[int]] = {}
        try:
            for node, names in sorted(visible.items()):
                own = {i: h for i, h in cls._handles(nvml, names).items() if i not in handles}
                handles.update(own)
                nodes[node] = sorted(own)
        except Exception as exc:
            nvml.nvmlShutdown()
            raise NvmlUnavailable(f"NVML lists no GPU: {exc}") from exc
        if not handles:
            nvml.nvmlShutdown()
            names = ", ".join(f"node {n}: {v!r}" for n, v in sorted(visible.items())) if len(visible) > 1 else repr(
                visible.get(0))
            raise NvmlUnavailable(f"no GPU to read (CUDA_VISIBLE_DEVICES={names})")
        return cls(nvml, handles, nodes)

    @staticmethod
    def _handles(nvml: ModuleType, visible: str | None) -> dict[int, Any]:
        count = nvml.nvmlDeviceGetCount()
        if visible is None:
            return {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)}
        out: dict[int, Any] = {}
        for token in (t.strip() for t in visible.split(",")):
            if token.isdigit() and int(token) < count:
                out[int(token)] = nvml.nvmlDeviceGetHandleByIndex(int(token))
            elif token.startswith("GPU-"):
                handle = nvml.nvmlDeviceGetHandleByUUID(token)
                out[int(nvml.nvmlDeviceGetIndex(handle))] = handle
            else:  # CUDA stops at the first entry it cannot use: so do the GPUs counted
                break
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass

    def _read(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, name)(*args)
        except Exception:  # NVMLError_NotSupported, NoPermission, an older pynvml without the call
            return None

    def energy_j(self, gpu: int) -> float | None:
        """The energy counter (mJ since the driver loaded) in joules; None where the GPU has none."""
        mj = self._read("nvmlDeviceGetTotalEnergyConsumption", self.handles[gpu])
        return mj / 1000.0 if mj is not None else None

    def power_w(self, gpu: int) -> float | None:
        mw = self._read("nvmlDeviceGetPowerUsage", self.handles[gpu])
        return mw / 1000.0 if mw is not None else None

    def _event_mask(self, handle: Any) -> int | None:
        mask = self._read("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if mask is None:  # the name before nvidia-ml-py 12.535
            mask = self._read("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return mask

    def idle(self, gpu: int) -> bool | None:
        """Whether NVML gives the GPU's idle reason (clocks down, nothing running); None where the
        reasons cannot be read."""
        mask = self._event_mask(self.handles[gpu])
        return ClockEvent.GPU_IDLE in clock_events(mask) if mask is not None else None

    def at_rest(self, gpu: int) -> bool | None:
        """Idle and clocked down: the idle reason set and the SM clock below its maximum
        (`GpuState.at_full_clock`); None where the reasons cannot be read. A clock that cannot be
        read leaves the idle reason alone to decide."""
        idle = self.idle(gpu)
        return idle if not idle else not self.state(gpu).at_full_clock

    def compute_processes(self, gpu: int) -> list[tuple[int, int | None]]:
        """(pid, bytes of the GPU's memory it uses) for each process with a compute context on the
        GPU; the bytes are None where NVML gives no figure (a unified-memory GPU, a container)."""
        listed = self._read("nvmlDeviceGetComputeRunningProcesses", self.handles[gpu]) or []
        return [(int(p.pid), _bytes(getattr(p, "usedGpuMemory", None))) for p in listed]

    def memory_total_b(self, gpu: int) -> int | None:
        info = self._read("nvmlDeviceGetMemoryInfo", self.handles[gpu])
        return _bytes(getattr(info, "total", None))

    def state(self, gpu: int) -> GpuState:
        handle = self.handles[gpu]
        mask = self._event_mask(handle)
        limit = self._read("nvmlDeviceGetEnforcedPowerLimit", handle)
        return GpuState(
            index=gpu,
            sm_clock_mhz=self._read("nvmlDeviceGetClockInfo", handle, NVML_CLOCK_SM),
            mem_clock_mhz=self._read("nvmlDeviceGetClockInfo", handle, NVML_CLOCK_MEM),
            max_sm_clock_mhz=self._read("nvmlDeviceGetMaxClockInfo", handle, NVML_CLOCK_SM),
            events=clock_events(mask) if mask is not None else [],
            power_limit_w=limit / 1000.0 if limit is not None else None,
            temperature_c=self._read("nvmlDeviceGetTemperature", handle, NVML_TEMPERATURE_GPU),
        )
