"""Energy per measured workload: the trial's GPUs through NVML, the CPU packages through RAPL.

One `EnergyMeter` per trial. `before_launch()` reads the idle power and the GPUs' state before the
engine starts; `window(name)` wraps one workload (a prompt set's decode passes, prefill, one wave of
N streams, the capacity search) and records its joules, seconds, mean power, output tokens and the
GPUs' clocks over it. The GPU energy comes from NVML's energy counter where every counted GPU has
one, else from power readings sampled at `SAMPLE_HZ` in a thread and integrated (trapezoids); the
record names the method. The clocks are read in the same thread (at `STATE_HZ` beside a counter). A host with neither (no NVML, a CPU host) records no reading: absent,
never zero.

A multi-node trial's nodes on this host (Ray's raylets here, one per GPU slice; docker nodes on the
local daemon) are all read by this one meter: every node's GPUs in the same pass at each window
boundary (and at each power sample), summed, each node's part recorded with how far apart the
nodes' reads were (`skew_ms`): polls of each node on its own schedule would count some nodes over a
longer window than others and inflate J/token. A node on another host is not read; the record then
says how many nodes it counts and gives no J/token.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from autotune.bench import rapl
from autotune.bench.nvml import Nvml, NvmlUnavailable
from autotune.errors import EnergyUnavailable
from autotune.models import (
    EnergyMethod,
    EnergyReading,
    GpuState,
    Measurement,
    NodeEnergy,
    RequestResult,
    SearchSpace,
    TrialEnergy,
    WorkloadEnergy,
)

SAMPLE_HZ = 20.0  # power readings per second where there is no energy counter (the issue asks >= 10)
STATE_HZ = 2.0  # clock readings per second beside an energy counter (fewer calls beside the measured requests)
IDLE_S = 0.5  # how long the idle power is read before the launch
# how long the idle read waits for the GPUs to be at rest: an engine stopped a second before leaves
# its GPU at full clocks for 2-4 s, the idle reason already set (H200: 127 W at 1980 MHz vs 72-78 W
# at rest, 345 MHz)
IDLE_SETTLE_S = 20.0

Clock = Callable[[], float]


PerNode = dict[int, float]  # node -> its GPUs' joules or watts, summed


def _per_node(nvml: Nvml, read: Callable[[int], float | None]) -> PerNode | None:
    """One pass over every node's GPUs: each node's sum; None if any GPU gave no value."""
    values = {gpu: read(gpu) for gpu in nvml.handles}
    if any(v is None for v in values.values()):
        return None
    return {node: sum(values[g] or 0.0 for g in gpus) for node, gpus in nvml.nodes.items()}


class _Sampler:
    """Reads power (per node, each node's GPUs summed, when `power`) and each GPU's state every
    interval, in a thread: every node in the same pass."""

    def __init__(self, nvml: Nvml, power: bool, interval_s: float, clock: Clock) -> None:
        self.nvml, self.power, self.interval_s, self.clock = nvml, power, interval_s, clock
        self.samples: list[tuple[float, PerNode]] = []
        self.states: dict[int, list[GpuState]] = {gpu: [] for gpu in nvml.handles}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autotune-energy", daemon=True)

    def tick(self) -> None:
        now = self.clock()
        if self.power and (watts := _per_node(self.nvml, self.nvml.power_w)) is not None:
            self.samples.append((now, watts))
        for gpu in self.nvml.handles:
            self.states[gpu].append(self.nvml.state(gpu))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def start(self) -> None:
        self.tick()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.tick()

    def joules(self) -> tuple[PerNode, float] | None:
        """(joules per node, seconds) integrated over the power samples; None with fewer than two."""
        if len(self.samples) < 2:
            return None
        pairs = list(zip(self.samples, self.samples[1:]))
        joules = {node: sum((t1 - t0) * (p0[node] + p1[node]) / 2 for (t0, p0), (t1, p1) in pairs)
                  for node in self.samples[0][1]}
        return joules, self.samples[-1][0] - self.samples[0][0]

    def summary(self) -> list[GpuState]:
        return [summarize(gpu, states) for gpu, states in self.states.items() if states]


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 1) if known else None


def summarize(gpu: int, states: list[GpuState]) -> GpuState:
    """One GPU over a window: the median clocks, every clock event seen, the hottest temperature."""
    events = {e for s in states for e in s.events}
    temps = [s.temperature_c for s in states if s.temperature_c is not None]
    return GpuState(
        index=gpu,
        sm_clock_mhz=_median([s.sm_clock_mhz for s in states]),
        mem_clock_mhz=_median([s.mem_clock_mhz for s in states]),
        max_sm_clock_mhz=states[-1].max_sm_clock_mhz,
        events=sorted(events, key=lambda e: list(type(e)).index(e)),
        power_limit_w=states[-1].power_limit_w,
        temperature_c=max(temps) if temps else None,
    )


class EnergyMeter:
    """A trial's energy meter: idle before the launch, then one window per workload."""

    def __init__(self, nvml: Nvml | None, absent: str | None, zones: list[rapl.Zone], nodes: int = 1,
                 clock: Clock = time.monotonic, nodes_here: int = 1) -> None:
        self.nvml, self.zones, self.nodes, self.clock = nvml, zones, nodes, clock
        self.nodes_here = len(nvml.nodes) if nvml is not None else nodes_here
        self.method: EnergyMethod | None = None
        self.absent = absent
        if nvml is not None:
            gpus = list(nvml.handles)
            if all(nvml.energy_j(g) is not None for g in gpus):
                self.method = EnergyMethod.COUNTER
            elif all(nvml.power_w(g) is not None for g in gpus):
                self.method = EnergyMethod.POWER_SAMPLES
            else:
                self.absent = "no counter: NVML gives neither an energy counter nor power readings for these GPUs"
        # power samples at SAMPLE_HZ where they are the energy; the clocks alone at STATE_HZ beside a counter
        self.interval_s = 1.0 / (STATE_HZ if self.method is EnergyMethod.COUNTER else SAMPLE_HZ)
        self.idle_gpu_w: float | None = None
        self.idle_cpu_w: float | None = None
        self.start_state: list[GpuState] = []
        self.workloads: list[WorkloadEnergy] = []
        self._tokens = 0

    @classmethod
    def open(cls, visible: str | None, nodes: int = 1, powercap: Path | None = None) -> EnergyMeter:
        """The meter for the GPUs `visible` names (CUDA_VISIBLE_DEVICES) and this host's RAPL packages."""
        return cls.open_nodes({0: visible}, nodes, powercap)

    @classmethod
    def open_nodes(cls, visible: dict[int, str | None], nodes: int, powercap: Path | None = None) -> EnergyMeter:
        """The meter for a trial of `nodes` nodes whose nodes on this host are `visible` (node ->
        its CUDA_VISIBLE_DEVICES), and this host's RAPL packages."""
        nvml: Nvml | None = None
        absent = "not read: the trial runs on another host (only the GPUs of this host's nodes are read)"
        if visible:
            try:
                nvml, absent = Nvml.open_nodes(visible), None
            except NvmlUnavailable as exc:
                absent = str(exc)
        return cls(nvml, absent, rapl.packages(powercap), nodes, nodes_here=len(visible))

    @property
    def gpus(self) -> list[int]:
        return list(self.nvml.handles) if self.nvml is not None else []

    def before_launch(self, idle_s: float = IDLE_S, settle_s: float = IDLE_SETTLE_S) -> None:
        """The idle power of the GPUs and CPU packages, and the GPUs' state, before the engine starts.
        The GPUs' idle power is read once each says it is idle (up to `settle_s`); a GPU that never
        does leaves it absent; the wait is skipped when no idle power is read."""
        settled = self._settle(settle_s) if self.method is not None else True
        cpu_before = rapl.read_all(self.zones) if self.zones else None
        t0 = self.clock()
        if self.nvml is not None and self.method is not None:
            sampler = _Sampler(self.nvml, True, 1.0 / SAMPLE_HZ, self.clock)
            counter, _ = self._counter()
            sampler.start()
            time.sleep(idle_s)
            sampler.stop()
            after, _ = self._counter()
            self.start_state = sampler.summary()
            if not settled:  # a GPU still busy from the last engine: its power is not the idle's
                self.idle_gpu_w = None
            elif self.method is EnergyMethod.COUNTER and counter is not None and after is not None:
                span = self.clock() - t0
                used = sum(after.values()) - sum(counter.values())
                self.idle_gpu_w = round(used / span, 2) if span > 0 else None
            elif (integrated := sampler.joules()) is not None and integrated[1] > 0:
                self.idle_gpu_w = round(sum(integrated[0].values()) / integrated[1], 2)
        elif self.zones:
            time.sleep(idle_s)
        elif self.nvml is not None:
            self.start_state = [self.nvml.state(g) for g in self.gpus]
        cpu_after = rapl.read_all(self.zones) if self.zones else None
        span = self.clock() - t0
        if cpu_before is not None and cpu_after is not None and span > 0:
            self.idle_cpu_w = round(rapl.joules_between(self.zones, cpu_before, cpu_after) / span, 2)

    def _settle(self, settle_s: float) -> bool:
        """Wait until every GPU whose clock reasons can be read is at rest (idle reason, clock
        down); False when one is not within `settle_s`."""
        if self.nvml is None:
            return True
        nvml = self.nvml
        deadline = time.monotonic() + settle_s
        while any(nvml.at_rest(g) is False for g in self.gpus):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
        return True

    def _counter(self) -> tuple[PerNode | None, float]:
        """Every node's energy counters in one pass: (joules per node, or None; the pass's seconds)."""
        if self.nvml is None:
            return None, 0.0
        t0 = self.clock()
        values = _per_node(self.nvml, self.nvml.energy_j)
        return values, self.clock() - t0

    def request_done(self, result: RequestResult) -> None:
        """Count a finished request's output tokens (the window it ends in owns them)."""
        if result.ok and result.n_out:
            self._tokens += result.n_out

    @contextmanager
    def window(self, workload: str) -> Iterator[None]:
        """Measure one workload: its energy, seconds, output tokens and the GPUs' state over it."""
        tokens0 = self._tokens
        cpu_before = rapl.read_all(self.zones) if self.zones else None
        sampler = (_Sampler(self.nvml, self.method is EnergyMethod.POWER_SAMPLES, self.interval_s, self.clock)
                   if self.nvml is not None else None)
        counter0, skew0 = self._counter() if self.method is EnergyMethod.COUNTER else (None, 0.0)
        t0 = self.clock()
        if sampler is not None:
            sampler.start()
        try:
            yield
        finally:
            if sampler is not None:
                sampler.stop()
            counter1, skew1 = self._counter() if self.method is EnergyMethod.COUNTER else (None, 0.0)
            seconds = self.clock() - t0
            cpu_after = rapl.read_all(self.zones) if self.zones else None
        gpu = None
        if self.method is EnergyMethod.COUNTER and counter0 is not None and counter1 is not None:
            gpu = self._gpu_reading({n: counter1[n] - counter0[n] for n in counter0}, seconds, max(skew0, skew1))
        elif self.method is EnergyMethod.POWER_SAMPLES and sampler is not None:
            integrated = sampler.joules()
            if integrated is not None:  # each sample reads every node in one pass: no skew beyond it
                gpu = self._gpu_reading(*integrated, 0.0)
        cpu = None
        if cpu_before is not None and cpu_after is not None:
            cpu = self._reading(rapl.joules_between(self.zones, cpu_before, cpu_after), seconds, self.idle_cpu_w,
                                EnergyMethod.RAPL, [z.index for z in self.zones])
        self.workloads.append(WorkloadEnergy(
            workload=workload, output_tokens=self._tokens - tokens0, gpu=gpu, cpu=cpu,
            gpu_state=sampler.summary() if sampler is not None else [],
        ))

    def _gpu_reading(self, joules: PerNode, seconds: float, skew_s: float) -> EnergyReading | None:
        """The window's GPU energy, every node summed; each node's part where there are several."""
        assert self.nvml is not None and self.method is not None
        reading = self._reading(sum(joules.values()), seconds, self.idle_gpu_w, self.method, self.gpus)
        if reading is None or len(self.nvml.nodes) < 2:
            return reading
        parts = [NodeEnergy(node=n, devices=self.nvml.nodes[n], joules=round(j, 3)) for n, j in sorted(joules.items())]
        return reading.model_copy(update={"nodes": parts, "skew_ms": round(skew_s * 1000, 3)})

    @staticmethod
    def _reading(joules: float, seconds: float, idle_w: float | None, method: EnergyMethod,
                 devices: list[int]) -> EnergyReading | None:
        if seconds <= 0:
            return None
        return EnergyReading(joules=round(joules, 3), seconds=round(seconds, 3), mean_power_w=round(joules / seconds, 2),
                             idle_power_w=idle_w, method=method, devices=devices)

    def record(self) -> TrialEnergy:
        return TrialEnergy(
            gpus=self.gpus, gpu_method=self.method, absent=self.absent if self.method is None else None,
            idle_gpu_power_w=self.idle_gpu_w, start_state=self.start_state, workloads=self.workloads,
            nodes_counted=self.nodes_here, nodes=self.nodes,
        )

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()


def gpu_only(energy: TrialEnergy) -> str:
    """What a GPU energy figure counts, as a condition says it."""
    method = energy.gpu_method.value if energy.gpu_method else "none"
    return (f"GPU energy only (GPUs {','.join(map(str, energy.gpus))}, {method}), not the box's: CPU, memory, "
            "fans and the power supply are not in it")


def energy_measurements(energy: TrialEnergy) -> list[Measurement]:
    """The energy figures a trial reports as measurements (what objectives and gates read): per decode
    workload gpu_j_per_token, tokens_per_gpu_joule; per workload gpu_power_w. None where the GPU
    energy is absent, or where it counts only some of a multi-node trial's nodes."""
    if energy.gpu_method is None or energy.nodes_counted < energy.nodes:
        return []
    out = []
    what = gpu_only(energy)
    for w in energy.workloads:
        if w.gpu is None:
            continue
        window = f"{w.workload} workload, {w.gpu.seconds:.1f} s, {w.output_tokens} output tokens; {what}"
        out.append(Measurement.of(f"gpu_power_w.{w.workload}", "W", f"mean GPU power, {window}", [w.gpu.mean_power_w]))
        if w.gpu_j_per_token is None or w.tokens_per_gpu_joule is None:
            continue
        out.append(Measurement.of(f"gpu_j_per_token.{w.workload}", "J/token", f"GPU joules per output token, {window}",
                                  [w.gpu_j_per_token]))
        out.append(Measurement.of(f"tokens_per_gpu_joule.{w.workload}", "tok/J",
                                  f"output tokens per GPU joule, {window}", [w.tokens_per_gpu_joule]))
    return out


def gpu_energy_absent(space: SearchSpace) -> str | None:
    """Why this host cannot give the GPU energy the space's objective reads; None where it can, or
    where the objective reads none."""
    if not space.objective.gpu_energy:
        return None
    meter = EnergyMeter.open(os.environ.get("CUDA_VISIBLE_DEVICES"))
    try:
        return meter.absent if meter.method is None else None
    finally:
        meter.close()


def check_energy_readable(space: SearchSpace) -> None:
    """An objective of GPU energy needs an energy counter or power readings on this host: refused
    (exit 3) before runs.db opens, not a study whose every trial fails."""
    absent = gpu_energy_absent(space)
    if absent is not None:
        raise EnergyUnavailable(f"objective {space.objective.metric} needs the GPU's energy, and this host has "
                                f"none to read ({absent}); rank by tok/s here (objective.metric "
                                f"{space.objective.speed_fallback}), energy is then recorded where readable")
