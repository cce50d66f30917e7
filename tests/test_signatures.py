"""The failure-signature table against log excerpts in tests/logs/.

A fixture named `<failure_class>__<what>.log` must classify as that class; `clean__*.log` must
classify as None. Each file's first line says whether it is a recording (and of what: this CPU
machine, a lent H200, a public issue) or hand-written around vLLM's exact error strings.

Two vLLM versions: 0.26.0's corpus is tests/logs/ itself (with the hand-written and llama.cpp
logs), 0.33.0's recordings are in tests/logs/v0.33.0/ (its README says which cases could not be
recorded, and why). Every test that reads a vLLM log runs on both versions; where a version has
no recording of the case, the test says so as a skip.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.errors import ProbeError
from autotune.engines.signatures import (
    GOLDEN_MISMATCH_MARKER,
    PROBE_TIMEOUT_MARKER,
    SIGNATURES,
    STARTUP_TIMEOUT_MARKER,
    UNCLASSIFIED,
    classify,
    classify_file,
    knob_for_flag,
    signature_table,
)

LOGS = Path(__file__).parent / "logs"
#: vLLM version -> the folder of its logs
CORPORA: dict[str, Path] = {"0.26.0": LOGS, "0.33.0": LOGS / "v0.33.0"}
VERSIONS = list(CORPORA)
FIXTURES = [p for folder in CORPORA.values() for p in sorted(folder.glob("*__*.log"))]


def version_of(path: Path) -> str:
    return next(v for v, folder in CORPORA.items() if path.parent == folder)


def label(path: Path) -> str:
    return f"{version_of(path)}/{path.name}"

# classes that only autotune's own code writes (markers), tested without a fixture below
OWN_MARKERS = {"probe_timeout", "silent_miscompute"}


def expected_class(path: Path) -> str | None:
    name = path.name.split("__")[0]
    return None if name == "clean" else name


def engine_of(path: Path) -> str | None:
    return "llamacpp" if "llamacpp" in path.name else "vllm" if "vllm" in path.name else None


def read(name: str, version: str = VERSIONS[0]) -> str:
    """A log of one version's corpus. A hand-written log, or one quoted from a public issue, has no
    version of its own and serves every version; a case a version has no recording of is a skip
    that says so."""
    path = CORPORA[version] / name
    if not path.exists() and not (LOGS / name).read_text().startswith("# recording: scripts/"):
        path = LOGS / name
    if not path.exists():
        pytest.skip(f"no vLLM {version} recording of {name} (tests/logs/v{version}/README.md says why)")
    return path.read_text()


@pytest.mark.parametrize("path", FIXTURES, ids=[label(p) for p in FIXTURES])
def test_fixture_classifies_as_named(path: Path) -> None:
    want = expected_class(path)
    for engine in {None, engine_of(path)}:
        info = classify_file(path, engine=engine)
        assert (info.failure_class if info else None) == want, f"engine={engine}: {info}"
    if want is None:
        return
    info = classify_file(path)
    assert "\n" not in info.message and len(info.message) <= 240
    assert info.message.startswith(f"{want}: ")
    assert info.evidence, "a failure carries the lines that show it"
    assert len(info.evidence) <= 6
    # the evidence is taken from the log itself, not paraphrased
    log_lines = {line.rstrip() for line in path.read_text().splitlines()}
    assert all(line in log_lines or line.endswith("...") for line in info.evidence)


@pytest.mark.parametrize("path", FIXTURES, ids=[label(p) for p in FIXTURES])
def test_signatures_match_the_message_never_the_file_line_prefix(path: Path) -> None:
    """vLLM moves its log calls between versions (0.26.0 `[core.py:1330]`, 0.33.0 `[core.py:1584]`):
    the same log with every `[file.py:NNN]` moved elsewhere, or in the older `file.py:NNN]` form,
    classifies alike."""
    text = path.read_text()
    want = classify(text, engine=engine_of(path))
    for moved in (re.sub(r"\[[\w.]+\.py:\d+\]", "[elsewhere.py:1]", text), re.sub(r"\[([\w.]+\.py:\d+\])", r"\1", text)):
        got = classify(moved, engine=engine_of(path))
        assert (got.failure_class if got else None) == (want.failure_class if want else None)
        assert (got.implicates if got else None) == (want.implicates if want else None)


def test_no_signature_names_a_log_call_site() -> None:
    """A row that spelled `core.py:1330` (or any `file.py:` call site) would break on the next release."""
    for sig in SIGNATURES:
        assert ".py:" not in sig.pattern.pattern, sig.failure_class


def test_every_signature_class_has_a_fixture() -> None:
    covered = {expected_class(p) for p in FIXTURES}
    missing = {s.failure_class for s in SIGNATURES} - covered - OWN_MARKERS
    assert not missing, f"add a tests/logs/<class>__*.log excerpt for: {sorted(missing)}"


def test_capabilities_section_6_substrings_are_matched() -> None:
    # one string per row of the reference table (substring column), each must hit a row
    rows = [
        "ModuleNotFoundError: No module named 'flashinfer'",
        "No valid attention backend found for cuda with AttentionSelectorConfig(head_size=64, kv_cache_dtype=nvfp4)",
        "ValueError: Selected backend FLASHMLA is not valid for this configuration. Reason: ['compute capability not supported']",
        "ValueError: Selected backend FLASH_ATTN is not valid for this configuration. Reason: ['kv_cache_dtype not supported']",
        "ValueError: --kv-cache-dtype nvfp4 requires sm100f",
        "ValueError: nvfp4 KV cache is not supported with MLA (Multi-head Latent Attention) backends.",
        "FlashInfer backend currently does not support attention sinks, please use trtllm on blackwell",
        "use_fp4_indexer_cache requires Blackwell datacenter GPUs (sm_10x)",
        "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'",
        "error   : Feature '.tile::gather4' not supported on .target 'sm_121a'",
        "Instruction 'cvt with .e2m1x2' not supported on .target 'sm_121'",
        "This kernel only supports sm[100, 120)",
        "cutlass_gemm_caller.cuh:61 Invalid status",
        "RuntimeError: [FP4 gemm Runner] Failed to run cutlass FP4 gemm on sm120. Error: Error Internal",
        "RuntimeError: No compiled cutlass_scaled_mm for CUDA device capability: 121. Required capability: 90 or 100",
        "CUDA error: no kernel image is available for execution on the device",
        "cudaErrorNoKernelImageForDevice",
        "RuntimeError: kernel does not support current device cuda",
        "TllmGenFmhaRunner: Unsupported architecture",
        "NotImplementedError: No Int8 MoE backend supports the deployment configuration.",
        "ValueError: moe_backend='deep_gemm' is not supported for Mxfp4 MoE. Expected one of ['marlin']",
        "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER",
        "RuntimeError: BatchPrefillWithPagedKVCache failed with error invalid resource handle",
        "RuntimeError: FlashInfer requires GPUs with sm75 or higher",
        "NVRM: Out of memory [NV_ERR_NO_MEMORY]",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",
        "TimeoutError: RPC call to sample_tokens timed out.",
        "NCCL WARN Call to ibv_create_qp failed: unhandled system error",
        "Layer model.layers.3.indexer.k_cache: page size is not divisible by the maximum page size and cannot be padded.",
        "ValueError: Unknown vLLM environment variable detected: VLLM_MXFP4_BACKEND",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
    ]
    for text in rows:
        assert classify(text, engine="vllm") is not None, text


IMPLICATED = {
        "kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2.log": ["attention_backend", "kv_cache_dtype"],
        "kv_dtype_unsupported__vllm_nvfp4_no_backend.log": ["kv_cache_dtype"],
        "kv_dtype_arch_gated__vllm_nvfp4_sm100f.log": ["kv_cache_dtype"],
        "backend_arch_gated__vllm_flashmla_sm121.log": ["attention_backend"],
        "bad_flag__vllm_invalid_choice.log": ["kv_cache_dtype"],
        "bad_flag__vllm_cacheconfig_literal.log": ["kv_cache_dtype"],
        "kv_quant_needs_flash_attn__llamacpp_q4_0_kv_no_flash_attn.log": ["type_v", "flash_attn"],
        # environment and memory failures never prune a knob value
        "missing_dependency__vllm_flashinfer.log": [],
        "oom__vllm_cuda_oom.log": [],
        "oom__llamacpp_kv_cache_too_large.log": [],
        "startup_timeout__vllm_engine_ready.log": [],
        "model_file_missing__llamacpp.log": [],
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", list(IMPLICATED))
def test_implicated_knobs_drive_pruning_only_for_config_failures(name: str, version: str) -> None:
    if "llamacpp" in name and version != VERSIONS[0]:
        pytest.skip("a llama.cpp log: one corpus")
    assert classify(read(name, version)).implicates == IMPLICATED[name], name


def test_a_missing_package_names_the_package_and_the_fix() -> None:
    info = classify(read("missing_dependency__vllm_flashinfer.log"))
    assert info.feature == "Python package 'flashinfer'"
    assert "flashinfer-python" in info.fix


#: the assert vLLM's attention layer fails for TRITON_ATTN + fp8_e5m2: one line in 0.26.0, the first
#: of two in 0.33.0 (whose compiled form quotes only the last one)
KV_ASSERT = {"0.26.0": 'assert self.kv_cache_dtype in {"fp8", "fp8_e4m3", "nvfp4"}',
             "0.33.0": 'assert self.kv_cache_dtype in {"fp8", "fp8_e4m3"} or ('}
KV_ASSERT_COMPILED = {"0.26.0": KV_ASSERT["0.26.0"], "0.33.0": 'self.kv_cache_dtype.startswith("nvfp4")'}


@pytest.mark.parametrize("version", VERSIONS)
def test_observed_h200_failures_name_the_feature_and_the_fix(version: str) -> None:
    info = classify(read("kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2.log", version))
    assert any(KV_ASSERT[version] in line for line in info.evidence)
    assert any(line.endswith("AssertionError") for line in info.evidence)
    info = classify(read("kv_dtype_unsupported__vllm_nvfp4_no_backend.log", version))
    assert "kv_cache_dtype=nvfp4" in info.message or "kv_cache_dtype=nvfp4" in " ".join(info.evidence)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_invalid_kv_dtype_is_a_bad_flag_on_the_kv_cache_dtype_knob(version: str) -> None:
    """0.26.0 refuses it in argparse (invalid choice), 0.33.0 in CacheConfig's validator."""
    info = classify(read("bad_flag__vllm_invalid_choice.log", version), engine="vllm")
    assert info.failure_class == "bad_flag" and info.implicates == ["kv_cache_dtype"]
    assert "fp9" in info.message


@pytest.mark.parametrize("version", VERSIONS)
def test_clean_log_is_none(version: str) -> None:
    assert classify("") is None
    assert classify(read("clean__vllm_startup_fp8_kv.log", version), engine="vllm") is None
    assert classify(read("clean__llamacpp_q8_0_kv_flash_attn.log"), engine="llamacpp") is None


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2.log", "device_fault__vllm_illegal_memory_access.log"),
        ("device_fault__vllm_illegal_memory_access.log", "kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2.log"),
        ("missing_dependency__vllm_flashinfer.log", "oom__vllm_cuda_oom.log"),
        ("oom__vllm_cuda_oom.log", "missing_dependency__vllm_flashinfer.log"),
    ],
)
@pytest.mark.parametrize("version", VERSIONS)
def test_earliest_root_cause_wins(first: str, second: str, version: str) -> None:
    info = classify(read(first, version) + read(second, version))
    assert info.failure_class == expected_class(LOGS / first)


@pytest.mark.parametrize("version", VERSIONS)
def test_weak_signature_loses_to_a_later_real_error(version: str) -> None:
    hang = read("nccl_liveness__vllm_shm_broadcast_hang.log")
    assert classify(hang).failure_class == "nccl_liveness"
    later = read("kv_cache_memory__vllm_no_cache_blocks.log", version)
    assert classify(hang + later).failure_class == "kv_cache_memory"


@pytest.mark.parametrize("version", VERSIONS)
def test_engine_filter_skips_rows_of_other_engines(version: str) -> None:
    log = read("kv_dtype_unsupported__vllm_nvfp4_no_backend.log", version)
    assert classify(log, engine="vllm").failure_class == "kv_dtype_unsupported"
    # a llama.cpp log never holds vLLM's selector error; the traceback fallback still sees the crash
    assert classify(log, engine="llamacpp").failure_class == UNCLASSIFIED
    log = read("kv_quant_needs_flash_attn__llamacpp_q4_0_kv_no_flash_attn.log")
    assert classify(log, engine="vllm").failure_class == UNCLASSIFIED


@pytest.mark.parametrize("version", VERSIONS)
def test_unclassified_crash_reports_root_and_outermost_exception(version: str) -> None:
    # recorded: a model directory with config and tokenizer but no weights file
    info = classify(read("unclassified_crash__vllm_missing_weight.log", version))
    assert info.message == "unclassified_crash: RuntimeError: Cannot find any model weights with `<models>/gemma-hf-no-weights`"
    assert info.evidence[0].endswith("RuntimeError: Cannot find any model weights with `<models>/gemma-hf-no-weights`")
    assert "Engine core initialization failed" in info.evidence[-1]
    assert info.implicates == []


def test_an_exception_line_without_a_traceback_is_still_a_crash() -> None:
    """#50: an excerpt that is only the exception line is a failure, never "no known failure"."""
    info = classify("RuntimeError: looks like an error but there is no traceback\n")
    assert info.failure_class == UNCLASSIFIED
    assert info.message == "unclassified_crash: RuntimeError: looks like an error but there is no traceback"


def test_traceback_source_lines_are_not_matched_as_errors() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 3, in f\n'
        '    raise ValueError("CUDA out of memory")  # quoted source, not the error\n'
        "ValueError: something else entirely\n"
    )
    info = classify(log)
    assert info.failure_class == UNCLASSIFIED
    assert info.message.endswith("ValueError: something else entirely")


def test_autotune_markers_classify() -> None:
    assert classify(f"{PROBE_TIMEOUT_MARKER} 5 s").failure_class == "probe_timeout"
    assert classify(f"{STARTUP_TIMEOUT_MARKER} 180 s").failure_class == "startup_timeout"
    assert classify(f"{GOLDEN_MISMATCH_MARKER}: gibberish").failure_class == "silent_miscompute"


def test_knob_for_flag() -> None:
    assert knob_for_flag("--kv-cache-dtype") == "kv_cache_dtype"
    assert knob_for_flag("-tp") == "tensor_parallel_size"
    assert knob_for_flag("cache_dtype") == "kv_cache_dtype"


def test_signature_table_rows() -> None:
    rows = signature_table()
    assert len(rows) == len(SIGNATURES)
    for row in rows:
        assert re.fullmatch(r"[a-z0-9_]+", row["failure_class"])
        assert row["fix"] and row["feature"]
        re.compile(row["pattern"])
        if row["cause"] == "knob":
            assert row["implicates"] or row["knob_from_flag"], f"{row['failure_class']} blames a knob but names none"


def test_classify_file_missing_raises_probe_error(tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match="cannot read log"):
        classify_file(tmp_path / "nope.log")


# ---------------------------------------------------------------- the corpus: recordings vs hand-written

RECORDING = "# recording: "
HAND_WRITTEN = "# hand-written (not a recording): "
ALL_LOGS = [p for folder in CORPORA.values() for p in sorted(folder.glob("*.log"))]


def header(path: Path) -> str:
    return path.read_text().split("\n", 1)[0]


def recordings() -> list[Path]:
    return [p for p in ALL_LOGS if header(p).startswith(RECORDING)]


@pytest.mark.parametrize("path", ALL_LOGS, ids=[label(p) for p in ALL_LOGS])
def test_every_log_says_whether_it_is_a_recording_and_where_from(path: Path) -> None:
    first = header(path)
    assert first.startswith((RECORDING, HAND_WRITTEN)), f"{path.name}: first line must be '{RECORDING}<source>' or '{HAND_WRITTEN}<why>'"
    if first.startswith(RECORDING):
        # a public issue, or the script that recorded it (here, or a stage on a lent GPU machine):
        # machine, engine version, command
        assert re.search(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+|scripts/(gpu/)?[\w]+\.(py|sh)( [\w-]+)? on .+ \d{4}-\d\d-\d\d: ", first), first
    if first.startswith(RECORDING + "scripts/"):
        # our own recordings name the engine version they ran, the one of their corpus for vLLM
        assert re.search(r"vLLM \d+\.\d+\.\d+|llama-cpp-python \d+\.\d+\.\d+", first), first
        if "vllm" in path.name:
            assert f"vLLM {version_of(path)}" in first, first
        # and no path of the machine they were made on: placeholders only
        assert not re.search(r"(?<![\w<>])/(tmp|root|home)/", path.read_text()), path.name


def test_the_corpus_is_mostly_recorded_where_a_recording_can_be_had() -> None:
    recorded = {p.name for p in recordings()}
    # everything llama.cpp fails with on this CPU is recorded here, not written by hand
    assert all(name in recorded for name in (p.name for p in ALL_LOGS if "llamacpp" in p.name))
    assert len(recorded) >= 12


def _strip(line: str) -> str:
    from autotune.engines.signatures import _PREFIX_RE

    return _PREFIX_RE.sub("", line, count=1).strip()


@pytest.mark.parametrize("path", recordings(), ids=[label(p) for p in recordings()])
def test_every_recording_classifies_and_no_known_row_hides_as_unclassified(path: Path) -> None:
    text = path.read_text()
    info = classify(text, engine=engine_of(path))
    if "__" in path.name:
        assert (info.failure_class if info else None) == expected_class(path)
    if info is not None and info.failure_class == UNCLASSIFIED:
        lines = [_strip(line) for line in text.splitlines()[1:]]
        hidden = [(s.failure_class, line) for s in SIGNATURES if s.applies_to(engine_of(path))
                  for line in lines if s.pattern.search(line)]
        assert not hidden, f"{path.name} is unclassified_crash but a row matches: {hidden[:2]}"


# ---------------------------------------------------------------- root causes through wrappers

WRAPPED_PAIRS = [
    ("kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2.log",
     "kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2_compiled.log"),
]
RAY_PREFIX = "(EngineCore_DP0 pid=683) (RayWorkerWrapper pid=861, ip=10.0.0.2) "


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("eager", "compiled"), WRAPPED_PAIRS)
def test_eager_and_compiled_forms_classify_alike(eager: str, compiled: str, version: str) -> None:
    a, b = classify(read(eager, version), engine="vllm"), classify(read(compiled, version), engine="vllm")
    assert a.failure_class == b.failure_class == expected_class(LOGS / eager)
    assert a.implicates == b.implicates == ["attention_backend", "kv_cache_dtype"]
    # the compiled form shows Dynamo's headline and the assert it hides, not Dynamo's hints
    assert any("Data-dependent assertion failed" in line for line in b.evidence)
    assert any(KV_ASSERT_COMPILED[version] in line for line in b.evidence)
    assert not any("Hint:" in line for line in b.evidence) and len(b.evidence) <= 6


ROWED = [p for p in FIXTURES if expected_class(p) not in (None, UNCLASSIFIED)]


@pytest.mark.parametrize("path", ROWED, ids=[label(p) for p in ROWED])
def test_every_row_survives_a_ray_worker_prefix(path: Path) -> None:
    """Ray's worker lines inside vLLM's engine core carry two process prefixes."""
    body = path.read_text().split("\n", 1)[1]
    wrapped = "\n".join(RAY_PREFIX + line for line in body.splitlines())
    want = classify(body, engine=engine_of(path))
    got = classify(wrapped, engine=engine_of(path))
    assert (got.failure_class, got.implicates) == (want.failure_class, want.implicates)


def test_ray_task_error_is_unwrapped_to_the_workers_exception() -> None:
    info = classify(read("unclassified_crash__vllm_ray_worker_in_engine_core_issue27645.log"))
    assert info.message == "unclassified_crash: AssertionError: ('placeholder', 0, 'out_of_band_tensors', [])"
    log = (
        "ray.exceptions.RayTaskError(KeyError): ray::RayWorkerWrapper.execute_method() (pid=12, ip=10.0.0.2)\n"
        "  File \"/x/worker.py\", line 3, in load\n"
        "    params[name]\n"
        "KeyError: 'model.layers.0.self_attn.q_norm.weight'\n"
    )
    assert classify(log).message == "unclassified_crash: KeyError: 'model.layers.0.self_attn.q_norm.weight'"
    info = classify(read("unclassified_crash__vllm_ray_task_error_issue8158.log"))
    assert "RayTaskError(AssertionError)" in info.message


@pytest.mark.parametrize("version", VERSIONS)
def test_an_unknown_assert_under_dynamo_names_the_users_source_line(version: str) -> None:
    compiled = read("kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2_compiled.log", version)
    unknown = compiled.replace(KV_ASSERT_COMPILED[version], "assert intermediate_tensors is not None")
    assert unknown != compiled
    info = classify(unknown, engine="vllm")
    assert info.failure_class == UNCLASSIFIED
    assert info.message.startswith("unclassified_crash: torch._dynamo.exc.Unsupported: Data-dependent assertion failed")
    assert "assert intermediate_tensors is not None" in info.message


def test_flashinfer_sliding_window_refusal_on_sm90_is_a_row() -> None:
    info = classify(read("backend_sliding_window__vllm_flashinfer_sm90_issue48495.log"), engine="vllm")
    assert info.failure_class == "backend_sliding_window"
    assert info.implicates == ["attention_backend"] and "TRITON_ATTN" in info.fix
    line = ("(EngineCore_DP0 pid=9) ERROR 12-01 10:00:00 [core.py:842] NotImplementedError: FlashInfer backend on SM90 "
            "currently crashes with sliding-window attention layers. Use the default attention backend.")
    assert classify("Traceback (most recent call last):\n" + line, engine="vllm").failure_class == "backend_sliding_window"


# ---------------------------------------------------------------- recordings from the lent H200 (2026-12-01)

@pytest.mark.parametrize("version", VERSIONS)
def test_flashinfer_sliding_window_refusal_recorded_eager_and_compiled_classifies_alike(version: str) -> None:
    # eager: the probe forced FLASHINFER; compiled: a trial left the backend to vLLM, which chose it for fp8_e5m2
    eager = classify(read("backend_sliding_window__vllm_flashinfer_sm90_eager.log", version), engine="vllm")
    compiled = classify(read("backend_sliding_window__vllm_fp8_e5m2_backend_chosen_compiled.log", version), engine="vllm")
    assert eager.failure_class == compiled.failure_class == "backend_sliding_window"
    assert eager.implicates == compiled.implicates == ["attention_backend"]
    assert "--attention-backend" not in read("backend_sliding_window__vllm_fp8_e5m2_backend_chosen_compiled.log", version).splitlines()[1]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_traceback_printed_while_autotune_stops_the_engine_is_not_a_crash(version: str) -> None:
    text = read("clean__vllm_probe_fp8_kv_flash_attn_eager.log", version)
    assert classify(text, engine="vllm") is None
    # the same log without the signal line: the EngineDeadError traceback counts again
    without_signal = "\n".join(line for line in text.splitlines() if "received signal=SIGTERM" not in line)
    assert classify(without_signal, engine="vllm").failure_class == UNCLASSIFIED


@pytest.mark.parametrize("version", VERSIONS)
def test_a_request_traceback_while_the_server_stays_up_is_a_serving_failure(version: str) -> None:
    """Recorded: gpt-oss's chat path raised KeyError in a request handler; the server stayed up.
    That is not a crash of the engine (nothing to isolate): the trial says serving_failed, with the
    traceback's root cause as the message. A server that died keeps the crash."""
    from autotune.engines import get_engine
    from autotune.trial.launch import failure_from_log

    log = read("unclassified_crash__vllm_gpt_oss_harmony_request.log", version)
    alive = failure_from_log(get_engine("vllm"), log, "serving_failed", "warm-up request failed: HTTP 500")
    assert alive.failure_class == "serving_failed"
    assert "KeyError: '<|end|>'" in alive.message and alive.implicates == []
    assert any("KeyError: '<|end|>'" in line for line in alive.evidence)
    died = failure_from_log(get_engine("vllm"), log, "crash_during_run", "warm-up request failed")
    assert died.failure_class == UNCLASSIFIED
    # a known row still wins over the fallback, server up or not
    known = read("kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2.log", version)
    assert failure_from_log(get_engine("vllm"), known, "serving_failed", "x").failure_class == "kv_dtype_rejected_at_forward"


def test_a_traceback_without_source_lines_keeps_its_exception() -> None:
    """Python leaves a frame's source line out where it cannot read the file (a `-c` script, a
    zipped or compiled module): the exception follows the frame line directly and is the error."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 3, in <module>\n'
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, internal error - please report this issue\n"
    )
    assert classify(log).failure_class == "nccl_error"
    bare = "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nRuntimeError: boom\n"
    assert classify(bare).message == "unclassified_crash: RuntimeError: boom"
