"""The planner's batch term (issue 34 item 3): a decode step at batch B reads the weights once plus
B streams' KV, pays a per-stream cost, and meets the compute roofline at large B."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.planner.prior import planner_order
from autotune.hardware.profiles import get_profile
from autotune.models import BatchLimit, Candidate, DecodeBound, ModelSpec, Objective, SearchSpace, Workload
from autotune.planner.calibration import calibrate
from autotune.planner.roofline import DECODE_PROMPT_TOKENS, PlanEstimate, estimate
from autotune.space.candidates import load_space

ROOT = Path(__file__).resolve().parent.parent

DENSE_8B = dict(
    name="dense-8b", path="does-not-exist", params_total_b=8.0, weight_bits=16, n_layers=32,
    hidden_size=4096, n_heads=32, n_kv_heads=8, head_dim=128,
)

# Measured on 2026-12-03 on one lent H200, vLLM 0.33.0, Llama-3.1-8B's shape with dummy weights
# (benchmarks/spaces/vllm-llama3.1-8b-dense.yaml; docs/measurements.md, "2026-12-03 (evening, lent
# H200)"): online fp8 weights, decode tok/s at one stream, output tok/s of a wave of 8 and of 32.
# Held out: the per-stream cost is fitted on the bf16 rows of the same table (hardware_profiles.yaml).
FP8_HELD_OUT = [
    # launcher, decode (1 stream), c8, c32
    ("process", 292.2, 2036.0, 6042.0),
    ("ray", 291.2, 2114.0, 5969.0),
]


def space_with(concurrency: list[int], model: dict | None = None, objective: str = "decode_tps_geomean",
               decode_max_tokens: int = 128, **fixed) -> SearchSpace:
    return SearchSpace(
        name="t", engine="vllm", model=ModelSpec(**(model or DENSE_8B)), knobs=[],
        fixed={"max_model_len": 8192, **fixed},
        workload=Workload(concurrency=concurrency, decode_max_tokens=decode_max_tokens),
        objective=Objective(metric=objective),
    )


def run(space: SearchSpace, hardware: str = "h200", **params) -> PlanEstimate:
    return estimate(space, Candidate(engine=space.engine, params=params), get_profile(hardware), 1)


def test_a_batch_step_adds_each_streams_kv_and_the_per_stream_cost():
    est = run(space_with([1, 8]))
    h200 = get_profile("h200")
    assert h200.stream_step_overhead_ms is not None
    one = sum(v for k, v in est.decode_terms_ms.items() if k is not DecodeBound.COMPUTE)
    wave = est.streams.waves[8]
    assert wave.batch == 8 and wave.limit is BatchLimit.REQUESTS
    # weights once, 8 streams' KV, the fixed step once, 7 added streams' cost
    expected = one + 7 * est.decode_terms_ms[DecodeBound.KV_READ] + 7 * h200.stream_step_overhead_ms
    assert wave.step_ms == pytest.approx(expected, rel=1e-3)
    assert wave.output_tps == pytest.approx(8 * 1000 / wave.step_ms, rel=1e-3)
    assert est.predicted()["output_tps_c8"] == wave.output_tps


def test_a_larger_batch_gives_more_output_but_less_per_stream():
    est = run(space_with([1, 8, 32]))
    c8, c32 = est.streams.waves[8], est.streams.waves[32]
    assert est.decode_tps < c8.output_tps < c32.output_tps
    assert c32.output_tps / 32 < c8.output_tps / 8 < est.decode_tps


def test_a_kv_pool_that_holds_fewer_than_n_streams_caps_the_batch():
    # a small budget: the pool left after 16 GB of weights holds a handful of 8,320-token requests
    est = run(space_with([1, 32], decode_max_tokens=8192 - DECODE_PROMPT_TOKENS, max_model_len=8448,
                         gpu_memory_utilization=0.2))
    request = DECODE_PROMPT_TOKENS + 8192 - DECODE_PROMPT_TOKENS
    assert est.streams.pool_streams == est.kv_pool_tokens // request
    assert 1 <= est.streams.pool_streams < 32
    wave = est.streams.waves[32]
    assert wave.batch == est.streams.pool_streams and wave.limit is BatchLimit.KV_POOL


def test_max_num_seqs_caps_the_batch_and_none_leaves_it_to_the_requests():
    capped = run(space_with([1, 32]), max_num_seqs=4).streams.waves[32]
    free = run(space_with([1, 32])).streams.waves[32]
    assert capped.batch == 4 and capped.limit is BatchLimit.ENGINE
    assert free.batch == 32 and free.output_tps > capped.output_tps


def test_a_large_batch_on_slow_math_is_compute_bound():
    slow_math = get_profile("h200").model_copy(update={"bf16_tflops": 20.0})
    est = estimate(space_with([1, 256]), Candidate(engine="vllm", params={}), slow_math, 1)
    wave = est.streams.waves[256]
    # 256 x 2 x 8e9 FLOPs at 20 TFLOPS = 204.8 ms, far above the step's reads
    assert wave.bound is DecodeBound.COMPUTE
    assert wave.step_ms == pytest.approx(256 * 2 * 8e9 / 20e12 * 1000, rel=1e-3)
    assert est.decode_bound is not DecodeBound.COMPUTE  # one stream stays bound by its reads


def test_no_concurrency_levels_leave_the_estimate_as_it_was():
    est = run(space_with([1]))
    assert est.streams is None
    assert set(est.predicted()) == {"memory_gb", "decode_tps", "prefill_tps"}
    assert "streams" not in est.model_dump_json()


def test_an_output_tps_objective_orders_by_the_prediction_at_its_level():
    space = SearchSpace.model_validate({
        "name": "t", "engine": "vllm", "model": DENSE_8B, "fixed": {"max_model_len": 8192},
        "knobs": [{"name": "max_num_seqs", "values": [None, 4], "default": None},
                  {"name": "quantization", "values": [None, "fp8"], "default": None}],
        "workload": {"concurrency": [1, 32]},
        "objective": {"metric": "output_tps_c32"},
    })
    capped = Candidate(engine="vllm", params={"max_num_seqs": 4, "quantization": "fp8"})
    free = Candidate(engine="vllm", params={"max_num_seqs": None, "quantization": None})
    h200 = get_profile("h200")
    # at one stream max_num_seqs changes nothing and fp8 weights read half the bytes: capped would go first
    assert estimate(space, capped, h200, 1).decode_tps > 1.2 * estimate(space, free, h200, 1).decode_tps
    assert planner_order(space, h200, 1)([capped, free]) == [free, capped]
    single = space.model_copy(update={"objective": Objective(metric="decode_tps_geomean")})
    assert planner_order(single, h200, 1)([capped, free])[0] == capped


def test_the_h200_profile_carries_the_fit_of_its_bf16_rows():
    assert get_profile("h200").stream_step_overhead_ms == pytest.approx(
        calibrate("h200")["stream_step_overhead_ms"], abs=0.0005)
    assert get_profile("cpu").stream_step_overhead_ms is None  # nothing measured: llama.cpp serves one at a time


def test_the_h200_fit_predicts_the_held_out_fp8_waves_within_25_percent():
    space = load_space(str(ROOT / "benchmarks" / "spaces" / "vllm-llama3.1-8b-dense.yaml"))
    # the shape's config.json sizes the LM head that online fp8 keeps at 16 bits
    shape = space.model.model_copy(update={"path": str(ROOT / "model_shapes" / "llama3.1-8b")})
    space = space.model_copy(update={"model": shape})
    fp8 = Candidate(engine="vllm", params={**space.baseline_params(), "quantization": "fp8"})
    est = estimate(space, fp8, get_profile("h200"), 1)
    for launcher, _, c8, c32 in FP8_HELD_OUT:
        for level, measured in ((8, c8), (32, c32)):
            error = est.streams.waves[level].output_tps / measured - 1
            assert abs(error) <= 0.25, (launcher, level, error)


def test_llamacpp_serves_one_request_at_a_time():
    space = SearchSpace(
        name="t", engine="llamacpp",
        model=ModelSpec(name="g", path="does-not-exist", params_total_b=0.27, weight_bits=7.5, n_layers=18,
                        hidden_size=640, n_heads=4, n_kv_heads=1, head_dim=256, context_max=32768),
        knobs=[], fixed={"n_ctx": 2048}, workload=Workload(concurrency=[1, 4]),
    )
    est = estimate(space, Candidate(engine="llamacpp", params={}), get_profile("cpu"), 1)
    wave = est.streams.waves[4]
    assert wave.batch == 1 and wave.limit is BatchLimit.ENGINE
    assert wave.output_tps == est.decode_tps


def test_the_plan_table_shows_a_column_per_wave_and_marks_a_capped_batch():
    from rich.console import Console

    from autotune.output.plan_text import render_plan_table
    from autotune.planner.roofline import plan
    from autotune.space.candidates import enumerate_candidates

    space = SearchSpace.model_validate({
        "name": "t", "engine": "vllm", "model": DENSE_8B, "fixed": {"max_model_len": 8192},
        "knobs": [{"name": "max_num_seqs", "values": [None, 4], "default": None}],
        "workload": {"concurrency": [1, 8]},
    })
    report = plan(space, list(enumerate_candidates(space)), get_profile("h200"), 1)
    console = Console(record=True, width=220)
    console.print(render_plan_table(report))
    text = console.export_text()
    header = next(line for line in text.splitlines() if "TPxPP" in line)
    assert header.index(" bound ") < header.index(" c8 ") < header.index(" prefill ")
    assert "(B=4)" in text
    assert report.kept[0].streams.waves[8].limit is BatchLimit.REQUESTS
