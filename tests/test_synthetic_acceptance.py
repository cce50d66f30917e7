"""Synthetic speculative acceptance is refused wherever a launch comes in: a space, a `--try`, a
recipe read back. vLLM's `rejection_sample_method: synthetic` (with `synthetic_acceptance_length`
or `synthetic_acceptance_rates`) accepts drafts at a set rate instead of verifying them with the
target model; published recipes use it for benchmarking, and the tok/s it yields measures no real
drafting.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.engines import get_engine
from autotune.errors import ConfigError
from autotune.models import SearchSpace, synthetic_acceptance, synthetic_in_argv
from autotune.output.recipe import from_yaml

SYNTHETIC = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "rejection_sample_method": "synthetic",
                        "synthetic_acceptance_length": 2.49})

SPACE = """
name: synthetic
engine: vllm
model: {{name: gemma-3-270m, path: {model}, prompt_style: completion, head_dim: 256, n_kv_heads: 1, n_layers: 18,
        params_total_b: 0.27, weight_bits: 16, context_max: 4096}}
fixed: {fixed}
plugin_flags: {{spec_config: --speculative-config}}
knobs:
  - {{name: spec_config, values: {values}, default: null}}
workload: {{decode_max_tokens: 8, prompts_per_set: 1, repeats: 1, prefill_tokens: [100], concurrency: [1]}}
gates: {{needle: null, qeval: null}}
"""


def write_space(tmp_path: Path, fixed: dict | None = None, values: list | None = None) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"head_dim": 256, "num_attention_heads": 4, "num_key_value_heads": 1}))
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.format(model=model, fixed=json.dumps(fixed or {"max_model_len": 4096}),
                                 values=json.dumps(values if values is not None else [None, SYNTHETIC])))
    return path


def search(tmp_path: Path, space: Path, *extra: str) -> list[str]:
    return ["search", "--space", str(space), "--db", str(tmp_path / "runs.db"), "--dry-run", "--hardware", "h200", *extra]


@pytest.mark.parametrize(
    ("name", "value", "found"),
    [
        ("rejection_sample_method", "synthetic", "rejection_sample_method: synthetic"),
        ("synthetic_acceptance_length", 2.49, "synthetic_acceptance_length: 2.49"),
        ("synthetic_acceptance_rates", "[0.9, 0.8]", "synthetic_acceptance_rates: [0.9, 0.8]"),
        ("spec_config", SYNTHETIC, "rejection_sample_method: synthetic"),  # inside a --speculative-config JSON
        ("--speculative-config", {"method": "mtp", "draft": {"rejection_sample_method": "Synthetic"}},
         "rejection_sample_method: Synthetic"),
    ],
)
def test_a_synthetic_acceptance_setting_is_found_wherever_it_sits(name, value, found):
    assert synthetic_acceptance(name, value) == found


@pytest.mark.parametrize(("name", "value"), [("rejection_sample_method", "standard"), ("spec_method", "ngram"),
                                             ("spec_config", json.dumps({"method": "ngram"})), ("draft_k", 4),
                                             ("spec_config", "{not json")])
def test_real_drafting_is_no_synthetic_setting(name, value):
    assert synthetic_acceptance(name, value) is None


def test_a_space_whose_speculative_config_fakes_acceptance_exits_2_before_runs_db(tmp_path, capsys):
    assert main(search(tmp_path, write_space(tmp_path))) == 2
    err = capsys.readouterr().err
    assert "rejection_sample_method: synthetic" in err and "measures no real drafting" in err
    assert not (tmp_path / "runs.db").exists()


def test_a_fixed_synthetic_key_is_refused_for_that_reason_not_as_an_unknown_knob(tmp_path, capsys):
    space = write_space(tmp_path, fixed={"max_model_len": 4096, "rejection_sample_method": "synthetic"},
                        values=[None])
    assert main(search(tmp_path, space)) == 2
    err = capsys.readouterr().err
    assert "measures no real drafting" in err and "has no knob" not in err


def test_a_try_cannot_bring_synthetic_acceptance_in(tmp_path, capsys):
    space = write_space(tmp_path)
    assert main(search(tmp_path, space, "--try", f"spec_config={SYNTHETIC}")) == 2
    assert "measures no real drafting" in capsys.readouterr().err


def test_an_env_var_setting_synthetic_acceptance_is_refused_for_every_engine():
    for engine in ("vllm", "llamacpp"):
        data = {"name": "s", "engine": engine, "model": {"name": "m", "path": "/m"}, "knobs": [],
                "env": {"SPEC_SYNTHETIC_ACCEPTANCE_RATE": "0.8"}}
        with pytest.raises(ConfigError, match="measures no real drafting"):
            get_engine(engine).validate_space(SearchSpace.model_validate(data))


def test_synthetic_in_argv_reads_flag_value_pairs_and_equals_forms():
    argv = ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "m", "--speculative-config", SYNTHETIC]
    assert synthetic_in_argv(argv) == "rejection_sample_method: synthetic"
    assert synthetic_in_argv(["serve", f"--speculative-config={SYNTHETIC}"]) == "rejection_sample_method: synthetic"
    assert synthetic_in_argv(["serve", "--speculative-config", json.dumps({"method": "ngram"})]) is None


def test_a_recipe_whose_launch_fakes_acceptance_is_refused_when_read(tmp_path):
    out = tmp_path / "r.yaml"
    assert main(["export", "--predicted", "--space", "minimax-m3.1-flash-spark4", "--hardware", "spark",
                 "--nodes", "4", "-o", str(out)]) == 0
    from_yaml(out.read_text())  # as exported: fine
    recipe = yaml.safe_load(out.read_text())
    server = next(n for n in recipe["launch"]["nodes"] if n["role"] == "server")
    server["argv"] += ["--speculative-config", SYNTHETIC]
    with pytest.raises(ConfigError, match="rejection_sample_method: synthetic.*measures no real drafting"):
        from_yaml(yaml.safe_dump(recipe))
