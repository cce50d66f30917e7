"""What the installed vLLM accepts, read from the engine itself, and a space held against it before
runs.db opens. CI runs both recorded versions (0.26.0 and 0.33.0) through the FAKE vLLM of
tests/fakes/vllm_site.py, which answers the choices question from each version's dump recorded on
the H200 (tests/data/vllm_choices/).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
from fakes.vllm_site import VERSIONS, choices_of, write_fake_vllm

from autotune.cli import main
from autotune.engines import vllm as vllm_engine
from autotune.engines import vllm_choices
from autotune.engines.vllm import VALUE_FLAGS, VllmEngine
from autotune.engines.vllm_choices import EngineChoices, cached_choices, read_choices
from autotune.engines.vllm_values import check_values, refusal
from autotune.errors import ConfigError
from autotune.models import ChoicesStatus, SearchSpace


def recorded(version: str) -> EngineChoices:
    return EngineChoices.model_validate(choices_of(version))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache folder of this test's own (the choices are cached there per version and host)."""
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def install_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> Path:
    site = write_fake_vllm(tmp_path / f"site-{version}", version)
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    monkeypatch.setattr(vllm_engine, "_flags_cache", {})
    return site


# ---------------------------------------------------------------------- the stand-in answers as recorded


@pytest.mark.parametrize("version", VERSIONS)
def test_the_stand_in_answers_the_choices_question_as_its_version_did(version, tmp_path, monkeypatch):
    install_fake(tmp_path, monkeypatch, version)
    assert VllmEngine().version() == version
    assert read_choices(sys.executable) == recorded(version)


# ---------------------------------------------------------------------- one value against one version


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("kv_cache_dtype", "nvfp4_4over6"),  # a KV dtype 0.33.0 added
        ("attention_backend", "B12X"),  # the sm_12x backend 0.33.0 added
        ("moe_backend", "b12x"),
        ("linear_backend", "b12x"),
        ("spec_method", "kimi_k3_mtp"),
    ],
)
def test_a_value_only_the_later_version_has_is_refused_by_the_earlier_one(knob, value):
    old, new = recorded("0.26.0"), recorded("0.33.0")
    assert refusal(knob, value, VALUE_FLAGS.get(knob), new) is None
    why = refusal(knob, value, VALUE_FLAGS.get(knob), old)
    assert why is not None and why.startswith(f"{knob}={value} is not accepted by vLLM 0.26.0: choices are ")
    assert "\n" not in why


def test_the_refusal_names_the_value_knob_version_and_choices():
    why = refusal("kv_cache_dtype", "nvfp4_4over6", "--kv-cache-dtype", recorded("0.26.0"))
    assert why == ("kv_cache_dtype=nvfp4_4over6 is not accepted by vLLM 0.26.0: choices are auto, bfloat16, "
                   "float16, fp8, fp8_ds_mla, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_per_token_head, int4_per_token_head, "
                   "int8_per_token_head, nvfp4, turboquant_3bit_nc, turboquant_4bit_nc, turboquant_k3v4_nc, "
                   "turboquant_k8v4")


@pytest.mark.parametrize("version", VERSIONS)
def test_values_both_versions_accept_pass_and_unlisted_knobs_take_anything(version):
    choices = recorded(version)
    for knob, value in [("kv_cache_dtype", "fp8"), ("attention_backend", "TRITON_ATTN"),
                        ("attention_backend", "flash_attn"),  # read by enum name, any case
                        ("moe_backend", "flashinfer_cutlass"), ("quantization", "modelopt_fp4"),
                        ("spec_method", "ngram"), ("dtype", "bfloat16"),
                        ("max_model_len", 4096), ("enforce_eager", True)]:
        assert refusal(knob, value, VALUE_FLAGS.get(knob), choices) is None, (knob, value)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_option_with_argparse_choices_is_held_to_them(version):
    why = refusal("dtype", "float8", "--dtype", recorded(version))
    assert why == f"dtype=float8 is not accepted by vLLM {version}: choices are auto, bfloat16, float, float16, float32, half"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_deprecated_quantization_is_refused_with_the_reason(version):
    why = refusal("quantization", "fbgemm_fp8", "--quantization", recorded(version))
    assert why is not None and f"deprecated in vLLM {version}" in why and "--allow-deprecated-quantization" in why


def space(**overrides) -> SearchSpace:
    data = {
        "name": "s", "engine": "vllm", "model": {"name": "m", "path": "/models/m"},
        "fixed": {"max_model_len": 4096},
        "knobs": [{"name": "kv_cache_dtype", "values": ["auto", "fp8"], "default": "auto"},
                  {"name": "attention_backend", "values": [None, "FLASH_ATTN"], "default": None}],
    }
    return SearchSpace.model_validate({**data, **overrides})


def test_a_space_is_refused_at_its_first_value_the_version_lacks_fixed_values_too():
    old = recorded("0.26.0")
    check_values(space(), old, VALUE_FLAGS)
    with pytest.raises(ConfigError, match=r"^space 's': kv_cache_dtype=nvfp4_4over6 is not accepted by vLLM 0\.26\.0"):
        check_values(space(fixed={"kv_cache_dtype": "nvfp4_4over6"}, knobs=[]), old, VALUE_FLAGS)
    bad = space(knobs=[{"name": "attention_backend", "values": [None, "FLASH_ATTN", "B12X"], "default": None}])
    with pytest.raises(ConfigError, match=r"attention_backend=B12X is not accepted by vLLM 0\.26\.0"):
        check_values(bad, old, VALUE_FLAGS)
    check_values(bad, recorded("0.33.0"), VALUE_FLAGS)


def test_a_plugin_flag_knob_is_left_to_the_help_check():
    fork = space(plugin_flags={"kv_cache_dtype": "--kv-cache-dtype"},
                 knobs=[{"name": "kv_cache_dtype", "values": ["auto", "fork_only_dtype"], "default": "auto"}])
    check_values(fork, recorded("0.26.0"), VALUE_FLAGS)


# ---------------------------------------------------------------------- cached per version and host


def test_choices_are_read_once_per_version_and_host_then_from_the_cache(cache, monkeypatch):
    asked: list[str] = []

    def ask(python: str = sys.executable, timeout_s: float = 180.0) -> EngineChoices:
        asked.append(python)
        return recorded("0.26.0")

    monkeypatch.setattr(vllm_choices, "read_choices", ask)
    first = cached_choices("python3", "0.26.0", "host-a")
    assert cached_choices("python3", "0.26.0", "host-a") == first == recorded("0.26.0")
    assert asked == ["python3"]
    cached_choices("python3", "0.26.0", "host-b")  # another host fingerprint: asked again
    assert len(asked) == 2
    # a damaged cache file is asked again, never trusted
    vllm_choices.cache_path("0.26.0", "host-a").write_text("{not json")
    assert cached_choices("python3", "0.26.0", "host-a") == first
    assert len(asked) == 3
    assert sorted(p.name.split("-")[1] for p in (cache / "engine-choices").glob("*.json")) == ["0.26.0", "0.26.0"]


# ---------------------------------------------------------------------- before runs.db opens


SPACE = """
name: choices
engine: vllm
model: {{name: gemma-3-270m, path: {model}, prompt_style: completion, head_dim: 256, n_kv_heads: 1, n_layers: 18,
        params_total_b: 0.27, weight_bits: 16, context_max: 4096}}
fixed: {{max_model_len: 4096}}
knobs:
  - {{name: kv_cache_dtype, values: [auto, {kv}], default: auto}}
workload: {{decode_max_tokens: 8, prompts_per_set: 1, repeats: 1, prefill_tokens: [100], concurrency: [1]}}
gates: {{needle: null, qeval: null}}
"""


def write_space(tmp_path: Path, kv: str = "nvfp4_4over6") -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"head_dim": 256, "num_attention_heads": 4, "num_key_value_heads": 1}))
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.format(model=model, kv=kv))
    return path


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "search"])
def test_search_refuses_a_value_vllm_026_lacks_before_runs_db_opens(dry_run, cache, tmp_path, monkeypatch, capsys):
    install_fake(tmp_path, monkeypatch, "0.26.0")
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(write_space(tmp_path)), "--db", str(db), "--hardware", "h200"]
    assert main(args + (["--dry-run"] if dry_run else [])) == 2
    err = capsys.readouterr().err
    assert "kv_cache_dtype=nvfp4_4over6 is not accepted by vLLM 0.26.0: choices are auto, bfloat16, " in err
    assert len(err.strip().splitlines()) == 1 and not db.exists()


def test_vllm_033_accepts_what_026_refused(cache, tmp_path, monkeypatch, capsys):
    install_fake(tmp_path, monkeypatch, "0.33.0")
    args = ["search", "--space", str(write_space(tmp_path)), "--db", str(tmp_path / "runs.db"), "--dry-run",
            "--hardware", "h200"]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr()
    assert "--kv-cache-dtype nvfp4_4over6" in out.out and "not checked" not in out.err


def test_without_vllm_a_dry_run_says_the_values_went_unchecked_and_goes_on(cache, tmp_path, capsys):
    assert VllmEngine().version() is None  # this CI machine has no vLLM
    args = ["search", "--space", str(write_space(tmp_path)), "--db", str(tmp_path / "runs.db"), "--dry-run",
            "--hardware", "h200"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "note: vllm is not installed here: knob values not checked against its choices" in err


def test_a_vllm_whose_choices_cannot_be_read_is_not_checked_and_says_why(cache, tmp_path, monkeypatch, capsys):
    site = install_fake(tmp_path, monkeypatch, "0.26.0")
    (site / "vllm" / "entrypoints" / "cli" / "serve.py").unlink()  # a vLLM whose serve parser moved
    args = ["search", "--space", str(write_space(tmp_path)), "--db", str(tmp_path / "runs.db"), "--dry-run",
            "--hardware", "h200"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "note: vllm 0.26.0: knob values not checked, its choices could not be read" in err
    assert "ModuleNotFoundError" in err


def test_plan_is_checked_where_vllm_is_installed_and_says_so_where_not(cache, tmp_path, monkeypatch, capsys):
    args = ["plan", "--space", str(write_space(tmp_path)), "--hardware", "h200", "--db", str(tmp_path / "runs.db")]
    assert main(args) == 0
    assert "note: vllm is not installed here" in capsys.readouterr().out
    install_fake(tmp_path, monkeypatch, "0.26.0")
    assert main(args) == 2
    assert "kv_cache_dtype=nvfp4_4over6 is not accepted by vLLM 0.26.0" in capsys.readouterr().err


def test_the_plan_json_carries_the_check(cache, tmp_path, monkeypatch, capsys):
    install_fake(tmp_path, monkeypatch, "0.33.0")
    args = ["plan", "--space", str(write_space(tmp_path)), "--hardware", "h200", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["choices"] == {"status": ChoicesStatus.CHECKED.value, "engine": "vllm", "engine_version": "0.33.0",
                                 "detail": "", "takes_draft_schedule": True, "left_out": []}


def test_probe_refuses_a_value_the_version_lacks_before_runs_db_opens(cache, tmp_path, monkeypatch, capsys):
    install_fake(tmp_path, monkeypatch, "0.26.0")
    db = tmp_path / "runs.db"
    assert main(["probe", "--space", str(write_space(tmp_path)), "--db", str(db)]) == 2
    assert "kv_cache_dtype=nvfp4_4over6 is not accepted by vLLM 0.26.0" in capsys.readouterr().err
    assert not db.exists()


def test_a_quantization_method_a_plugin_may_register_is_let_through_only_where_a_plugin_is_installed():
    """vLLM plugins register quantization methods when vLLM starts (the spark1 space's `exl3`
    comes from vllm-exl3), so the static list holds them only where no plugin is installed."""
    stock = recorded("0.26.0")
    why = refusal("quantization", "exl3", "--quantization", stock)
    assert why is not None and why.startswith("quantization=exl3 is not accepted by vLLM 0.26.0 (no vLLM plugin installed")
    plugged = stock.model_copy(update={"general_plugins": ["exl3"]})
    assert refusal("quantization", "exl3", "--quantization", plugged) is None
    assert refusal("quantization", "fbgemm_fp8", "--quantization", plugged) is not None  # deprecated stays refused
    assert refusal("kv_cache_dtype", "nvfp4_4over6", "--kv-cache-dtype", plugged) is not None


@pytest.mark.parametrize("version", VERSIONS)
def test_every_shipped_vllm_space_passes_both_versions_or_needs_its_plugin(version):
    """What a user runs on a stock install: every shipped space's values are ones the version
    accepts, but the spark1 seed recipe's EXL3 quantization, which needs the vllm-exl3 plugin."""
    from autotune.space.candidates import load_space

    root = Path(__file__).resolve().parents[1]
    refused = {}
    for path in sorted([*(root / "search_spaces").glob("*.yaml"), *(root / "benchmarks" / "spaces").glob("*.yaml")]):
        s = load_space(str(path))
        if s.engine != "vllm":
            continue
        try:
            check_values(s, recorded(version), VALUE_FLAGS)
        except ConfigError as exc:
            refused[path.name] = str(exc)
    assert list(refused) == ["minimax-m3.1-flash-spark1.yaml"], refused
    assert "quantization=exl3" in refused["minimax-m3.1-flash-spark1.yaml"]
