"""A failing log is never read as healthy, every failure states what it blames, and an environment
failure teaches no knob value.

- Every failing fixture, and the last three lines of each of its tracebacks alone, classifies as a
  failure: a class, or `unclassified_crash` quoting the decisive line. A log with an `ERROR` line
  of the engine, an exception line, pydantic's `Value error,`, a CUDA error, a fatal signal or a
  non-zero exit is a failure too, with no traceback around it.
- The kinds of failure new users met on vLLM 0.11-0.26 (spec decode, CUDA graph capture, NCCL,
  max_model_len, a missing dependency, an FP8 weight kernel Triton cannot compile), each on a log
  written around the engine's own messages (tests/logs/, first line says so).
- `FailureInfo.cause` (autotune.models.FailureCause) on every row and every failure autotune makes;
  autotune/failures/learning.py learns nothing from an ENVIRONMENT failure and isolates nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from autotune.engines.signatures import SIGNATURES, UNCLASSIFIED, classify
from autotune.models import Candidate, FailureCause, FailureInfo, TrialResult
from test_signatures import FIXTURES, LOGS, engine_of, expected_class, label, read
from stand_in import StandIn

ROOT = Path(__file__).resolve().parent.parent
FAILING = [p for p in FIXTURES if expected_class(p) is not None]
# an exception line once a log's process prefixes are gone ("RuntimeError: ...", "torch.AcceleratorError: ...")
EXCEPTION_LINE = re.compile(r"^(?:\(.*?pid=\d+[^)]*\)\s*)*(?:(?:ERROR) \S+ \S+ \[\S+\]\s*)?([A-Za-z_][\w.]*(?:Error|Exception)\b.*)$")


def last_exception(path: Path) -> int | None:
    lines = path.read_text().splitlines()
    hits = [i for i, line in enumerate(lines) if EXCEPTION_LINE.match(line.strip()) and i > 0]
    return hits[-1] if hits else None


WITH_EXCEPTION = [p for p in FAILING if last_exception(p) is not None]


# ---------------------------------------------------------------- never healthy

@pytest.mark.parametrize("path", FAILING, ids=[label(p) for p in FAILING])
def test_every_failing_fixture_is_a_failure_with_a_cause(path: Path) -> None:
    info = classify(path.read_text(), engine=engine_of(path))
    assert info is not None
    assert isinstance(info.cause, FailureCause)
    assert bool(info.implicates) == (info.cause is FailureCause.KNOB), info


@pytest.mark.parametrize("path", WITH_EXCEPTION, ids=[label(p) for p in WITH_EXCEPTION])
def test_a_tracebacks_last_three_lines_alone_are_a_failure(path: Path) -> None:
    """An excerpt pasted from an issue is often only the end of a traceback: the frame, its source
    line and the exception. Without "Traceback (most recent call last):" it is still a failure, and
    an unclassified one quotes the exception."""
    lines = path.read_text().splitlines()
    end = last_exception(path)
    excerpt = "\n".join(lines[max(1, end - 2): end + 1])
    info = classify(excerpt, engine=engine_of(path))
    assert info is not None, excerpt
    if info.failure_class == UNCLASSIFIED:
        quoted = EXCEPTION_LINE.match(lines[end].strip()).group(1)
        assert quoted[:120] in info.message or quoted[:120] in " ".join(info.evidence), info


FAILING_LINES = [
    # an exception line, no traceback
    ("RuntimeError: the sampler broke in a way no signature knows", "RuntimeError: the sampler broke"),
    ("(EngineCore_DP0 pid=7) ValueError: 'xyz' is an odd value for nothing we know", "ValueError: 'xyz' is an odd"),
    ("AssertionError", "AssertionError"),
    # the engine's own ERROR line
    ("(EngineCore_DP0 pid=7) ERROR 12-02 10:00:00 [core.py:842] EngineCore failed to start.", "EngineCore failed to start."),
    ("(APIServer pid=5) ERROR 12-02 10:00:00 [core_client.py:600] Engine core proc EngineCore_DP0 died unexpectedly, "
     "shutting down client.", "Engine core proc EngineCore_DP0 died unexpectedly"),
    # pydantic's validation line of a vLLM config
    ("  Value error, frobnication must be positive [type=value_error, input_value=-1, input_type=int]",
     "Value error, frobnication must be positive"),
    # CUDA, signals, exits
    ("CUDA error: an illegal instruction was encountered", "CUDA error: an illegal instruction"),
    ("Segmentation fault (core dumped)", "Segmentation fault"),
    ("Fatal Python error: Aborted", "Fatal Python error: Aborted"),
    ("terminate called after throwing an instance of 'c10::Error'", "terminate called after throwing"),
    ("*** SIGSEGV received at time=1764684662 on cpu 3 ***", "SIGSEGV received"),
    ("subprocess.CalledProcessError: Command '['nvcc', '--version']' returned non-zero exit status 1.", "non-zero exit status 1"),
    ("worker 3 exited with code 139", "exited with code 139"),
    ("Killed", "Killed"),
    # a traceback cut before its exception; pydantic's literal error without its ValidationError line
    ('Traceback (most recent call last):\n  File "<site>/ray/dag/compiled_dag_node.py", line 251, in do_exec_tasks\n'
     "    done = tasks[operation.exec_task_idx].exec_operation(", "Traceback (most recent call last):"),
    ("cache_dtype\n  Input should be 'auto', 'fp8' or 'fp8_e5m2' [type=literal_error, input_value='fp9', input_type=str]",
     "Input should be 'auto', 'fp8' or 'fp8_e5m2'"),
]


@pytest.mark.parametrize(("line", "quoted"), FAILING_LINES, ids=[q for _, q in FAILING_LINES])
def test_a_failing_line_without_a_traceback_is_unclassified_and_quoted(line: str, quoted: str) -> None:
    info = classify(f"INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.26.0\n{line}\n", engine="vllm")
    assert info is not None and info.failure_class == UNCLASSIFIED
    assert quoted in info.message
    assert any(quoted in e for e in info.evidence)
    assert info.cause is FailureCause.UNEXPLAINED and info.implicates == []


HEALTHY_LINES = [
    "(APIServer pid=5) INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.26.0",
    "(APIServer pid=5) WARNING 12-02 10:00:00 [system_utils.py:299] fd limit errors like `OSError: [Errno 24] Too many open files`",
    "(EngineCore_DP0 pid=7) INFO 12-02 10:00:00 [core.py:1313] [shutdown] EngineCore: trigger received signal=SIGTERM",
    "worker 3 exited with code 0",
    "(APIServer pid=5) INFO:     127.0.0.1:51234 - \"POST /v1/completions HTTP/1.1\" 200 OK",
]


def test_healthy_lines_are_not_failures() -> None:
    assert classify("\n".join(HEALTHY_LINES) + "\n", engine="vllm") is None


def test_an_unclassified_crash_quotes_the_root_and_the_last_exception() -> None:
    log = ("ERROR 12-02 10:00:00 [core.py:842] KeyError: 'model.layers.0.mlp.gate'\n"
           "RuntimeError: Engine core initialization failed. See root cause above.\n")
    info = classify(log, engine="vllm")
    assert info.message == "unclassified_crash: KeyError: 'model.layers.0.mlp.gate'"
    assert info.evidence[-1].endswith("Engine core initialization failed. See root cause above.")


# ---------------------------------------------------------------- the kinds new users met

#: fixture -> (class, implicated knobs, cause)
KINDS = {
    # speculative decoding set-ups the engine rejects or crashes on
    "spec_decode_draft_mismatch__vllm_mtp_fp8_checkpoint.log": ("spec_decode_draft_mismatch", ["spec_method", "quantization"], FailureCause.KNOB),
    "spec_decode_token_budget__vllm_ngram_k16.log": ("spec_decode_token_budget", ["draft_k", "max_num_batched_tokens", "max_num_seqs"], FailureCause.KNOB),
    "spec_decode_device_assert__vllm_eagle3_attention.log": ("spec_decode_device_assert", ["spec_method", "draft_k", "attention_backend"], FailureCause.KNOB),
    # CUDA graph capture failing with TP >= 2 or spec decode
    "cudagraph_capture__vllm_stream_capture_tp2.log": (
        "cudagraph_capture", ["enforce_eager", "cudagraph_mode", "spec_method", "tensor_parallel_size", "quantization"],
        FailureCause.KNOB),
    # NCCL: no knob value explains it
    "nccl_timeout__vllm_ray_watchdog.log": ("nccl_timeout", [], FailureCause.ENVIRONMENT),
    "nccl_error__vllm_internal_error_comm_init.log": ("nccl_error", [], FailureCause.ENVIRONMENT),
    # --max-model-len above the model's config, refused at argument time (a row of the generated table)
    "max_model_len_rejected__vllm_above_config.log": ("max_model_len_rejected", ["max_model_len"], FailureCause.KNOB),
    # a missing or outdated dependency
    "missing_dependency__vllm_deepgemm.log": ("missing_dependency", [], FailureCause.ENVIRONMENT),
    "missing_dependency__vllm_flashinfer_jit_sources.log": ("missing_dependency", [], FailureCause.ENVIRONMENT),
    # an FP8 block-scaled weight kernel Triton cannot compile here: quantization, not the KV cache
    "quantization_arch_gated__vllm_fp8_block_triton.log": ("quantization_arch_gated", ["quantization"], FailureCause.KNOB),
    # another process holds the GPU's memory at start (an orphaned EngineCore; on a Spark, the page cache)
    "gpu_memory_in_use__vllm_orphan_engine_core.log": ("gpu_memory_in_use", [], FailureCause.ENVIRONMENT),
}


@pytest.mark.parametrize("name", list(KINDS))
def test_each_kind_has_a_class_its_knob_and_a_fix(name: str) -> None:
    want_class, want_knobs, want_cause = KINDS[name]
    info = classify(read(name), engine="vllm")
    assert (info.failure_class, info.implicates, info.cause) == (want_class, want_knobs, want_cause), info
    assert info.fix and info.feature


#: the same kinds in the other wordings the engine and its libraries use: line -> class
OTHER_WORDINGS = {
    # VllmConfig's refusal of the budget (0.26.0, 0.33.0), before the scheduler's assert can fire
    "ValueError: max_num_scheduled_tokens is set to -96 based on the speculative decoding settings, which does not "
    "allow any tokens to be scheduled. Increase max_num_batched_tokens to accommodate the additional draft token "
    "slots, or decrease num_speculative_tokens.": "spec_decode_token_budget",
    "RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture.": "cudagraph_capture",
    "torch.AcceleratorError: CUDA error: operation failed due to a previous error during capture": "cudagraph_capture",
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
    "internal error - please report this issue to the NCCL developers, NCCL version 2.21.5": "nccl_error",
    "ncclInternalError: Internal check failed.": "nccl_error",
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=1800000) ran for 1800012 milliseconds before timing out.": "nccl_timeout",
    "RuntimeError: DeepGEMM is not available": "missing_dependency",
    "FileNotFoundError: [Errno 2] No such file or directory: '<site>/flashinfer/data/include/flashinfer/sampling.cuh'":
        "missing_dependency",
    "<site>/flashinfer/data/csrc/norm.cu:17:10: fatal error: flashinfer/norm.cuh: No such file or directory":
        "missing_dependency",
    # vLLM before it named the device, as DGX Spark owners quote it (unified memory: the page cache counts as used)
    "ValueError: Free memory on device (61.05/119.7 GiB) on startup is less than desired GPU memory utilization "
    "(0.52, 62.24 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.":
        "gpu_memory_in_use",
}


@pytest.mark.parametrize("line", list(OTHER_WORDINGS), ids=list(OTHER_WORDINGS.values()))
def test_each_kind_in_its_other_wordings(line: str) -> None:
    assert classify(line, engine="vllm").failure_class == OTHER_WORDINGS[line]


def test_the_fp8e4nv_line_blames_the_kv_cache_only_on_the_attention_path() -> None:
    """Triton's "type fp8e4nv not supported" is the weight GEMM's when no attention kernel is in
    the traceback (vLLM refuses an fp8 KV cache on such a GPU with its own message first)."""
    bare = "ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')\")"
    assert classify(bare, engine="vllm").implicates == ["quantization"]
    attention = ('  File "<site>/vllm/v1/attention/ops/triton_unified_attention.py", line 700, in unified_attention\n'
                 "    kernel_unified_attention_2d[grid](\n" + bare)
    assert classify(attention, engine="vllm").implicates == ["kv_cache_dtype"]
    old = classify(read("kv_dtype_arch_gated__vllm_triton_fp8e4nv_ampere_issue7714.log"), engine="vllm")
    assert old.failure_class == "kv_dtype_arch_gated" and old.implicates == ["kv_cache_dtype"]


def test_a_device_side_assert_outside_spec_decode_is_a_device_fault() -> None:
    log = read("spec_decode_device_assert__vllm_eagle3_attention.log")
    without_spec = "\n".join(line for line in log.splitlines() if "speculative_config" not in line and "spec_decode" not in line)
    info = classify(without_spec, engine="vllm")
    assert info.failure_class == "device_fault" and info.cause is FailureCause.UNEXPLAINED


def test_the_older_deepgemm_wording_is_a_missing_dependency() -> None:
    line = ("RuntimeError: DeepGEMM backend is not available or outdated. Please install or update the `deep_gemm` "
            "to a newer version to enable FP8 kernels.")
    info = classify(line, engine="vllm")
    assert info.failure_class == "missing_dependency" and info.cause is FailureCause.ENVIRONMENT
    assert "DeepGEMM" in info.fix


# ---------------------------------------------------------------- every failure states its cause

def test_every_row_states_its_cause_and_only_knob_rows_implicate() -> None:
    for sig in SIGNATURES:
        assert isinstance(sig.cause, FailureCause), sig.failure_class
        if sig.cause is FailureCause.KNOB:
            assert sig.implicates or sig.knob_from_flag, sig.failure_class
        if sig.cause is FailureCause.ENVIRONMENT:
            assert not sig.implicates, f"{sig.failure_class} blames the environment but implicates knobs"


def test_every_failure_autotune_makes_names_its_cause() -> None:
    """A FailureInfo built anywhere in autotune/ says what it blames (the default, UNEXPLAINED,
    would send a memory failure or a hang to isolation launches)."""
    missing = []
    for path in (ROOT / "autotune").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "FailureInfo":
                if not any(k.arg == "cause" for k in node.keywords):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not missing, f"FailureInfo(...) without cause=: {missing}"


# ---------------------------------------------------------------- what learning does with them

def _ctx(tmp_path: Path):
    from autotune.engines import get_engine
    from autotune.models import ModelSpec, SearchSpace
    from autotune.trial.context import TrialContext

    space = SearchSpace.model_validate({
        "name": "t", "engine": "vllm", "model": {"name": "m", "path": "m"},
        "knobs": [{"name": "tensor_parallel_size", "values": [1, 2], "default": 1},
                  {"name": "kv_cache_dtype", "values": ["auto", "fp8"], "default": "auto"}],
    })
    return TrialContext(study="t", space=space, model=ModelSpec(name="m", path="m"), engine=get_engine("vllm"),
                        logs_dir=tmp_path)


@pytest.mark.parametrize("name", ["nccl_timeout__vllm_ray_watchdog.log", "nccl_error__vllm_internal_error_comm_init.log",
                                  "missing_dependency__vllm_deepgemm.log",
                                  "gpu_memory_in_use__vllm_orphan_engine_core.log"])
def test_an_environment_failure_teaches_no_knob_value_and_starts_no_isolation(tmp_path: Path, name: str) -> None:
    from autotune.failures.learning import isolations, learn_from_failure
    from autotune.store import Store

    store = Store(tmp_path / "runs.db")
    failure = classify(read(name), engine="vllm")
    assert failure.cause is FailureCause.ENVIRONMENT
    base = Candidate(engine="vllm", params={"tensor_parallel_size": 1, "kv_cache_dtype": "auto"})
    failed = TrialResult(study="t", number=1, status="failed", failure=failure,
                         candidate=Candidate(engine="vllm", params={"tensor_parallel_size": 2, "kv_cache_dtype": "fp8"}))
    assert learn_from_failure(_ctx(tmp_path), store, "host", failed, base, StandIn()) is False
    assert store.learned_failures("host", "vllm") == []
    assert isolations(store, "t") == []


def test_an_environment_failure_is_not_learned_even_when_it_names_knobs(tmp_path: Path) -> None:
    from autotune.failures.learning import learn_from_failure
    from autotune.store import Store

    store = Store(tmp_path / "runs.db")
    failure = FailureInfo(failure_class="nccl_timeout", message="nccl_timeout: x", cause=FailureCause.ENVIRONMENT,
                          implicates=["tensor_parallel_size"])
    failed = TrialResult(study="t", number=1, status="failed", failure=failure,
                         candidate=Candidate(engine="vllm", params={"tensor_parallel_size": 2, "kv_cache_dtype": "auto"}))
    base = Candidate(engine="vllm", params={"tensor_parallel_size": 1, "kv_cache_dtype": "auto"})
    assert learn_from_failure(_ctx(tmp_path), store, "host", failed, base, StandIn()) is False
    assert store.learned_failures("host", "vllm") == []


def test_a_knob_failure_is_still_learned(tmp_path: Path) -> None:
    from autotune.failures.learning import learn_from_failure
    from autotune.store import Store

    store = Store(tmp_path / "runs.db")
    failure = classify(read("max_model_len_rejected__vllm_above_config.log"), engine="vllm")
    failed = TrialResult(study="t", number=1, status="failed", failure=failure,
                         candidate=Candidate(engine="vllm", params={"max_model_len": 262144}))
    assert learn_from_failure(_ctx(tmp_path), store, "host", failed, Candidate(engine="vllm", params={}), StandIn()) is True
    assert [r.knob_values for r in store.learned_failures("host", "vllm")] == [{"max_model_len": 262144}]


def test_the_fixtures_of_the_new_kinds_exist() -> None:
    assert all((LOGS / name).exists() for name in KINDS)


def test_the_guide_gives_each_class_its_fix_in_the_same_words() -> None:
    from autotune.engines.signatures import REFUSAL_CLASSES

    guide = " ".join((ROOT / "docs" / "guide.md").read_text().split())
    fixes = [classify(read(name), engine="vllm").fix for name in KINDS]
    fixes += [fix for _, fix in REFUSAL_CLASSES.values()]
    missing = [fix for fix in fixes if fix not in guide]
    assert not missing, f"docs/guide.md lacks these fixes: {missing}"
    assert all(f"| {cause.value} |" in guide for cause in FailureCause)
