"""A trial's energy per workload and the state of its GPUs (clocks, clock events, temperature)."""

from __future__ import annotations

import statistics
from enum import Enum

from pydantic import Field

from autotune.models.base import Record


class EnergyMethod(str, Enum):
    """How a workload's energy was read."""

    COUNTER = "nvml_energy_counter"  # nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded
    POWER_SAMPLES = "nvml_power_samples"  # nvmlDeviceGetPowerUsage sampled at >= 10 Hz, integrated (trapezoids)
    RAPL = "rapl"  # the CPU package's powercap counter (energy_uj)


class ClockEvent(str, Enum):
    """Why a GPU's clocks were held down (NVML's clocks-event reasons, once called throttle reasons)."""

    GPU_IDLE = "gpu_idle"
    APPLICATIONS_CLOCKS = "applications_clocks_setting"
    SW_POWER_CAP = "sw_power_cap"
    HW_SLOWDOWN = "hw_slowdown"
    SYNC_BOOST = "sync_boost"
    SW_THERMAL = "sw_thermal_slowdown"
    HW_THERMAL = "hw_thermal_slowdown"
    HW_POWER_BRAKE = "hw_power_brake_slowdown"
    DISPLAY_CLOCKS = "display_clock_setting"


#: clock events that make a measurement not the config's speed: the GPU was slowed by heat or by
#: its hardware (a power cap reached under load is the config's own cost, and is only recorded)
THROTTLE_EVENTS = frozenset({ClockEvent.HW_SLOWDOWN, ClockEvent.SW_THERMAL, ClockEvent.HW_THERMAL,
                             ClockEvent.HW_POWER_BRAKE})


class GpuState(Record):
    """One GPU's state, read at the start of a trial or over a workload (the lowest clocks seen, every
    clock event seen, the hottest temperature); None: NVML did not give it."""

    index: int
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    events: list[ClockEvent] = Field(default_factory=list)
    power_limit_w: float | None = None
    temperature_c: float | None = None

    @property
    def throttled(self) -> bool:
        return any(e in THROTTLE_EVENTS for e in self.events)

    @property
    def at_full_clock(self) -> bool:
        """SM clock at its maximum (False where either is unknown). After an engine exits, H100 and
        H200 stay there for 2-4 s, the idle reason already set, at ~125 W against ~72 W at rest."""
        return (self.sm_clock_mhz is not None and self.max_sm_clock_mhz is not None
                and self.sm_clock_mhz >= self.max_sm_clock_mhz)


class NodeEnergy(Record):
    """One node's part of a multi-node trial's GPU energy over a window (its GPUs summed)."""

    node: int = Field(description="the node's index in the launch (0: the head)")
    devices: list[int] = Field(description="its GPUs (NVML indexes on its host)")
    joules: float


class EnergyReading(Record):
    """The energy of one domain (the trial's GPUs together, or the CPU packages) over one window."""

    joules: float
    seconds: float
    mean_power_w: float
    idle_power_w: float | None = Field(None, description="the same devices' power before the launch")
    method: EnergyMethod
    devices: list[int] = Field(description="GPU indexes (NVML), or RAPL package zones, summed")
    nodes: list[NodeEnergy] = Field(
        default_factory=list, description="a multi-node trial: each node's part of the joules, every node's GPUs read "
        "in the same pass at the window's start and end (empty for one node)",
    )
    skew_ms: float | None = Field(
        None, description="a multi-node trial: how far apart the nodes' reads of one boundary were, at most (ms); "
        "unaligned reads would count some nodes over a longer window than others",
    )

    @property
    def active_joules(self) -> float | None:
        """Energy above idle: joules - idle power x seconds (None without an idle reading)."""
        if self.idle_power_w is None:
            return None
        return max(0.0, self.joules - self.idle_power_w * self.seconds)


#: workloads whose output tokens are not decode: prefill's two tokens per prompt, and a long-context
#: decode's long cold prompt, make a J per output token that says nothing of decoding
NOT_DECODE_WORKLOADS = ("prefill", "long_decode")


class WorkloadEnergy(Record):
    """One measured workload's energy and the GPUs' state over it."""

    workload: str = Field(description="prose / structured (decode), prefill, long_decode, cN (a wave), capacity")
    output_tokens: int = Field(description="output tokens of its successful requests")
    gpu: EnergyReading | None = Field(None, description="None: no GPU energy readable (not measured, never zero)")
    cpu: EnergyReading | None = Field(None, description="None: no readable RAPL counter")
    gpu_state: list[GpuState] = Field(default_factory=list, description="per GPU over the window")

    @property
    def decodes(self) -> bool:
        """Whether its output tokens are decode (a J per output token means something)."""
        return self.workload not in NOT_DECODE_WORKLOADS

    @property
    def gpu_j_per_token(self) -> float | None:
        ok = self.gpu is not None and self.decodes and self.output_tokens > 0 and self.gpu.joules > 0
        return self.gpu.joules / self.output_tokens if ok and self.gpu else None

    @property
    def tokens_per_gpu_joule(self) -> float | None:
        per_token = self.gpu_j_per_token
        return 1.0 / per_token if per_token else None

    @property
    def active_gpu_j_per_token(self) -> float | None:
        active = self.gpu.active_joules if self.gpu else None
        return active / self.output_tokens if active is not None and self.decodes and self.output_tokens else None


class TrialEnergy(Record):
    """A trial's energy per workload and its GPUs' state. Energy is GPU-only (and the CPU packages
    where RAPL is readable): on GB10 the GPU is about 30 % of the box, so a J/token here is not the box's."""

    gpus: list[int] = Field(default_factory=list, description="the GPUs counted (NVML indexes on this host)")
    gpu_method: EnergyMethod | None = Field(None, description="None: no GPU energy readable")
    absent: str | None = Field(None, description="why GPU energy is not measured (no NVML, no counter, ...)")
    idle_gpu_power_w: float | None = Field(None, description="the GPUs' power summed, read before the launch")
    start_state: list[GpuState] = Field(default_factory=list, description="per GPU, before the launch")
    workloads: list[WorkloadEnergy] = Field(default_factory=list)
    nodes_counted: int = Field(1, description="nodes whose GPUs are counted (the nodes on this host; one on "
                               "another host is not read)")
    nodes: int = Field(1, description="nodes the trial ran on")

    def of(self, workload: str) -> WorkloadEnergy | None:
        return next((w for w in self.workloads if w.workload == workload), None)

    def states(self) -> list[GpuState]:
        return [*self.start_state, *(s for w in self.workloads for s in w.gpu_state)]

    @property
    def throttled(self) -> bool:
        return any(s.throttled for s in self.states())

    @property
    def idle_at_rest(self) -> bool:
        """Whether the idle power was read with every GPU clocked down. Trials stored before the
        meter waited for that (2026-12-06) read some idles at full clock, a second after the last
        engine stopped: 125-151 W against ~72 W at rest on the H200 and H100."""
        return not any(s.at_full_clock for s in self.start_state)

    def sm_clock_mhz(self) -> float | None:
        """The median over the workloads of each one's lowest SM clock (GPUs together): what this
        launch ran at, compared with the host's usual (autotune/verdict/gpu_state.py)."""
        clocks = [min(c) for w in self.workloads
                  if (c := [s.sm_clock_mhz for s in w.gpu_state if s.sm_clock_mhz is not None])]
        return statistics.median(clocks) if clocks else None


class GpuStateFlag(str, Enum):
    """Why a trial's launch is not the config's speed (autotune/verdict/gpu_state.py)."""

    THROTTLED = "throttled"  # a thermal or hardware slowdown during a workload
    LOW_CLOCKS = "low_clocks"  # SM clocks below the host's usual by more than the set share
