"""A/A with the real engine: two arms that are the same config (they differ only in an environment
variable llama.cpp never reads) must never end in a winner. And a study whose needle cannot fit
some candidates' context refuses those before launch and still finishes.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.store import Store
from autotune.verdict.noise import NoiseKey
from gemma_space import GEMMA_ON_LLAMACPP

pytestmark = pytest.mark.engine

AA_SPACE = """
name: aa-test
""" + GEMMA_ON_LLAMACPP + """fixed: {{chat_format: gemma, seed: 1234, n_ctx: 1024, n_threads: 1}}
knobs:
  - {{name: AUTOTUNE_AA_ARM, kind: env, values: [a, b], default: a, description: read by nothing}}
workload:
  decode_max_tokens: 32
  prompt_sets: [prose]
  prompts_per_set: 1
  repeats: 2
  warmup_requests: 1
  prefill_tokens: []
  startup_timeout_s: 120
gates: {{needle: null, qeval: null}}
"""


def test_aa_study_ends_without_a_winner(tmp_path: Path, gemma_gguf: Path, capsys):
    space = tmp_path / "aa.yaml"
    space.write_text(AA_SPACE.format(alias=f"aa-{uuid.uuid4().hex[:8]}", model=gemma_gguf))
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(space), "--db", str(db), "--study", "aa", "--trials", "2",
            "--confirm-rounds", "2", "--try", "AUTOTUNE_AA_ARM=b"]
    assert main(args) == 0
    out = capsys.readouterr().out
    store = Store(db)
    trials = [t for t in store.trials("aa") if t.status == "ok"]
    assert len(trials) == 2
    groups = store.launch_groups(NoiseKey(host=store.study("aa")["host_key"], engine="llamacpp",
                                          metric="decode_tps_geomean"))
    assert max(len(g) for g in groups) >= 2  # the baseline was relaunched: the noise is across launches
    confirmation = store.confirmation("aa")
    if confirmation is not None:  # arm b ranked first: the confirmation ran and must not call it a win
        assert not confirmation.winner, confirmation.verdict
        assert len(confirmation.best_samples) == 2 and len(confirmation.baseline_samples) == 2
    assert "winner: trial" not in out
    recipe = tmp_path / "r.yaml"
    assert main(["export", "--db", str(db), "--study", "aa", "-o", str(recipe)]) == 0
    verdict = yaml.safe_load(recipe.read_text())["verdict"]
    assert verdict["status"] in ("baseline", "no winner")


NEEDLE_SPACE = """
name: needle-fit-test
""" + GEMMA_ON_LLAMACPP + """fixed: {{chat_format: gemma, seed: 1234, n_threads: 1}}
knobs:
  - {{name: n_ctx, values: [1024, 2048], default: 2048}}
workload:
  decode_max_tokens: 16
  prompt_sets: [prose]
  prompts_per_set: 1
  repeats: 1
  warmup_requests: 0
  prefill_tokens: []
  startup_timeout_s: 120
gates:
  needle: {{lengths_tokens: [1200], depths: [0.5], timeout_s: 120}}
  qeval: null
"""


def test_candidate_too_short_for_the_needle_is_refused_and_the_study_finishes(tmp_path, gemma_gguf, capsys):
    space = tmp_path / "needle.yaml"
    space.write_text(NEEDLE_SPACE.format(alias=f"nf-{uuid.uuid4().hex[:8]}", model=gemma_gguf))
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(space), "--db", str(db), "--study", "nf", "--trials", "2",
            "--confirm-rounds", "0", "--noise-relaunches", "0"]
    assert main(args) == 0  # before: the 1024 candidate raised a configuration error and the study exited 2
    trials = Store(db).trials("nf")
    short = [t for t in trials if t.candidate.params["n_ctx"] == 1024]
    assert short and all(t.status == "skipped" for t in short)
    assert "cannot hold the study's needle at 1200 tokens" in short[0].reason
    [base] = [t for t in trials if t.number == 0]
    assert base.status == "ok" and {c.length_tokens for c in base.needle.cases} == {1200}
    assert main(args) == 0  # resume: nothing left RUNNING, nothing relaunched
    assert len([t for t in Store(db).trials("nf") if t.status != "skipped"]) == 1


def test_configuration_error_inside_a_trial_fails_that_trial_not_the_study(tmp_path, gemma_gguf, capsys):
    # a 40-token needle is shorter than the needle prompt without filler: the needle code raises a
    # configuration error mid-trial, after the engine is up and throughput is measured
    space = tmp_path / "tiny-needle.yaml"
    text = NEEDLE_SPACE.format(alias=f"tn-{uuid.uuid4().hex[:8]}", model=gemma_gguf).replace("[1200]", "[40]")
    space.write_text(text)
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(space), "--db", str(db), "--study", "tn", "--trials", "1",
            "--confirm-rounds", "0", "--noise-relaunches", "0"]
    assert main(args) == 0  # before: exit 2, the attempt left RUNNING in Optuna and relaunched on every resume
    [base] = [t for t in Store(db).trials("tn") if t.number == 0]
    assert base.status == "failed" and base.failure.failure_class == "configuration_error"
    assert "shorter than the prompt without filler" in base.reason
    assert main(args) == 0
    assert len([t for t in Store(db).trials("tn") if t.status != "skipped"]) == 1


SITTINGS_SPACE = """
name: sittings-test
""" + GEMMA_ON_LLAMACPP + """fixed: {{chat_format: gemma, seed: 1234, n_ctx: 1024}}
knobs:
  - {{name: n_threads, values: [1, 2], default: 1}}
workload:
  decode_max_tokens: 32
  prompt_sets: [prose]
  prompts_per_set: 1
  repeats: 2
  warmup_requests: 1
  prefill_tokens: []
  startup_timeout_s: 120
gates: {{needle: null, qeval: null}}
"""


def test_a_study_resumed_in_sittings_judges_every_round_it_ran(tmp_path: Path, gemma_gguf: Path):
    """Sitting 1 runs one confirmation round (as a time budget would leave it), sitting 2 asks for
    two in all: it runs only round 2 and the verdict judges both, with the real engine."""
    space = tmp_path / "s.yaml"
    space.write_text(SITTINGS_SPACE.format(alias=f"sit-{uuid.uuid4().hex[:8]}", model=gemma_gguf))
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(space), "--db", str(db), "--study", "s", "--trials", "2",
            "--try", "n_threads=2", "--noise-relaunches", "0"]
    assert main([*args, "--confirm-rounds", "1"]) == 0
    store = Store(db)
    first = store.confirmation("s")
    if first is None:
        pytest.skip("the baseline (1 thread) ranked first on this machine: nothing to confirm")
    assert first.status == "not confirmed" and first.rounds == 1 and len(first.launches) == 2
    assert main([*args, "--confirm-rounds", "2"]) == 0
    second = Store(db).confirmation("s")
    assert second.best_trial == first.best_trial
    assert second.rounds == 2 and second.rounds_now == 1 and second.launches[:2] == first.launches
    assert len(second.best_samples) == 2 and len(second.baseline_samples) == 2
    assert second.status in ("winner", "no winner"), second.verdict  # a verdict, not "not confirmed"
    assert "1 of them in earlier sittings" in second.verdict
    relaunched = sorted(p.name for p in (tmp_path / "autotune-logs").rglob("confirm-r*"))
    assert len(relaunched) == 4, relaunched  # each round's two relaunches, none twice
