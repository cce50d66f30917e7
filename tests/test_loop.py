"""The whole loop for real: llama.cpp + Gemma 3 270M -> Optuna study in runs.db -> recipe YAML.

A small space (4 candidates) and a short workload keep it to a few minutes on 2 CPU cores. The
quantized-V-cache-without-flash-attention candidates fail for real in llama.cpp; the first one
teaches the study to skip the second without launching it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.store import Store
from procs import engine_pids
from gemma_space import GEMMA_ON_LLAMACPP

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parent.parent

SPACE = """
name: loop-test
""" + GEMMA_ON_LLAMACPP + """fixed: {{chat_format: gemma, seed: 1234, n_ctx: 2048, flash_attn: false}}
knobs:
  - {{name: n_threads, values: [1, 2], default: 1, numerics_neutral: true}}
  - {{name: type_v, values: [f16, q8_0], default: f16}}
workload:
  decode_max_tokens: 32
  prompt_sets: [prose, structured]
  prompts_per_set: 1
  repeats: 2
  warmup_requests: 1
  prefill_tokens: [256]
  prefill_repeats: 1
  startup_timeout_s: 120
gates:
  needle: {{lengths_tokens: [900], depths: [0.5], timeout_s: 120}}
  qeval: {{tasks: 8, timeout_s: 240}}
"""




@pytest.fixture
def space(tmp_path: Path, gemma_gguf: Path) -> tuple[str, str]:
    alias = f"loop-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "loop.yaml"
    path.write_text(SPACE.format(alias=alias, model=gemma_gguf))
    return str(path), alias


def test_study_resume_and_export(space, tmp_path, capsys):
    path, alias = space
    db = tmp_path / "runs.db"
    args = ["search", "--space", path, "--db", str(db), "--trials", "4", "--confirm-rounds", "1", "--study", "loop"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "trial 1 of 4" in out and "best:" in out

    trials = Store(db).trials("loop")
    by_status = {s: [t for t in trials if t.status == s] for s in ("ok", "failed", "skipped")}
    base = trials[0]
    assert base.number == 0 and base.status == "ok"
    assert base.candidate.params["n_threads"] == 1 and base.candidate.params["type_v"] == "f16"
    for name in ("decode_tps.prose", "decode_tps.structured", "ttft_ms.prose", "prefill_tps.256", "startup_s"):
        m = base.measurement(name)
        assert m is not None and m.median > 0, name
    assert base.measurement("decode_tps.prose").condition.startswith("decode tok/s, 1 stream, prose")
    assert base.needle is not None and base.needle.cases[0].prompt_tokens > 800
    assert base.qeval is not None and base.qeval.total == 8
    assert base.selected["flash_attn"] == "disabled" and base.selected["kv_cache_v"] == "f16"
    assert base.predicted["decode_tps"] > 0  # the planner's figure, kept beside the measured one
    # where the trial's seconds went (issue 12): every phase it ran, in order, adding up to its wall time
    assert list(base.phase_s) == ["start", "warm-up", "decode", "prefill", "needle", "qeval", "teardown"]
    assert abs(base.phase_s["start"] - base.measurement("startup_s").median) < 1.0
    assert all(v > 0 for k, v in base.phase_s.items() if k != "teardown")
    assert 0.8 * base.duration_s < sum(base.phase_s.values()) <= base.duration_s
    assert not engine_pids(alias)

    # q8_0 V without flash attention cannot create a context: one launch fails, the other is learned
    q8 = [t for t in trials if t.candidate.params["type_v"] == "q8_0"]
    launched = [t for t in q8 if t.status == "failed"]
    assert len(launched) == 1
    failure = launched[0].failure
    assert failure.failure_class == "kv_quant_needs_flash_attn"
    assert any("quantized V cache requires flash_attn" in line for line in failure.evidence)
    assert all(t.status == "skipped" and t.reason.startswith("learned:") for t in q8 if t is not launched[0])
    # every feasible candidate ran once: (1, f16) and (2, f16)
    assert sorted(t.candidate.params["n_threads"] for t in by_status["ok"]) == [1, 2]
    # n_threads is marked numerics-neutral: (2, f16) reuses the baseline's needle and qeval, asks neither;
    # unless it measured slower than the baseline (a busy machine): then it cannot rank first and skips them
    two = next(t for t in by_status["ok"] if t.candidate.params["n_threads"] == 2)
    if two.dominated:
        assert two.score <= base.score and two.qeval is None and two.accuracy_from is None
    else:
        assert two.accuracy_from == 0 and two.qeval == base.qeval and two.needle == base.needle
    assert "needle" not in two.phase_s and "qeval" not in two.phase_s and "decode" in two.phase_s

    # resume: the same command finds everything measured and launches nothing new
    assert main(args) == 0
    assert len([t for t in Store(db).trials("loop") if t.status != "skipped"]) == len(by_status["ok"]) + 1

    recipe_path = tmp_path / "recipe.yaml"
    assert main(["export", "--db", str(db), "--study", "loop", "-o", str(recipe_path)]) == 0
    recipe = yaml.safe_load(recipe_path.read_text())
    assert recipe["kind"] == "measured" and recipe["engine"] == "llamacpp"
    assert recipe["launch"]["nodes"][0]["argv"][:3] == ["python3", "-m", "llama_cpp.server"]
    assert recipe["provenance"]["study"] == "loop" and recipe["provenance"]["engine_version"]
    assert any(n["name"] == "decode_tps.prose" and "1 stream" in n["condition"] for n in recipe["numbers"])
    assert any(line.startswith("needle:") for line in recipe["accuracy"])
    assert any(line.startswith("qeval:") for line in recipe["accuracy"])

    assert main(["show", "--db", str(db), "--study", "loop"]) == 0
    shown = capsys.readouterr().out
    assert "kv_quant_needs_flash_attn" in shown
    assert "seconds per phase" in shown


def test_dry_run_launches_nothing(space, tmp_path, capsys):
    path, alias = space
    assert main(["search", "--space", path, "--db", str(tmp_path / "runs.db"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 candidates, 4 survive pruning" in out
    # the baseline and the planner's first three, the baseline among them: what a new study queues
    assert out.count("python3 -m llama_cpp.server --model") == 3 and "the other 1 that survive pruning" in out
    assert main(["search", "--space", path, "--db", str(tmp_path / "runs.db"), "--dry-run", "--all-candidates"]) == 0
    assert capsys.readouterr().out.count("python3 -m llama_cpp.server --model") == 4
    assert not (tmp_path / "runs.db").exists()
    assert not engine_pids(alias)


def test_ctrl_c_stops_the_engine(space, tmp_path):
    path, alias = space
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "search", "--space", path, "--db", str(tmp_path / "runs.db"), "--trials", "2"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while not engine_pids(alias) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert engine_pids(alias), "the engine never started"
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out.decode()
    assert b"interrupted" in out
    deadline = time.monotonic() + 15
    while engine_pids(alias) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not engine_pids(alias)


CONCURRENT = """
name: loop-concurrent
""" + GEMMA_ON_LLAMACPP + """fixed: {{chat_format: gemma, seed: 1234, n_ctx: 2048, flash_attn: false}}
knobs:
  - {{name: n_threads, values: [1, 2], default: 1}}
workload:
  decode_max_tokens: 16
  prompt_sets: [prose]
  prompts_per_set: 1
  repeats: 1
  warmup_requests: 1
  prefill_tokens: []
  concurrency: [1, 3]
  startup_timeout_s: 120
objective: {{metric: output_tps_c3}}
gates: {{needle: null, qeval: null}}
"""


def test_an_objective_at_three_streams_is_measured_on_llama_cpp(tmp_path, gemma_gguf, capsys):
    """llama-cpp-python's server ends a stream when another request waits for the model
    (interrupt_requests, on by default): a wave of 3 requests measured 2 cut-short streams and the
    trial failed. With it off they queue, and the wave's aggregate output is the objective."""
    path = tmp_path / "concurrent.yaml"
    path.write_text(CONCURRENT.format(alias=f"conc-{uuid.uuid4().hex[:8]}", model=gemma_gguf))
    db = tmp_path / "runs.db"
    assert main(["search", "--space", str(path), "--db", str(db), "--trials", "1", "--confirm-rounds", "0"]) == 0
    [trial] = Store(db).trials("loop-concurrent-cpu-x1")
    assert trial.status == "ok", trial.reason
    wave = next(m for m in trial.measurements if m.name == "output_tps.c3")
    assert trial.objective == pytest.approx(wave.median, rel=1e-3) and wave.failed_requests == 0
    assert "--interrupt_requests" in trial.launch.nodes[0].argv
    assert "output at 3 streams" in capsys.readouterr().out
