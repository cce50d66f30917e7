"""Every attempt is accounted for: cut attempts are marked in runs.db and Optuna, shown, re-run once.

The engine tests kill a real `autotune search` (llama.cpp + Gemma 3 270M) with SIGKILL and SIGINT
in the middle of a trial, then resume it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune.cli import main
from autotune.models import Candidate, TrialResult
from autotune.store import Store
from gemma_space import SHORT_WORKLOAD
from procs import engine_pids
from stand_in import StandIn, tiny_llamacpp_space

ROOT = Path(__file__).resolve().parent.parent


def cand(**params) -> Candidate:
    return Candidate(engine="llamacpp", params=params)


def test_a_candidate_cut_once_is_re_run_cut_twice_is_a_failure(tmp_path):
    store = Store(tmp_path / "runs.db")
    c = cand(n_threads=2)
    store.save_trial(TrialResult(study="s", number=1, candidate=c, status="interrupted", reason="Ctrl-C"))
    assert store.trial_by_candidate("s", c) is None  # not measured: launch it again
    store.save_trial(TrialResult(study="s", number=4, candidate=c, status="crashed", reason="killed"))
    counted = store.trial_by_candidate("s", c)
    assert counted is not None and counted.number == 4 and counted.status == "crashed"


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_resume_marks_what_a_killed_process_left_running(tmp_path, capsys):
    """runs.db as `kill -9` leaves it: Optuna trial RUNNING, an attempt row, no result."""
    pytest.importorskip("llama_cpp")
    from autotune.commands.setup import prepare
    from autotune.study.tuner import STATUS_ATTR, Tuner

    space = tiny_llamacpp_space(tmp_path)
    db = tmp_path / "runs.db"
    plan = prepare(space_name=str(space), model_path=None, db_path=db, study="s", hardware="cpu", nodes=1,
                   accuracy=False, logs_dir=tmp_path)
    store = plan.store
    opt = optuna.create_study(study_name="s", storage=store.optuna_storage(), direction="maximize")
    asked = opt.ask({"n_threads": CategoricalDistribution([1, 2])})
    from autotune.space.candidates import make_candidate

    candidate = make_candidate(plan.space, dict(asked.params))
    pid = dead_pid()
    store.begin_attempt("s", asked.number, candidate, "this-host", pid)
    orphan = opt.ask({"n_threads": CategoricalDistribution([1, 2])})  # asked, never launched

    store.save_study("s", plan.space, "cpu", 1, "h")
    assert main(["show", "--db", str(db), "--study", "s"]) == 0
    out = capsys.readouterr().out
    assert f"trial {asked.number}: running now (PID {pid} on this-host" in out  # another host: cannot tell

    tuner = Tuner(plan.ctx, store, plan.pruner, "h", trials=1, launch=StandIn())
    again = tuner._account_for_cut_attempts(opt)
    assert [c.key() for c in again] == [candidate.key()]
    cut = store.trial("s", asked.number)
    assert cut.status == "crashed" and f"PID {pid} on this-host" in cut.reason
    assert store.open_attempts("s") == []
    states = {t.number: (t.state, t.user_attrs.get(STATUS_ATTR)) for t in opt.get_trials()}
    assert states[asked.number] == (TrialState.FAIL, "crashed")
    assert states[orphan.number] == (TrialState.FAIL, "crashed")
    assert main(["show", "--db", str(db), "--study", "s", "--json"]) == 0
    [shown] = json.loads(capsys.readouterr().out)
    assert shown["status"] == "crashed" and "ended during this trial without a result" in shown["reason"]


# ---------------------------------------------------------------- real engine, real kill


SPACE = """
name: attempts-test
engine: llamacpp
model: {{name: gemma-3-270m-q4_k_m, served_name: {alias}, path: {model}, prompt_style: completion, context_max: 2048}}
hardware: auto
fixed: {{chat_format: gemma, seed: 1234, n_ctx: 1024, flash_attn: false}}
knobs:
  - {{name: n_threads, values: [1, 2], default: 1}}
""" + SHORT_WORKLOAD


def search_process(space: Path, db: Path, tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", "search", "--space", str(space), "--db", str(db), "--study", "a",
         "--trials", "1", "--no-accuracy", "--confirm-rounds", "0"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def wait_for_engine(alias: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not engine_pids(alias):
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "the engine never started"
        time.sleep(0.2)


@pytest.fixture
def engine_space(tmp_path: Path, gemma_gguf: Path) -> tuple[Path, str]:
    alias = f"att-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.format(alias=alias, model=gemma_gguf))
    return path, alias


@pytest.mark.engine
def test_kill_9_mid_trial_then_resume(engine_space, tmp_path, capsys):
    space, alias = engine_space
    db = tmp_path / "runs.db"
    proc = search_process(space, db, tmp_path)
    wait_for_engine(alias, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 15
    while engine_pids(alias) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not engine_pids(alias), "the engine outlived a kill -9 of autotune"

    assert main(["show", "--db", str(db), "--study", "a"]) == 0
    assert f"trial 0: crashed: autotune (PID {proc.pid}" in capsys.readouterr().out

    # resume: the lock of the dead process is taken over, trial 0 recorded as crashed, re-run once
    assert main(["search", "--space", str(space), "--db", str(db), "--study", "a", "--trials", "1",
                 "--no-accuracy", "--confirm-rounds", "0"]) == 0
    capsys.readouterr()
    trials = Store(db).trials("a")
    assert [(t.number, t.status) for t in trials][:1] == [(0, "crashed")] and len(trials) == 2
    rerun = trials[1]
    assert rerun.status == "ok", rerun.reason
    assert rerun.candidate == trials[0].candidate and f"PID {proc.pid}" in trials[0].reason  # re-run first
    study = optuna.load_study(study_name="a", storage=Store(db).optuna_storage())
    assert study.trials[0].state == TrialState.FAIL and study.trials[0].user_attrs["autotune_status"] == "crashed"
    assert main(["show", "--db", str(db), "--study", "a", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [t["status"] for t in shown] == ["crashed", "ok"] and "killed or crashed" in shown[0]["reason"]
    assert not engine_pids(alias)


@pytest.mark.engine
def test_ctrl_c_mid_trial_is_marked_interrupted(engine_space, tmp_path, capsys):
    space, alias = engine_space
    db = tmp_path / "runs.db"
    proc = search_process(space, db, tmp_path)
    wait_for_engine(alias, proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out.decode()
    [cut] = Store(db).trials("a")
    assert cut.status == "interrupted" and cut.reason.startswith("interrupted (Ctrl-C / SIGTERM)")
    study = optuna.load_study(study_name="a", storage=Store(db).optuna_storage())
    assert study.trials[0].state == TrialState.FAIL and study.trials[0].user_attrs["autotune_status"] == "interrupted"
    assert Store(db).open_attempts("a") == [] and list(Store(db).db["study_owners"].rows) == []
    assert main(["show", "--db", str(db), "--study", "a", "--json"]) == 0
    [shown] = json.loads(capsys.readouterr().out)
    assert shown["status"] == "interrupted" and "at: " in shown["reason"]  # the stage it was cut in


@pytest.mark.engine
def test_a_second_search_of_a_running_study_is_refused(engine_space, tmp_path, capsys):
    """The issue's first report: two searches of one study both ran, the baseline twice."""
    space, alias = engine_space
    db = tmp_path / "runs.db"
    first = search_process(space, db, tmp_path)
    wait_for_engine(alias, first)
    code = main(["search", "--space", str(space), "--db", str(db), "--study", "a", "--trials", "1",
                 "--no-accuracy", "--confirm-rounds", "0"])
    out = capsys.readouterr()
    assert code == 4, out.out + out.err
    assert f"in use by another autotune process (PID {first.pid} on" in out.err
    text, _ = first.communicate(timeout=300)
    assert first.returncode == 0, text.decode()
    trials = Store(db).trials("a")
    assert [(t.number, t.status) for t in trials] == [(0, "ok")]  # the baseline ran once
