"""This host and what runs on it: its device identity and fingerprint, the engine's choices, probe results."""

from __future__ import annotations

import hashlib
from enum import Enum
from typing import Literal

from pydantic import Field

from autotune.models.base import Record, Scalar
from autotune.models.space import SearchSpace


class GpuIdentity(Record):
    index: int
    name: str
    compute_capability: str = Field(description="sm_XY")
    total_memory_gb: float | None = None
    free_memory_gb: float | None = None
    unified_memory: bool = False
    multiprocessor_count: int | None = None


class GpuHolder(Record):
    """A process other than autotune with a compute context on a GPU autotune may use, as NVML
    lists it (autotune/bench/occupancy.py). `used_gib` is None where NVML gives no figure (a
    unified-memory GPU); `total_gib` is the GPU's memory, None where NVML cannot read it."""

    gpu: int
    pid: int
    command: str
    used_gib: float | None = None
    total_gib: float | None = None


class DeviceIdentity(Record):
    """What this host is. Every GPU field is empty on a machine without one (or without torch)."""

    hostname: str
    os: str
    cpu_model: str | None = None
    cpu_cores: int
    memory_total_gb: float
    memory_available_gb: float
    swap_total_gb: float = 0.0
    swap_free_gb: float = 0.0
    gpus: list[GpuIdentity] = Field(default_factory=list)
    driver: str | None = None
    cuda_runtime: str | None = None
    torch_version: str | None = None
    torch_arch_list: list[str] = Field(default_factory=list)
    triton_version: str | None = None
    nvcc_version: str | None = None
    notes: list[str] = Field(default_factory=list)


ProbeStatus = Literal["works", "fails", "unsupported", "untested"]


class HostFingerprint(Record):
    """What a probe result is valid for: the same fingerprint means the same answer."""

    hostname: str
    gpu: str | None = None
    compute_capability: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    engine: str
    engine_version: str | None = None

    def key(self) -> str:
        blob = self.model_dump_json(exclude={"hostname"})
        return hashlib.sha1(blob.encode()).hexdigest()[:16]


class ChoicesStatus(str, Enum):
    """Whether a space's knob values were held against what the installed engine accepts."""

    CHECKED = "checked"  # every value is one this engine version accepts
    NOT_INSTALLED = "not_installed"  # no engine here to ask (a plan or a dry run on a laptop)
    UNREADABLE = "unreadable"  # the engine is here, but reading its choices failed
    NOTHING_TO_CHECK = "nothing_to_check"  # the engine states no choices (llama.cpp)


class LeftOutKnob(Record):
    """A knob's `where_listed` values that the installed engine does not list, left out of the
    study before runs.db opens."""

    knob: str
    flag: str | None
    values: list[Scalar]
    flag_listed: bool = Field(description="the version has the knob's option, only not these values")
    engine_version: str

    def apply(self, space: SearchSpace) -> SearchSpace:
        """`space` without these values."""
        def without(values: list[Scalar]) -> list[Scalar]:
            return [v for v in values if v not in self.values]

        knobs = [k.model_copy(update={"values": without(k.values), "where_listed": without(k.where_listed)})
                 if k.name == self.knob else k for k in space.knobs]
        return space.model_copy(update={"knobs": knobs})

    def note(self) -> str:
        """One line for the user: what was left out, and which version did not list it."""
        values = f"{self.knob}={', '.join(map(str, self.values))}"
        if self.flag_listed:
            return f"vLLM {self.engine_version} does not list {values} ({self.flag}): left out of this study"
        return f"vLLM {self.engine_version} has no {self.flag}: {values} left out of this study"


class ChoicesCheck(Record):
    """The outcome of checking a space's knob values against the installed engine's choices
    (a refused value is an error, not a ChoicesCheck)."""

    status: ChoicesStatus
    engine: str
    engine_version: str | None = None
    detail: str = Field("", description="why the values were not checked")
    takes_draft_schedule: bool = Field(
        False, description="the engine lists a draft length per batch size in --speculative-config")
    left_out: list[LeftOutKnob] = Field(
        default_factory=list, description="values of `unlisted: leave_out` knobs this version does not list")

    def kept(self, space: SearchSpace) -> SearchSpace:
        """The space this version runs: `space` without what the check left out."""
        for left in self.left_out:
            space = left.apply(space)
        return space

    def notes(self) -> list[str]:
        """Lines for the user: that the values went unchecked, or what was left out of the study."""
        if self.status == ChoicesStatus.NOT_INSTALLED:
            return [f"{self.engine} is not installed here: knob values not checked against its choices"]
        if self.status == ChoicesStatus.UNREADABLE:
            return [f"{self.engine} {self.engine_version}: knob values not checked, its choices could not be "
                    f"read ({self.detail})"]
        return [left.note() for left in self.left_out]


class ProbeResult(Record):
    feature: str = Field(description="e.g. 'kv_cache_dtype=fp8' or 'kernel:fp8_scaled_mm_rowwise'")
    status: ProbeStatus
    evidence: str = ""
    signature: str | None = Field(None, description="failure class from the signature table")
    params: dict[str, Scalar] = Field(
        default_factory=dict, description="knob values this result is about (for pruning)"
    )
    output: str | None = Field(None, description="the greedy text a launch probe generated (golden check)")
    duration_s: float = 0.0


class ProbeReport(Record):
    """What `autotune probe` found (or reused from runs.db) for one host fingerprint."""

    device: DeviceIdentity
    engine: str
    engine_version: str | None
    host_key: str
    results: list[ProbeResult]
    reused: bool = False
    resumed: int = Field(0, description="cells an earlier probe left untested that this one settled")
