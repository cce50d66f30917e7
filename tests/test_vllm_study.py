"""autotune's vLLM path end to end against a FAKE vLLM (tests/fakes/vllm_site.py): flag check,
launch argv, health, streaming, tokenize, metrics, what-was-selected parsing, learned failures,
recipe. The real thing ran on an H200 (docs/measurements.md); this keeps the wiring honest in CI.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from fakes.vllm_site import small_model_dir, use_fake_vllm

from autotune.cli import main
from autotune.engines import vllm as vllm_engine
from autotune.models import AcceptanceSource
from autotune.store import Store

SPACE = """
name: fake-vllm
engine: vllm
model: {{name: gemma-3-270m, path: {model}, prompt_style: completion, head_dim: 256, n_kv_heads: 1, n_layers: 18,
        params_total_b: 0.27, weight_bits: 16, context_max: 4096}}
fixed: {{max_model_len: 4096, gpu_memory_utilization: 0.5, spec_method: ngram}}
knobs:
  - {{name: kv_cache_dtype, values: [auto, nvfp4], default: auto}}
  - {{name: draft_k, values: [0, 4], default: 0}}
workload:
  decode_max_tokens: 32
  prompts_per_set: 1
  repeats: 2
  prefill_tokens: [300]
  prefill_repeats: 1
  concurrency: [1, 4]
  startup_timeout_s: 60
gates:
  needle: {{lengths_tokens: [400], depths: [0.5], timeout_s: 60}}
  qeval: {{tasks: 6, concurrency: 3, timeout_s: 60}}
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    use_fake_vllm(tmp_path, monkeypatch, name="fake_site")
    model = small_model_dir(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(model=model))
    return space


def test_vllm_study_against_the_fake(fake, tmp_path, capsys):
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(fake), "--db", str(db), "--trials", "4", "--confirm-rounds", "0", "--study", "v"]
    assert main(args) == 0, capsys.readouterr().out
    trials = {t.number: t for t in Store(db).trials("v")}
    base = trials[0]
    assert base.status == "ok"
    argv = base.launch.server.argv
    assert argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]
    assert base.selected.get("attention_backend") == "FLASH_ATTN"
    assert base.needle and all(c.passed for c in base.needle.cases)
    assert base.qeval and base.qeval.total == 6
    assert base.measurement("output_tps.c4").median > 0
    nvfp4 = [t for t in trials.values() if t.candidate.params["kv_cache_dtype"] == "nvfp4"]
    failed = [t for t in nvfp4 if t.status == "failed"]
    assert len(failed) == 1 and failed[0].failure.failure_class.startswith("kv_dtype")
    assert all(t.status == "skipped" for t in nvfp4 if t not in failed)
    spec = next(t for t in trials.values() if t.status == "ok" and t.candidate.params["draft_k"] == 4)
    assert spec.measurement("spec_acceptance_length").median == pytest.approx(3.0)  # the stand-in: 1 + K // 2
    assert spec.acceptance_source is AcceptanceSource.METRICS_COUNTERS and base.acceptance_source is None
    assert spec.measurement("tokens_per_chunk.prose").median == pytest.approx(3.0, rel=0.1)
    assert '"num_speculative_tokens": 4' in " ".join(spec.launch.server.argv).replace("'", '"') or any(
        "num_speculative_tokens" in a for a in spec.launch.server.argv
    )
    out = tmp_path / "r.yaml"
    assert main(["export", "--db", str(db), "--study", "v", "-o", str(out)]) == 0
    recipe = yaml.safe_load(out.read_text())
    assert recipe["engine"] == "vllm" and recipe["selected"]["attention_backend"] == "FLASH_ATTN"
    for number, source in ((spec.number, "metrics_counters"), (0, None)):  # the baseline drafts nothing
        one = tmp_path / f"trial-{number}.yaml"
        assert main(["export", "--db", str(db), "--study", "v", "--trial", str(number), "-o", str(one)]) == 0
        assert yaml.safe_load(one.read_text()).get("acceptance_source") == source
    assert sys.executable not in out.read_text()


def test_space_naming_a_flag_this_vllm_lacks_is_refused(fake, tmp_path, capsys):
    text = fake.read_text().replace("knobs:", "knobs:\n  - {name: linear_backend, values: [null, cutlass], default: null}")
    fake.write_text(text)
    help_lines = Path(vllm_engine.__file__)  # noqa: F841 (the fake's help is the recorded 0.26.0 one)
    # the recorded 0.26.0 help has --linear-backend, so this space passes; drop it to act as an older vLLM
    recorded = (Path(__file__).parent / "logs" / "vllm_serve_help_all.txt").read_text()
    older = tmp_path / "older_help.txt"
    older.write_text("\n".join(line for line in recorded.splitlines() if "--linear-backend" not in line))
    main_py = tmp_path / "fake_site" / "vllm" / "entrypoints" / "cli" / "main.py"
    main_py.write_text(main_py.read_text().replace(str(Path(__file__).parent / "logs" / "vllm_serve_help_all.txt"), str(older)))
    code = main(["search", "--space", str(fake), "--db", str(tmp_path / "runs.db")])
    out = capsys.readouterr()
    assert code == 2
    assert "has no option --linear-backend (knob linear_backend)" in out.err
    assert not (tmp_path / "runs.db").exists()


def test_two_node_study_on_a_local_ray_cluster(fake, tmp_path, capsys):
    """--nodes 2 without a cluster file: two raylets on this host stand in for two boxes; the
    fake vLLM server runs on the head after Ray reports both nodes alive."""
    pytest.importorskip("ray", reason="pip install ray (the [ray] extra)")
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(fake), "--db", str(db), "--trials", "1", "--nodes", "2", "--no-accuracy",
            "--confirm-rounds", "0", "--study", "two"]
    assert main(args) == 0, capsys.readouterr().out
    [base] = [t for t in Store(db).trials("two") if t.status == "ok"]
    roles = [(n.node, n.role) for n in base.launch.nodes]
    assert roles == [(0, "head"), (1, "worker"), (0, "server")]
    server = base.launch.server.argv
    assert server[server.index("--tensor-parallel-size") + 1] == "2"
    assert server[server.index("--distributed-executor-backend") + 1] == "ray"
    assert base.measurement("decode_tps.prose").median > 0


def test_docker_launcher_needs_a_cluster_file(fake, tmp_path, capsys):
    code = main(["search", "--space", str(fake), "--db", str(tmp_path / "runs.db"), "--launcher", "docker"])
    assert code == 2
    assert "needs --cluster FILE" in capsys.readouterr().err
    assert not (tmp_path / "runs.db").exists()


def test_time_budget_stops_before_a_trial_that_would_not_fit(fake, tmp_path, capsys):
    """A budget shorter than one trial: the baseline runs (nothing is known before it), the next
    trial is not started, and a resumed run with a larger budget goes on from there."""
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(fake), "--db", str(db), "--trials", "3", "--confirm-rounds", "0",
            "--study", "t", "--no-accuracy"]
    assert main([*args, "--time-budget", "0.01"]) == 0
    out = capsys.readouterr().out
    launched = [t for t in Store(db).trials("t") if t.status != "skipped"]
    assert [t.number for t in launched] == [0] and launched[0].duration_s > 0.6  # 0.01 min
    assert "stopped early: time budget" in out and "a trial takes" in out
    assert main([*args, "--time-budget", "30"]) == 0
    assert len([t for t in Store(db).trials("t") if t.status != "skipped"]) >= 2


def test_time_budget_skips_a_confirmation_that_would_not_fit(fake, tmp_path, capsys, monkeypatch):
    # the best must not be the baseline (no confirmation then): K=4 decodes 3x faster at one stream,
    # with steps long enough that a loaded machine's late wake-up cannot turn that round
    monkeypatch.setenv("FAKE_VLLM_STEP_S", "0.02")
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(fake), "--db", str(db), "--trials", "2", "--study", "c", "--no-accuracy",
            "--try", "draft_k=4"]
    assert main([*args, "--confirm-rounds", "0"]) == 0
    capsys.readouterr()
    assert main([*args, "--confirm-rounds", "2", "--time-budget", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "stopped early: confirmation skipped: time budget" in out
    assert Store(db).confirmation("c") is None


def test_gates_run_only_where_they_can_change_the_pick_unless_asked_for_every_trial(fake, tmp_path, capsys):
    common = ["search", "--space", str(fake), "--trials", "3", "--confirm-rounds", "0", "--noise-relaunches", "0"]
    db = tmp_path / "default.db"
    assert main([*common, "--db", str(db), "--study", "d"]) == 0, capsys.readouterr().out
    ok = [t for t in Store(db).trials("d") if t.status == "ok"]
    assert len(ok) == 2 and ok[0].qeval is not None  # the baseline is qeval's reference: always gated
    for t in ok[1:]:  # the other either could rank first (gated) or could not (dominated, no accuracy)
        if t.dominated:
            assert t.score <= ok[0].score and t.qeval is None and t.needle is None and "cannot rank first" in t.dominated
        else:
            assert t.score > ok[0].score and t.qeval is not None
    every = tmp_path / "every.db"
    assert main([*common, "--db", str(every), "--study", "e", "--gates", "every-trial"]) == 0
    ok = [t for t in Store(every).trials("e") if t.status == "ok"]
    assert len(ok) == 2 and all(t.qeval is not None and not t.dominated for t in ok)
