"""FAKE: a stand-in for nvidia-ml-py's `pynvml` where no GPU runs (CI, this VM).

`install(monkeypatch, gpus)` puts a module named `pynvml` in sys.modules with the calls
autotune/bench/nvml.py makes, answering as NVML does (mJ, mW, MHz, bit masks, NVMLError for an
unsupported call). Each `FakeGpu` draws a constant power, and its energy counter advances with
the monotonic clock at that power, as the driver's counter does. Variants: a GPU without the
counter (`counter=False`, as some GB10 drivers), one without any power reading, one that is
thermally throttled with low clocks, one that other processes hold memory on (`processes`, as
nvmlDeviceGetComputeRunningProcesses lists them). Everything above the module is the real code."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace

import pytest

HW_THERMAL = 0x40
SW_POWER_CAP = 0x4
GPU_IDLE = 0x1


class NVMLError(Exception):
    def __init__(self, value: int = 3) -> None:  # 3: NVML_ERROR_NOT_SUPPORTED
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    power_w: float = 300.0
    counter: bool = True
    power: bool = True
    sm_mhz: int = 1980
    max_sm_mhz: int = 2100  # above sm_mhz: a GPU with the idle reason and its clock below the top is at rest
    mem_mhz: int = 3201
    reasons: int = GPU_IDLE  # NVML's idle reason: the meter reads the idle power once a GPU gives it
    temperature_c: int = 45
    power_limit_w: float = 700.0
    uuid: str = ""
    #: other processes' compute contexts on this GPU: (pid, bytes used; None where NVML gives no figure)
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    memory_total_b: int = 80 * 2**30
    start: float = field(default_factory=time.monotonic)
    base_mj: int = 123_456_789

    def energy_mj(self) -> int:
        return self.base_mj + int((time.monotonic() - self.start) * self.power_w * 1000)


def throttled_gpu() -> FakeGpu:
    """A GPU held down by heat: its clocks at 60 % of their maximum, the hardware thermal reason set."""
    return FakeGpu(sm_mhz=1188, reasons=HW_THERMAL, temperature_c=89)


def module(gpus: list[FakeGpu], init_error: bool = False) -> ModuleType:
    fake = ModuleType("pynvml")
    fake.NVMLError = NVMLError
    fake.calls = []

    def init() -> None:
        if init_error:
            raise NVMLError(12)  # NVML_ERROR_LIBRARY_NOT_FOUND
        fake.calls.append("init")

    def shutdown() -> None:
        fake.calls.append("shutdown")

    def by_index(i: int) -> FakeGpu:
        if i >= len(gpus):
            raise NVMLError(2)
        return gpus[i]

    def by_uuid(uuid: str) -> FakeGpu:
        return next(g for g in gpus if g.uuid == uuid)

    def energy(gpu: FakeGpu) -> int:
        if not gpu.counter:
            raise NVMLError()
        return gpu.energy_mj()

    def power(gpu: FakeGpu) -> int:
        if not gpu.power:
            raise NVMLError()
        return int(gpu.power_w * 1000)

    fake.nvmlInit = init
    fake.nvmlShutdown = shutdown
    fake.nvmlDeviceGetCount = lambda: len(gpus)
    fake.nvmlDeviceGetHandleByIndex = by_index
    fake.nvmlDeviceGetHandleByUUID = by_uuid
    fake.nvmlDeviceGetIndex = lambda gpu: gpus.index(gpu)
    fake.nvmlDeviceGetTotalEnergyConsumption = energy
    fake.nvmlDeviceGetPowerUsage = power
    fake.nvmlDeviceGetClockInfo = lambda gpu, kind: gpu.sm_mhz if kind == 1 else gpu.mem_mhz
    fake.nvmlDeviceGetMaxClockInfo = lambda gpu, kind: gpu.max_sm_mhz if kind == 1 else gpu.mem_mhz
    fake.nvmlDeviceGetCurrentClocksEventReasons = lambda gpu: gpu.reasons
    fake.nvmlDeviceGetEnforcedPowerLimit = lambda gpu: int(gpu.power_limit_w * 1000)
    fake.nvmlDeviceGetTemperature = lambda gpu, sensor: gpu.temperature_c
    fake.nvmlDeviceGetComputeRunningProcesses = lambda gpu: [
        SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]
    fake.nvmlDeviceGetMemoryInfo = lambda gpu: SimpleNamespace(
        total=gpu.memory_total_b, used=sum(u or 0 for _, u in gpu.processes),
        free=gpu.memory_total_b - sum(u or 0 for _, u in gpu.processes))
    return fake


def install(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu], init_error: bool = False) -> ModuleType:
    """Make `import pynvml` give the fake for the rest of the test."""
    fake = module(gpus, init_error)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host without nvidia-ml-py: `import pynvml` fails."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
