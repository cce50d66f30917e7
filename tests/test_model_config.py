"""The one reader of config.json and the parameter counts (issue 49), on every config of the corpus.

Counts are checked against what the publishers state (tests/corpus.py), and the closed form
against the count transformers' own modules give on the meta device."""

from __future__ import annotations

import json
import sys

import pytest

from autotune.errors import ConfigError
from autotune.checkpoint.config import ConfigReader, load_model_config
from autotune.checkpoint.params import CountMethod, count_params
from autotune.commands.space_new import new_space
from corpus import CORPUS, PUBLISHED, corpus_names, model_dir

NAMES = corpus_names()


def test_the_corpus_is_beside_the_checkout_and_every_config_has_its_published_size():
    assert NAMES, f"no configs under {CORPUS}: the corpus (shared/reference/configs) must be beside the checkout"
    assert sorted(PUBLISHED) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_counts_match_the_published_sizes(name):
    """Total within 2 % and read per token within 10 % of the published figures; a size class
    (Phi-4's "14B") within 6 % of the class, and within 2 % of the count the MANIFEST gives; an
    active figure that is a class ("A3B") within 20 %."""
    published = PUBLISHED[name]
    params = count_params(load_model_config(CORPUS / name))
    total_b = params.total / 1e9
    if published.class_size:
        assert total_b == pytest.approx(published.counted_b, rel=0.02)
        assert total_b == pytest.approx(published.total_b, rel=0.06)
    else:
        assert total_b == pytest.approx(published.total_b, rel=0.02)
    active_b = published.active_b or (published.total_b - (published.vision_b or 0))
    assert params.active / 1e9 == pytest.approx(active_b, rel=0.2 if published.active_class_size else 0.1)
    if published.vision_b:
        assert params.vision / 1e9 == pytest.approx(published.vision_b, rel=0.02)
    if published.mtp_b:
        assert params.mtp / 1e9 == pytest.approx(published.mtp_b, rel=0.05)


@pytest.mark.parametrize("name", NAMES)
def test_the_closed_form_agrees_with_the_meta_count(name):
    """Without torch and transformers the closed form counts: within 1 % of the meta count, where
    transformers can build the model (it cannot build remote-code architectures)."""
    config = load_model_config(CORPUS / name)
    closed = count_params(config, CountMethod.CLOSED_FORM)
    assert closed.method is CountMethod.CLOSED_FORM
    if config.reader is not ConfigReader.TRANSFORMERS:
        pytest.skip(f"{name}: transformers has no class for {config.model_type}; the closed form is all there is")
    meta = count_params(config, CountMethod.META)
    assert meta.method is CountMethod.META
    assert closed.total == pytest.approx(meta.total, rel=0.01)
    assert closed.active == pytest.approx(meta.active, rel=0.01)
    assert closed.vision == pytest.approx(meta.vision, rel=0.1, abs=1e7)
    assert closed.mtp == pytest.approx(meta.mtp, rel=0.02)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("nodes", [1, 4])
def test_every_config_gets_a_space_or_a_refusal_that_says_what_would_fit(tmp_path, name, nodes):
    try:
        made = new_space(str(model_dir(tmp_path, name)), "spark", nodes)
    except ConfigError as exc:
        message = str(exc)
        assert len(message.splitlines()) == 1
        assert "--layout" in message or "more boxes or a smaller checkpoint" in message, message
        return
    header = made.text.split("\nname:")[0]
    assert "# Parameters: " in header and ("counted on the meta device" in header or "closed form" in header)
    assert made.space.model.params_total_b == pytest.approx(count_params(made.space.model.path and
                                                                         load_model_config(made.space.model.path)).total
                                                            / 1e9, rel=1e-3)


@pytest.mark.parametrize(("name", "nodes"), [("deepseek-v3", 4), ("kimi-k2-instruct", 4)])
def test_what_does_not_fit_four_sparks_is_refused(tmp_path, name, nodes):
    with pytest.raises(ConfigError, match="does not fit on 4 x spark"):
        new_space(str(model_dir(tmp_path, name)), "spark", nodes)


def test_nemotron_3_nano_fits_one_spark(tmp_path):
    """30B-A3B in bf16 is ~63 GB: it fits one Spark (it was refused when counted as 102B)."""
    made = new_space(str(model_dir(tmp_path, "nvidia-nemotron-3-nano-30b-a3b-bf16")), "spark", 1)
    assert made.space.model.kv_layers == 6  # 6 attention layers of 52 keep a KV cache


def test_transformers_reads_where_it_knows_the_model_type_and_remote_code_never_runs():
    gemma = load_model_config(CORPUS / "gemma-3-27b-it")
    assert (gemma.reader, gemma.config_class) == (ConfigReader.TRANSFORMERS, "Gemma3Config")
    kimi = load_model_config(CORPUS / "kimi-k2-instruct")  # model_type kimi_k2 is remote code: its class is not
    assert (kimi.reader, kimi.config_class) == (ConfigReader.TRANSFORMERS, "DeepseekV3Config")
    nas = load_model_config(CORPUS / "llama-3_3-nemotron-super-49b-v1")  # DeciLM: remote code only
    assert nas.reader is ConfigReader.JSON
    assert sum(1 for layer in nas.layers if layer.mixer.value == "none") == 31


def test_without_transformers_the_json_is_read_with_every_assumption_named(monkeypatch, tmp_path):
    """No transformers: the raw JSON, the closed form, and the defaults it assumes said out loud;
    a config that leaves a required number to transformers is refused with one line."""
    monkeypatch.setitem(sys.modules, "transformers", None)
    phi = load_model_config(CORPUS / "phi-4")
    assert phi.reader is ConfigReader.JSON
    assert "head_dim: assumed hidden_size / num_attention_heads = 128" in phi.defaults
    params = count_params(phi)
    assert params.method is CountMethod.CLOSED_FORM
    assert params.total / 1e9 == pytest.approx(14.66, rel=0.01)
    with pytest.raises(ConfigError, match="no vocab_size.*install transformers"):
        count_params(load_model_config(CORPUS / "gemma-3-27b-it"))
    made = new_space(str(model_dir(tmp_path, "qwen3-30b-a3b")), "spark", 1)
    assert "closed form from the config's shapes: torch and transformers are not installed" in made.text
    assert any(w.startswith("note: parameters counted in closed form") for w in made.warnings)


def test_a_config_that_is_not_an_llm_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 768}))
    with pytest.raises(ConfigError, match="not the config of a decoder LLM"):
        load_model_config(tmp_path)
