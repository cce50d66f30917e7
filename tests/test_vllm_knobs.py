"""Knobs the newer vLLM versions add (issue 30 item 4): `performance_mode` in the GPU spaces and in
`space new`; the sm_12x b12x backends in the Spark spaces and in `space new --hardware spark`,
marked unverified until a Spark runs them; and the rule that keeps a shipped space usable on
every supported version: a knob's `where_listed` values are kept only where the installed version
lists them (a version without the knob's option lists none); the rest are left out of the study
with one note line, before runs.db opens. Any other value it does not list is refused as before. Both versions answer through the stand-in vLLM of tests/fakes/vllm_site.py and
their dumps recorded on the H200.

What the dumps say (and the issue text did not): 0.26.0 already lists `--performance-mode` and
the `flashinfer_b12x` MoE and linear backends; `B12X` attention and the plain `b12x` MoE and
linear backends are new in 0.33.0.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from fakes.vllm_site import VERSIONS, choices_of, use_fake_vllm

from autotune.cli import main
from autotune.commands.space_new import new_space
from autotune.engines.vllm import SM12X_BACKENDS, UNVERIFIED, VALUE_FLAGS, VllmEngine
from autotune.engines.vllm_choices import EngineChoices
from autotune.engines.vllm_values import check_values
from autotune.errors import ConfigError
from autotune.models import Candidate, LeftOutKnob, ModelSpec, SearchSpace
from autotune.space.candidates import load_space
from autotune.space.fingerprint import fingerprint
from autotune.store import Store

ROOT = Path(__file__).resolve().parents[1]
from corpus import CORPUS as CONFIGS
SHIPPED_VLLM = sorted(p for p in (ROOT / "search_spaces").glob("*.yaml") if load_space(str(p)).engine == "vllm")


def recorded(version: str) -> EngineChoices:
    return EngineChoices.model_validate(choices_of(version))


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """A choices cache of this test's own (answers are cached per version and host)."""
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ---------------------------------------------------------------------- rendering


def test_performance_mode_renders_its_flag():
    engine = VllmEngine(python="python3")
    launch = engine.render(Candidate(engine="vllm", params={"performance_mode": "throughput"}),
                           ModelSpec(name="m", path="/models/m"), port=8011)
    argv = launch.server.argv
    assert argv[argv.index("--performance-mode") + 1] == "throughput"
    assert VALUE_FLAGS["performance_mode"] == "--performance-mode"


# ---------------------------------------------------------------------- the rule


def space(*knobs: dict, **overrides) -> SearchSpace:
    data = {"name": "s", "engine": "vllm", "model": {"name": "m", "path": "/models/m"},
            "fixed": {"max_model_len": 4096}, "knobs": list(knobs)}
    return SearchSpace.model_validate({**data, **overrides})


B12X_ATTENTION = {"name": "attention_backend", "values": [None, "TRITON_ATTN", "B12X"], "default": None,
                  "where_listed": ["B12X"]}


def test_a_where_listed_value_the_version_does_not_list_is_left_out():
    s = space(B12X_ATTENTION)
    assert check_values(s, recorded("0.33.0"), VALUE_FLAGS) == []
    left = check_values(s, recorded("0.26.0"), VALUE_FLAGS)
    assert left == [LeftOutKnob(knob="attention_backend", flag="--attention-backend", values=["B12X"],
                                flag_listed=True, engine_version="0.26.0")]
    kept = left[0].apply(s).knob("attention_backend")
    assert (kept.values, kept.where_listed) == ([None, "TRITON_ATTN"], [])
    assert left[0].note() == ("vLLM 0.26.0 does not list attention_backend=B12X (--attention-backend): "
                              "left out of this study")


def test_a_version_without_the_knobs_option_lists_none_of_its_values():
    """Neither recorded version lacks --performance-mode; a version that does (a fork, an older
    image) is the 0.26.0 dump without the flag. The knob keeps its default, null: nothing rendered."""
    without = recorded("0.26.0")
    without = without.model_copy(update={"flags": {k: v for k, v in without.flags.items() if k != "--performance-mode"}})
    s = space({"name": "performance_mode", "values": [None, "interactivity", "throughput"], "default": None,
               "where_listed": ["interactivity", "throughput"]},
              {"name": "max_num_seqs", "values": [None, 8], "default": None})
    left = check_values(s, without, VALUE_FLAGS)
    assert [(x.knob, x.values, x.flag_listed) for x in left] == [("performance_mode", ["interactivity", "throughput"], False)]
    assert left[0].apply(s).knob("performance_mode").values == [None]
    assert left[0].note() == ("vLLM 0.26.0 has no --performance-mode: performance_mode=interactivity, throughput left "
                              "out of this study")


def test_a_knob_left_with_its_default_only_keeps_it_so_trial_0_renders_what_it_did():
    s = space({"name": "moe_backend", "values": ["marlin", "b12x"], "default": "marlin", "where_listed": ["b12x"]})
    left = check_values(s, recorded("0.26.0"), VALUE_FLAGS)
    assert [(x.knob, x.values) for x in left] == [("moe_backend", ["b12x"])]
    kept = left[0].apply(s).knob("moe_backend")
    assert (kept.values, kept.default) == (["marlin"], "marlin")


def test_an_unlisted_value_not_named_in_where_listed_is_still_refused():
    plain = {k: v for k, v in B12X_ATTENTION.items() if k != "where_listed"}
    with pytest.raises(ConfigError, match=r"attention_backend=B12X is not accepted by vLLM 0\.26\.0: choices are "):
        check_values(space(plain), recorded("0.26.0"), VALUE_FLAGS)


def test_a_default_the_version_does_not_list_is_refused():
    """Trial 0 renders the default on every version, so it cannot be where_listed, and a default the
    version lacks is refused as any value."""
    with pytest.raises(ValueError, match=r"where_listed \['b12x'\] must be values of the knob other than null and "):
        space({"name": "moe_backend", "values": ["b12x", "marlin"], "default": "b12x", "where_listed": ["b12x"]})
    s = space({"name": "moe_backend", "values": ["b12x", "marlin"], "default": "b12x"})
    with pytest.raises(ConfigError, match=r"moe_backend=b12x is not accepted by vLLM 0\.26\.0"):
        check_values(s, recorded("0.26.0"), VALUE_FLAGS)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_value_outside_the_flags_choices_is_refused_naming_version_and_choices(version):
    s = space({"name": "performance_mode", "values": [None, "turbo", "throughput"], "default": None,
               "where_listed": ["throughput"]})
    with pytest.raises(ConfigError, match=rf"performance_mode=turbo is not accepted by vLLM {version}: choices are "
                                          r"balanced, interactivity, throughput$"):
        check_values(s, recorded(version), VALUE_FLAGS)


def test_where_listed_is_for_engine_options_only():
    with pytest.raises(ValueError, match="where_listed needs an engine option"):
        space({"name": "VLLM_X", "kind": "env", "values": [None, "1"], "default": None, "where_listed": ["1"]})


# ---------------------------------------------------------------------- the shipped spaces


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", SHIPPED_VLLM, ids=lambda p: p.stem)
def test_every_shipped_vllm_space_tunes_performance_mode_on_both_versions(path, version):
    s = load_space(str(path))
    knob = s.knob("performance_mode")
    assert knob.values == [None, "interactivity", "throughput"] and knob.default is None
    assert knob.where_listed == ["interactivity", "throughput"]
    plugged = recorded(version).model_copy(update={"general_plugins": ["exl3"]})  # spark1's EXL3 needs its plugin
    left = check_values(s, plugged, VALUE_FLAGS)
    assert "performance_mode" not in {x.knob for x in left}  # both versions list the flag


def test_the_four_spark_space_offers_b12x_on_033_and_keeps_the_rest_on_026():
    s = load_space(str(ROOT / "search_spaces" / "minimax-m3.1-flash-spark4.yaml"))
    assert check_values(s, recorded("0.33.0"), VALUE_FLAGS) == []
    left = {x.knob: x for x in check_values(s, recorded("0.26.0"), VALUE_FLAGS)}
    assert {k: x.values for k, x in left.items()} == {"moe_backend": ["b12x"], "linear_backend": ["b12x"]}
    kept = s
    for x in left.values():
        kept = x.apply(kept)
    assert kept.knob("moe_backend").values == ["marlin", "flashinfer_b12x"]  # 0.26.0 lists flashinfer_b12x
    assert kept.knob("moe_backend").default == "marlin"  # the recipe's, as before


@pytest.mark.parametrize("path", SHIPPED_VLLM, ids=lambda p: p.stem)
def test_every_sm12x_value_a_shipped_space_offers_is_marked_unverified(path):
    s = load_space(str(path))
    for knob in s.knobs:
        offered = [v for v in knob.values if v in SM12X_BACKENDS.get(knob.name, ())]
        if offered:
            assert UNVERIFIED in knob.description, (knob.name, knob.description)
            assert set(offered) <= set(knob.where_listed)


SPARK4_LIKE = """
name: b12x-study
engine: vllm
hardware: spark
model: {{name: qwen-moe, path: {model}, params_total_b: 30.5, params_active_b: 3.3, weight_bits: 4.5,
        n_layers: 48, hidden_size: 2048, n_heads: 32, n_kv_heads: 4, head_dim: 128, context_max: 40960}}
fixed: {{max_model_len: 8192, gpu_memory_utilization: 0.8}}
knobs:
  - {{name: moe_backend, values: [marlin, flashinfer_b12x, b12x], default: marlin,
      where_listed: [flashinfer_b12x, b12x], description: "b12x and flashinfer_b12x: unverified until a Spark runs it"}}
  - {{name: performance_mode, values: [null, interactivity, throughput], default: null,
      where_listed: [interactivity, throughput]}}
workload: {{decode_max_tokens: 8, prompts_per_set: 1, repeats: 1, prefill_tokens: [100], concurrency: [1]}}
gates: {{needle: null, qeval: null}}
"""


def write_spark_space(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"head_dim": 128, "num_attention_heads": 32, "num_key_value_heads": 4}))
    path = tmp_path / "space.yaml"
    path.write_text(SPARK4_LIKE.format(model=model))
    return path


def dry_run(path: Path, db: Path) -> list[str]:
    return ["search", "--space", str(path), "--db", str(db), "--dry-run", "--hardware", "spark"]


def test_search_on_026_leaves_the_unlisted_value_out_with_one_note_line(tmp_path, monkeypatch, capsys):
    use_fake_vllm(tmp_path, monkeypatch, "0.26.0")
    db = tmp_path / "runs.db"
    assert main(dry_run(write_spark_space(tmp_path), db)) == 0
    out = capsys.readouterr()
    assert out.err.strip().splitlines() == [
        "note: vLLM 0.26.0 does not list moe_backend=b12x (--moe-backend): left out of this study"]
    assert "--moe-backend b12x" not in out.out and not db.exists()


def test_search_on_033_keeps_every_value_and_says_nothing(tmp_path, monkeypatch, capsys):
    use_fake_vllm(tmp_path, monkeypatch, "0.33.0")
    assert main(dry_run(write_spark_space(tmp_path), tmp_path / "runs.db")) == 0
    assert capsys.readouterr().err == ""


def test_without_vllm_nothing_is_left_out_and_the_values_go_unchecked(tmp_path, capsys):
    assert VllmEngine().version() is None
    assert main(dry_run(write_spark_space(tmp_path), tmp_path / "runs.db")) == 0
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["note: vllm is not installed here: knob values not checked against its choices"]


def test_plan_on_026_counts_the_candidates_without_the_left_out_value(tmp_path, monkeypatch, capsys):
    args = ["plan", "--space", str(write_spark_space(tmp_path)), "--hardware", "spark", "--json"]
    use_fake_vllm(tmp_path, monkeypatch, "0.33.0")
    assert main(args) == 0
    on_033 = json.loads(capsys.readouterr().out)
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache-026"))
    use_fake_vllm(tmp_path, monkeypatch, "0.26.0", name="site-026")
    assert main(args) == 0
    on_026 = json.loads(capsys.readouterr().out)
    assert (len(on_033["kept"]), len(on_026["kept"])) == (9, 6)
    assert on_026["choices"]["left_out"] == [{"knob": "moe_backend", "flag": "--moe-backend", "values": ["b12x"],
                                              "flag_listed": True, "engine_version": "0.26.0"}]


def test_a_study_made_on_033_is_not_resumed_on_026_with_fewer_values(tmp_path, monkeypatch, capsys):
    """The study keeps the space it was made from; on 0.26 the value left out makes another
    space, so the fingerprint check refuses the resume (exit 2) instead of mixing the two."""
    path = write_spark_space(tmp_path)
    db = tmp_path / "runs.db"
    made = load_space(str(path))
    Store(db).save_study("b12x", made, "spark", 1, "host-033", fingerprint(made))
    use_fake_vllm(tmp_path, monkeypatch, "0.26.0")
    assert main([*dry_run(path, db), "--study", "b12x"]) == 2
    err = capsys.readouterr().err
    assert "study 'b12x' was created from another space (knobs.moe_backend.values:" in err


# ---------------------------------------------------------------------- space new


def nvfp4_moe(tmp_path: Path) -> Path:
    """Qwen3-30B-A3B's config.json as a ModelOpt NVFP4 checkpoint (an NVFP4 MoE on one Spark)."""
    target = tmp_path / "Qwen3-30B-A3B-NVFP4"
    target.mkdir()
    cfg = json.loads((CONFIGS / "qwen3-30b-a3b" / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    (target / "config.json").write_text(json.dumps(cfg))
    return target


def knobs_of(made) -> dict[str, list]:
    return {k.name: k.values for k in made.space.knobs}


def test_space_new_on_033_offers_the_b12x_backends_marked_unverified(tmp_path, monkeypatch):
    use_fake_vllm(tmp_path, monkeypatch, "0.33.0")
    made = new_space(str(nvfp4_moe(tmp_path)), "spark", 1)
    knobs = knobs_of(made)
    assert knobs["attention_backend"] == [None, "TRITON_ATTN", "FLASHINFER", "B12X"]
    assert knobs["moe_backend"] == ["marlin", "b12x", "flashinfer_b12x"]
    assert knobs["linear_backend"] == [None, "b12x", "flashinfer_b12x"]
    assert knobs["performance_mode"] == [None, "interactivity", "throughput"]
    for name in ("attention_backend", "moe_backend", "linear_backend"):
        knob = made.space.knob(name)
        assert UNVERIFIED in knob.description and knob.where_listed == [v for v in knob.values if v in SM12X_BACKENDS[name]]
    assert "moe_backend" not in made.space.fixed
    text = yaml.safe_load(made.text)
    assert {k["name"]: k.get("where_listed") for k in text["knobs"]}["moe_backend"] == ["b12x", "flashinfer_b12x"]
    assert "unverified until a Spark runs it" in made.text.split("\nname:")[0]  # the header says so too


def test_space_new_on_026_offers_only_what_026_lists(tmp_path, monkeypatch):
    use_fake_vllm(tmp_path, monkeypatch, "0.26.0")
    knobs = knobs_of(new_space(str(nvfp4_moe(tmp_path)), "spark", 1))
    assert "B12X" not in knobs["attention_backend"]
    assert knobs["moe_backend"] == ["marlin", "flashinfer_b12x"]
    assert knobs["linear_backend"] == [None, "flashinfer_b12x"]
    assert knobs["performance_mode"] == [None, "interactivity", "throughput"]


def test_space_new_offers_no_moe_backend_for_a_dense_model_and_none_off_sm12x(tmp_path, monkeypatch):
    use_fake_vllm(tmp_path, monkeypatch, "0.33.0")
    dense = tmp_path / "llama-3.1-70b-instruct"
    shutil.copytree(CONFIGS / "llama-3.1-70b-instruct", dense)
    knobs = knobs_of(new_space(str(dense), "spark", 4))
    assert "moe_backend" not in knobs and "linear_backend" not in knobs  # 16-bit: nothing for b12x to run
    assert "B12X" in knobs["attention_backend"]
    h200 = knobs_of(new_space(str(nvfp4_moe(tmp_path)), "h200", 1))
    assert not any(v in SM12X_BACKENDS.get(k, ()) for k, values in h200.items() for v in values)
    assert h200["performance_mode"] == [None, "interactivity", "throughput"]


def test_space_new_without_vllm_writes_what_it_wrote_before(tmp_path):
    assert VllmEngine().version() is None
    made = new_space(str(nvfp4_moe(tmp_path)), "spark", 1)
    knobs = knobs_of(made)
    assert "performance_mode" not in knobs and "linear_backend" not in knobs
    assert made.space.fixed["moe_backend"] == "marlin"
    assert "vllm is not installed here" in made.text.split("\nname:")[0]
