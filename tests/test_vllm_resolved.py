"""What vLLM resolved at start (issue 30 item 2), read from the recorded logs of both versions
(tests/logs/ for 0.26.0, tests/logs/v0.33.0/), and carried from a study of the FAKE vLLM of each
version (tests/fakes/vllm_site.py, which prints its version's recorded lines) into runs.db, `show`
and the recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fakes.vllm_site import FAKE_GEMMA_SPACE, small_model_dir, use_fake_vllm

from autotune.cli import main
from autotune.engines.vllm import VllmEngine
from autotune.models import Candidate, Cluster, ClusterNode, ModelSpec, SearchSpace
from autotune.output.recipe import from_yaml
from autotune.store import Store
from autotune.trial.context import TrialContext

LOGS = Path(__file__).parent / "logs"
V033 = LOGS / "v0.33.0"
#: the capture sizes vLLM 0.26.0 and 0.33.0 both resolved by default (max_cudagraph_capture_size 512)
DEFAULT_SIZES = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]


def resolved(path: Path):
    return VllmEngine().resolved(path.read_text())


def test_a_healthy_compiled_start_of_0_26():
    got = resolved(LOGS / "clean__vllm_startup_ngram_draft4_compiled.log")
    assert got is not None
    assert got.model_dump() == {
        "engine_version": "0.26.0",
        "max_num_seqs": None,  # left to vLLM: it logs the value it chose only at DEBUG
        "attention_backend": "FLASH_ATTN",
        "moe_backend": None,
        "compilation_mode": "VLLM_COMPILE",
        "cudagraph_capture_sizes": DEFAULT_SIZES,
        "kv_cache_tokens": 3554618,
    }


def test_a_healthy_eager_start_of_0_26_with_max_num_seqs_set():
    got = resolved(LOGS / "clean__vllm_probe_fp8_kv_flash_attn_eager.log")
    assert got is not None
    assert (got.max_num_seqs, got.compilation_mode, got.cudagraph_capture_sizes) == (8, "NONE", [])
    assert (got.attention_backend, got.kv_cache_tokens) == ("FLASH_ATTN", 115009)


def test_the_moe_backend_0_26_selected():
    got = resolved(LOGS / "unclassified_crash__vllm_gpt_oss_harmony_request.log")
    assert got is not None and got.moe_backend == "TRITON"


def test_0_33_compiled_with_a_forced_backend():
    got = resolved(V033 / "kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2_compiled.log")
    assert got is not None
    assert (got.engine_version, got.attention_backend, got.compilation_mode) == ("0.33.0", "TRITON_ATTN", "VLLM_COMPILE")
    assert got.cudagraph_capture_sizes == DEFAULT_SIZES
    # it failed in its profile run, before the KV cache was sized: absent, not guessed
    assert got.kv_cache_tokens is None and got.max_num_seqs is None and got.moe_backend is None


def test_0_33_eager_with_the_backend_left_to_vllm():
    got = resolved(V033 / "unclassified_crash__vllm_missing_weight.log")
    assert got is not None
    assert (got.engine_version, got.attention_backend) == ("0.33.0", "FLASH_ATTN")
    assert (got.compilation_mode, got.cudagraph_capture_sizes) == ("NONE", [])


@pytest.mark.parametrize("log", [V033 / "bad_flag__vllm_unrecognized_arguments.log",
                                 V033 / "bad_flag__vllm_invalid_choice.log"])
def test_a_start_refused_before_the_engine_says_nothing_resolved(log):
    assert resolved(log) is None


def test_a_docker_launch_names_its_image(tmp_path):
    space = SearchSpace.model_validate({"name": "s", "engine": "vllm", "model": {"name": "m", "path": str(tmp_path)},
                                     "knobs": []})
    cluster = Cluster(nodes=[ClusterNode(ip="127.0.0.1")], image="vllm/vllm-openai:v0.33.0")
    ctx = TrialContext(study="s", space=space, model=ModelSpec(name="m", path=str(tmp_path)), engine=VllmEngine(),
                       logs_dir=tmp_path, launcher="docker", cluster=cluster)
    candidate = Candidate(engine="vllm", params={})
    assert ctx.render(candidate).image == "vllm/vllm-openai:v0.33.0"
    assert ctx.model_copy(update={"launcher": "process", "cluster": None}).render(candidate).image is None


SPACE = "name: fake-vllm-resolved\n" + FAKE_GEMMA_SPACE + """knobs:
  - {{name: max_num_seqs, values: [null, 8], default: null}}
  - {{name: enforce_eager, values: [null, true], default: null}}
workload: {{decode_max_tokens: 8, prompts_per_set: 1, repeats: 1, prefill_tokens: [], concurrency: [1],
           startup_timeout_s: 60}}
gates: {{needle: null, qeval: null}}
"""


@pytest.mark.parametrize("version", ["0.26.0", "0.33.0"])
def test_resolved_values_flow_from_the_log_to_runs_db_show_and_the_recipe(version, tmp_path, monkeypatch, capsys):
    use_fake_vllm(tmp_path, monkeypatch, version)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(model=small_model_dir(tmp_path)))
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(space), "--db", str(db), "--study", "r", "--trials", "2", "--confirm-rounds", "0",
            "--noise-relaunches", "0", "--try", "max_num_seqs=8,enforce_eager=true"]
    assert main(args) == 0, capsys.readouterr().out
    trials = {t.number: t for t in Store(db).trials("r")}
    base, tried = trials[0].resolved, trials[1].resolved
    assert base is not None and tried is not None
    assert (base.engine_version, base.max_num_seqs, base.compilation_mode) == (version, None, "VLLM_COMPILE")
    assert base.cudagraph_capture_sizes == DEFAULT_SIZES and base.attention_backend == "FLASH_ATTN"
    assert (tried.max_num_seqs, tried.compilation_mode, tried.cudagraph_capture_sizes) == (8, "NONE", [])
    # only 0.26.0's recorded start reached the KV cache sizing; the 0.33.0 stand-in prints no such line
    assert base.kv_cache_tokens == (524288 if version == "0.26.0" else None)

    capsys.readouterr()
    assert main(["show", "--db", str(db), "--study", "r"]) == 0
    shown = capsys.readouterr().out
    assert "what the engine resolved at start" in shown and "VLLM_COMPILE" in shown and "51 (1..512)" in shown
    assert f"(version {version})" in shown

    for number in (0, 1):
        out = tmp_path / f"r{number}.yaml"
        assert main(["export", "--db", str(db), "--study", "r", "--trial", str(number), "-o", str(out)]) == 0
        recipe = yaml.safe_load(out.read_text())
        keys = list(recipe)
        assert keys.index("resolved") == keys.index("launch") + 1  # beside the argv
        assert from_yaml(out.read_text()).resolved == trials[number].resolved
        assert recipe["provenance"]["engine_version"] == version and recipe["launch"]["image"] is None
    assert "  cudagraph_capture_sizes: [1, 2, 4, 8, 16, 24," in (tmp_path / "r0.yaml").read_text()  # one line
    assert yaml.safe_load((tmp_path / "r1.yaml").read_text())["resolved"]["max_num_seqs"] == 8
