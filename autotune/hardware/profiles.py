"""Hardware profiles: the built-in ones (hardware_profiles.yaml), `--hardware auto` from a device
probe, and the parallel layout (TP x PP) a candidate gets on N nodes.

A profile describes one box. `nodes` boxes make the cluster; on one-GPU-per-box hardware such as
the DGX Spark every node adds one GPU.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from pydantic import ValidationError

from autotune.errors import ConfigError
from autotune.models import (
    Candidate,
    DeviceIdentity,
    GpuIdentity,
    HardwareProfile,
    SearchSpace,
)

PROFILES_FILE = "hardware_profiles.yaml"
GIB_IN_GB = 1024**3 / 1e9  # autotune/hardware/device.py reports memory in GiB; profiles use GB

@lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    text = resources.files("autotune.hardware").joinpath(PROFILES_FILE).read_text()
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise ConfigError(f"{PROFILES_FILE}: needs a `profiles:` mapping")
    return data


def _load(name: str, entry: dict[str, Any]) -> HardwareProfile:
    try:
        profile = HardwareProfile.model_validate(entry)
    except ValidationError as exc:
        raise ConfigError(f"{PROFILES_FILE}: profile {name!r}: {exc.errors()[0]['msg']}") from exc
    if profile.name != name:
        raise ConfigError(f"{PROFILES_FILE}: profile key {name!r} has name {profile.name!r}")
    return profile


#: the fitted decode terms a profile without its own may borrow from `fit_from` (one decode line:
#: efficiency and fixed step are fitted together, so they travel together)
DECODE_FIT = ("decode_efficiency", "step_overhead_ms", "eager_step_overhead_ms", "stream_step_overhead_ms")


def _borrow(profile: HardwareProfile, profiles: dict[str, HardwareProfile]) -> HardwareProfile:
    """`profile` with the decode terms it has not fitted taken from its `fit_from` profile, named in
    `borrowed`; as it is when it names none or has fitted its decode efficiency itself."""
    if profile.fit_from is None or profile.decode_efficiency is not None:
        return profile
    source = profiles.get(profile.fit_from)
    if source is None or source.fit_from is not None:
        raise ConfigError(f"{PROFILES_FILE}: profile {profile.name!r}: fit_from {profile.fit_from!r} is not a profile "
                          "with a fit of its own")
    taken = {term: getattr(source, term) for term in DECODE_FIT
             if getattr(profile, term) is None and getattr(source, term) is not None}
    return profile.model_copy(update={**taken, "borrowed": list(taken)})


@lru_cache(maxsize=1)
def _loaded() -> dict[str, HardwareProfile]:
    own = {name: _load(name, entry) for name, entry in _raw()["profiles"].items()}
    return {name: _borrow(profile, own) for name, profile in own.items()}


def load_profiles() -> dict[str, HardwareProfile]:
    """Every built-in profile by name."""
    return {name: profile.model_copy(deep=True) for name, profile in _loaded().items()}


def get_profile(name: str) -> HardwareProfile:
    """The built-in profile `name`; ConfigError naming the known ones otherwise."""
    loaded = _loaded()
    if name not in loaded:
        raise ConfigError(
            f"unknown hardware profile {name!r}; known: {', '.join(sorted(loaded))}, or 'auto'"
        )
    return loaded[name].model_copy(deep=True)


def calibration_points(profile_name: str) -> dict[str, list[dict[str, Any]]]:
    """The published measurements a profile's efficiencies are fitted from (may be empty)."""
    return dict(_raw().get("calibration", {}).get(profile_name, {}))


# ---------------------------------------------------------------- --hardware auto


def _match(gpu: GpuIdentity) -> str | None:
    """Built-in profile name for a detected GPU, keyed on compute capability, then memory."""
    cc = gpu.compute_capability
    gb = (gpu.total_memory_gb or 0.0) * GIB_IN_GB
    name = gpu.name.upper()
    if cc == "sm_121" or "GB10" in name:
        return "spark"
    if cc == "sm_90":
        # H200 shows ~140 GiB, H100 80 GB ~80 GiB (H100 NVL 94 GB also lands on h100).
        return "h200" if gb > 100 or "H200" in name else "h100"
    if cc == "sm_100":
        return "b200"
    if cc == "sm_120" and (gb > 90 or "RTX PRO 6000" in name):
        return "rtx-pro-6000"
    return None


def _cpu_profile(device: DeviceIdentity) -> HardwareProfile:
    base = _loaded()["cpu"]
    scale = device.cpu_cores / (base.nominal_cores or device.cpu_cores)
    return base.model_copy(
        update={
            "description": f"this CPU host: {device.cpu_model or 'unknown CPU'}, {device.cpu_cores} cores "
            f"(bandwidth and FLOPS are rough generic figures)",
            "memory_gb_per_gpu": round(device.memory_total_gb * GIB_IN_GB, 2),
            "bf16_tflops": round(base.bf16_tflops * scale, 4),
            "cpu_cores": device.cpu_cores,
            "detected_on": device.hostname,
            "sources": [*base.sources, f"memory and cores detected on {device.hostname}"],
        },
        deep=True,
    )


def _host_profile(device: DeviceIdentity) -> HardwareProfile:
    """The built-in profile this host is, with its own GPU count and memory per GPU (a CPU host:
    the cpu profile with its memory and cores); ConfigError for a GPU no profile describes."""
    if not device.gpus:
        return _cpu_profile(device)
    first = device.gpus[0]
    matched = _match(first)
    if matched is None:
        raise ConfigError(
            f"no built-in profile for {first.name} ({first.compute_capability}); "
            f"pass --hardware NAME (known: {', '.join(sorted(_loaded()))})"
        )
    same = [g for g in device.gpus if g.name == first.name]
    profile = get_profile(matched)
    update: dict[str, Any] = {"gpus_per_node": len(same), "detected_on": device.hostname}
    if first.total_memory_gb:
        update["memory_gb_per_gpu"] = round(first.total_memory_gb * GIB_IN_GB, 2)
    update["sources"] = [*profile.sources, f"GPU count and memory detected on {device.hostname}"]
    return profile.model_copy(update=update, deep=True)


def resolve_hardware(name: str, device: DeviceIdentity | None) -> HardwareProfile:
    """`name` as a built-in profile, or with "auto" the profile that matches `device`.

    auto: GB10 / sm_121 -> spark; sm_90 over 100 GB -> h200, else h100; sm_100 -> b200;
    sm_120 with ~96 GB -> rtx-pro-6000; no GPU -> the cpu profile with this host's memory and
    core count. The detected GPU count and memory replace the profile's, and so they do for a
    named profile that is what this host is (a one-GPU H200 is `h200` with 1 GPU per node, not
    the 8-GPU HGX board the built-in figures describe). Without a device a named profile is
    the built-in one.
    """
    if name == "auto":
        if device is None:
            raise ConfigError("--hardware auto needs a device probe; run `autotune probe` or pass --hardware NAME")
        return _host_profile(device)
    profile = get_profile(name)
    if device is None:
        return profile
    try:
        host = _host_profile(device)
    except ConfigError:  # a GPU no profile describes is not the named one
        return profile
    return host if host.name == profile.name else profile


def is_this_host(profile: HardwareProfile, device: DeviceIdentity) -> bool:
    """Whether `profile` is what this host is (so this host's probe results speak for it)."""
    try:
        return _host_profile(device).name == profile.name
    except ConfigError:
        return False


def describe(profile: HardwareProfile) -> str:
    """One line saying what a node of `profile` is and where the figures come from."""
    return describe_node(profile.name, profile.gpus_per_node, profile.memory_gb_per_gpu, profile.detected_on,
                         profile.cpu_cores)


def describe_node(name: str, gpus_per_node: int, memory_gb: float, detected_on: str | None,
                  cpu_cores: int | None = None) -> str:
    """`h200: 1 GPU per node, 150.1 GB (139.8 GiB) each, detected on this host`, or the built-in
    profile's figures, said as such (memory in GB = 1e9 bytes, as the planner counts, and in GiB,
    as the driver and vLLM's logs say)."""
    size = f"{memory_gb:.1f} GB ({memory_gb / GIB_IN_GB:.1f} GiB)"
    where = "detected on this host" if detected_on else "the built-in profile's figures, not this host's"
    if gpus_per_node == 0:
        cores = f", {cpu_cores} cores" if cpu_cores else ""
        return f"{name}: no GPU, {size} of host memory{cores}, {where}"
    plural = "s" if gpus_per_node != 1 else ""
    return f"{name}: {gpus_per_node} GPU{plural} per node, {size} each, {where}"


# ---------------------------------------------------------------- parallel layout


def _int_param(space: SearchSpace, candidate: Candidate, knob: str) -> int | None:
    value = candidate.params.get(knob, space.fixed.get(knob))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{knob} must be a positive integer, got {value!r}")
    return value


def parallel_layout(
    space: SearchSpace, candidate: Candidate, hardware: HardwareProfile, nodes: int
) -> tuple[int, int]:
    """(tensor_parallel_size, pipeline_parallel_size) for `candidate` on `nodes` boxes.

    Rule: sizes the space and candidate leave unset take the engine's default (1) on one node;
    on several nodes they fill the cluster with tensor parallelism (on a Spark cluster TP =
    nodes). The study must launch with the returned sizes when the space leaves them unset.
    One node: TP x PP <= its GPUs (a multi-GPU host may serve on a subset).
    Several nodes: TP x PP == nodes x GPUs per node (every box takes part; a partial layout would
    leave boxes idle and let the executor place ranks unpredictably).
    A CPU host (no GPU) counts as one device.
    """
    if nodes < 1:
        raise ConfigError(f"--nodes must be at least 1, got {nodes}")
    per_node = max(hardware.gpus_per_node, 1)
    total = nodes * per_node
    tp = _int_param(space, candidate, "tensor_parallel_size")
    pp = _int_param(space, candidate, "pipeline_parallel_size")
    if nodes == 1:
        tp, pp = tp or 1, pp or 1
    elif tp is None and pp is None:
        tp, pp = total, 1
    elif tp is None:
        tp = max(total // pp, 1)
    elif pp is None:
        pp = max(total // tp, 1)
    used = tp * pp
    ok = used == total if nodes > 1 else used <= total
    if not ok:
        devices = "GPU" if hardware.gpus_per_node else "device"
        need = "" if nodes > 1 else " at most"
        raise ConfigError(
            f"--nodes {nodes} on {hardware.name} gives {total} {devices}{'s' if total != 1 else ''} but "
            f"tensor_parallel_size={tp} x pipeline_parallel_size={pp} uses {used}; "
            f"make their product{need} {total}"
            + (f" ({describe(hardware)})" if hardware.detected_on else "")
        )
    refusal = tensor_split_refusal(space.model.n_heads, space.model.n_kv_heads, tp)
    if refusal:
        raise ConfigError(refusal)
    return tp, pp


def tensor_split_refusal(n_heads: int | None, n_kv_heads: int | None, tp: int) -> str | None:
    """Why vLLM refuses to split these heads over `tp` ranks (None: it does, or the heads are not
    known). Attention heads must divide evenly; KV heads either divide or are replicated over the
    ranks, so one of the two counts must divide the other."""
    if n_heads and n_heads % tp:
        return (f"{n_heads} attention heads do not split over tensor_parallel_size={tp} "
                "(vLLM needs the heads divisible by it)")
    if n_kv_heads and n_kv_heads % tp and tp % n_kv_heads:
        return f"{n_kv_heads} KV heads and tensor_parallel_size={tp}: one must divide the other for vLLM"
    return None


def divisible_layouts(n_heads: int | None, n_kv_heads: int | None, gpus: int) -> list[tuple[int, int]]:
    """(tensor_parallel_size, pipeline_parallel_size) pairs that use all `gpus` and whose TP splits
    these heads (tensor_split_refusal), the widest TP first."""
    return [(tp, gpus // tp) for tp in range(gpus, 0, -1)
            if gpus % tp == 0 and tensor_split_refusal(n_heads, n_kv_heads, tp) is None]
