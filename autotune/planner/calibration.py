"""Fitting a hardware profile's efficiencies to published measurements (hardware_profiles.yaml).

The planner's roofline (efficiency 1, no step overhead) is held against each calibration point:
decode and prefill efficiency are the median measured / predicted ratio, or, from `decode_line`
points (one-stream decode of shapes whose weight reads differ), decode efficiency and the fixed
step time together as the line through measured step time against memory time; the all-reduce step comes
from decode at TP1 and TP=n on n nodes, the fixed per-step time from what a small model's
measured step takes beyond its memory time, the per-stream step cost from how much longer a step
of a wave of N streams takes than a step of one, beyond the N streams' KV reads.
"""

from __future__ import annotations

import statistics
from typing import Any

from autotune.errors import ConfigError
from autotune.hardware.profiles import calibration_points, get_profile
from autotune.models import Candidate, DecodeBound, HardwareProfile, ModelSpec, SearchSpace, Workload
from autotune.planner.roofline import estimate


def bare_roofline(hardware: HardwareProfile) -> HardwareProfile:
    """The profile with its fitted numbers taken out: efficiency 1, no fixed step time."""
    return hardware.model_copy(update={
        "decode_efficiency": 1.0, "prefill_efficiency": 1.0, "step_overhead_ms": None, "eager_step_overhead_ms": None,
    })


def fit_efficiency(pairs: list[tuple[float, float]]) -> float:
    """Median of measured / predicted over (predicted_roofline_tps, measured_tps) pairs."""
    ratios = [measured / predicted for predicted, measured in pairs if predicted > 0 and measured > 0]
    if not ratios:
        raise ValueError("fit_efficiency needs at least one pair with positive numbers")
    return statistics.median(ratios)


def fit_step_line(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """(decode efficiency, fixed step ms) from (memory time at efficiency 1 in ms, measured step ms)
    pairs: the least-squares line step = memory / efficiency + fixed. The memory times must differ
    (at least by a fifth) for the slope to mean anything."""
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    if len(pairs) < 2 or min(xs) <= 0 or max(xs) < 1.2 * min(xs):
        raise ValueError("fit_step_line needs points whose memory times differ by at least a fifth")
    slope, intercept = statistics.linear_regression(xs, ys)
    if slope <= 0 or intercept < 0:
        raise ValueError(f"fit_step_line: the line step = {slope:.3f} x memory + {intercept:.3f} ms has no meaning")
    return 1 / slope, intercept


def fit_allreduce_step_us(single_tps: float, tp_tps: float, tp: int, n_layers: int) -> float:
    """One ring all-reduce step between nodes, in microseconds, from decode at TP1 and at TP=tp
    on tp nodes: 1/tp_tps = 1/(tp x single_tps) + 2 x n_layers x 2(tp-1) x step. Assumes the
    memory time splits evenly over the TP ranks."""
    comm_s = 1 / tp_tps - 1 / (tp * single_tps)
    return comm_s / (2 * n_layers * 2 * (tp - 1)) * 1e6


def _calibration_case(point: dict[str, Any]) -> tuple[SearchSpace, Candidate, int]:
    params = point.get("params", {})
    waves = sorted(int(level) for level in point.get("output_tps", {}))
    workload = Workload(**point.get("workload", {}), concurrency=[1, *waves])
    space = SearchSpace(
        name=point["name"], engine=point.get("engine", "vllm"), model=ModelSpec(**point["model"]),
        fixed=params, knobs=[], workload=workload,
    )
    return space, Candidate(engine=space.engine, params=params), int(point.get("nodes", 1))


def _on_cores(hardware: HardwareProfile, point: dict[str, Any]) -> HardwareProfile:
    """A CPU calibration point measured on `cores` cores: the profile's compute scaled as
    `--hardware auto` scales it on such a host."""
    cores = point.get("cores")
    if not cores or not hardware.nominal_cores:
        return hardware
    return hardware.model_copy(update={"bf16_tflops": hardware.bf16_tflops * cores / hardware.nominal_cores,
                                       "cpu_cores": cores})


def calibrate(profile_name: str) -> dict[str, float | None]:
    """Refit a profile's decode/prefill efficiency and all-reduce step from its calibration points
    in hardware_profiles.yaml; None where it has no points."""
    hardware = get_profile(profile_name)
    points = calibration_points(profile_name)
    bare = bare_roofline(hardware)
    if points.get("decode_line") and (points.get("decode") or points.get("step_overhead")):
        raise ConfigError(f"calibration of {profile_name!r}: decode_line fits decode efficiency and the fixed step "
                          "together; give it no decode or step_overhead points beside")
    out: dict[str, float | None] = {}
    for kind, attr in (("decode", "decode_tps"), ("prefill", "prefill_tps")):
        pairs = []
        for point in points.get(kind, []):
            space, candidate, nodes = _calibration_case(point)
            predicted = getattr(estimate(space, candidate, _on_cores(bare, point), nodes), attr)
            if predicted is None:
                raise ConfigError(f"calibration point {point['name']!r}: the roofline is unknown")
            pairs.append((predicted, float(point["measured_tps"])))
        out[f"{kind}_efficiency"] = fit_efficiency(pairs) if pairs else None
    steps = [
        fit_allreduce_step_us(p["single_tps"], p["tp_tps"], p["tp"], p["n_layers"])
        for p in points.get("allreduce", [])
    ]
    out["allreduce_step_us"] = statistics.median(steps) if steps else None
    if points.get("decode_line"):
        out["decode_efficiency"], out["step_overhead_ms"] = fit_step_line(
            [step_line_pair(point, bare) for point in points["decode_line"]])
    # fixed per-step time: what a small model's measured step takes beyond its memory time
    fitted = bare.model_copy(update={"decode_efficiency": out["decode_efficiency"] or 1.0})
    for kind in ("step_overhead", "eager_step_overhead"):
        if kind == "step_overhead" and points.get("decode_line"):
            continue
        overheads = []
        for point in points.get(kind, []):
            space, candidate, nodes = _calibration_case(point)
            predicted = estimate(space, candidate, fitted, nodes).decode_tps
            if predicted is None:
                raise ConfigError(f"calibration point {point['name']!r}: the roofline is unknown")
            overheads.append(1000 / float(point["measured_tps"]) - 1000 / predicted)
        out[f"{kind}_ms"] = statistics.median(overheads) if overheads else None
    shipped_steps = fitted.model_copy(update={"step_overhead_ms": out["step_overhead_ms"],
                                              "eager_step_overhead_ms": out["eager_step_overhead_ms"]})
    per_stream = [ms for point in points.get("stream_step_overhead", []) for ms in stream_overheads_ms(point, shipped_steps)]
    out["stream_step_overhead_ms"] = statistics.median(per_stream) if per_stream else None
    return out


def step_line_pair(point: dict[str, Any], bare: HardwareProfile) -> tuple[float, float]:
    """(memory time at efficiency 1, measured step time beyond the TP all-reduce), in ms, of a
    one-stream decode point."""
    space, candidate, nodes = _calibration_case(point)
    terms = estimate(space, candidate, bare, nodes).decode_terms_ms
    if DecodeBound.WEIGHTS not in terms:
        raise ConfigError(f"calibration point {point['name']!r}: the roofline is unknown")
    memory = terms[DecodeBound.WEIGHTS] + terms.get(DecodeBound.KV_READ, 0.0)
    return memory, 1000 / float(point["measured_tps"]) - terms.get(DecodeBound.COMMUNICATION, 0.0)


def stream_overheads_ms(point: dict[str, Any], hardware: HardwareProfile) -> list[float]:
    """Per wave of N streams in `point`: (measured step at N - measured step at one - what the
    planner adds for N - 1 more streams without the per-stream cost) / (N - 1), in ms."""
    space, candidate, nodes = _calibration_case(point)
    est = estimate(space, candidate, hardware.model_copy(update={"stream_step_overhead_ms": None}), nodes)
    if est.decode_tps is None or est.streams is None or not est.streams.waves:
        raise ConfigError(f"calibration point {point['name']!r}: the roofline is unknown")
    one_ms = 1000 / float(point["measured_tps"])
    out = []
    for level, measured in point["output_tps"].items():
        wave = est.streams.waves[int(level)]
        added_ms = wave.step_ms - sum(v for k, v in est.decode_terms_ms.items() if k is not DecodeBound.COMPUTE)
        out.append((1000 * wave.batch / float(measured) - one_ms - added_ms) / (wave.batch - 1))
    return out
