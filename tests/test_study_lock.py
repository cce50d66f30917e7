"""One study, one owner: real processes contend for studies in one runs.db.

Every "other process" here is a real Python process (subprocess) using the same runs.db file.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.errors import StudyBusy
from autotune.store import Store
from autotune.study.lock import StudyLock, owner_of
from stand_in import tiny_llamacpp_space

ROOT = Path(__file__).resolve().parent.parent

HOLDER = """
import sys, time
from pathlib import Path
from autotune.store import Store
from autotune.study.lock import StudyLock
db, study, hold_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
with StudyLock(Store(db), study):
    Path(db + "." + study + ".held").write_text("held")
    time.sleep(hold_s)
"""


def spawn(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def hold(db: Path, study: str, seconds: float) -> subprocess.Popen:
    """A real process that owns `study` for `seconds` (returns once it holds it)."""
    proc = spawn(HOLDER, str(db), study, str(seconds))
    marker = Path(f"{db}.{study}.held")
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "the holder never took the lock"
        time.sleep(0.05)
    return proc


def space_file(tmp_path: Path) -> str:
    return str(tiny_llamacpp_space(tmp_path))


def test_second_search_on_a_busy_study_is_refused_naming_the_owner(tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    db = tmp_path / "runs.db"
    Store(db)
    holder = hold(db, "busy", 120)
    try:
        before = hashlib.sha256(db.read_bytes()).hexdigest()
        code = main(["search", "--space", space_file(tmp_path), "--db", str(db), "--study", "busy", "--trials", "1"])
        out = capsys.readouterr()
        text = (out.out + out.err).strip()
        assert code == 4, text
        assert text.startswith("error: study 'busy' is in use by another autotune process")
        assert f"PID {holder.pid} on {socket.gethostname()}, running since 20" in text
        assert "--wait" in text and len(text.splitlines()) == 1
        assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # nothing written: no study, no trial
        assert Store(db).trials("busy") == []
    finally:
        holder.kill()
        holder.wait()


def test_wait_takes_the_study_when_the_owner_finishes(tmp_path):
    db = tmp_path / "runs.db"
    Store(db)
    holder = hold(db, "s", 2.0)
    seen = []
    t0 = time.monotonic()
    with StudyLock(Store(db), "s", wait_s=60, poll_s=0.1, on_wait=seen.append) as lock:
        waited = time.monotonic() - t0
        assert lock.taken_over is None  # released properly, not taken over
        assert owner_of(Store(db), "s").pid == os.getpid()
    assert holder.wait(timeout=10) == 0
    assert seen and seen[0].pid == holder.pid
    assert waited > 0.5
    assert owner_of(Store(db), "s") is None


def test_wait_gives_up_after_its_limit(tmp_path):
    db = tmp_path / "runs.db"
    Store(db)
    holder = hold(db, "s", 60)
    try:
        with pytest.raises(StudyBusy, match="still in use"):
            StudyLock(Store(db), "s", wait_s=0.5, poll_s=0.1).acquire()
    finally:
        holder.kill()
        holder.wait()


def test_lock_of_a_killed_process_is_taken_over(tmp_path):
    db = tmp_path / "runs.db"
    Store(db)
    holder = hold(db, "s", 120)
    holder.send_signal(signal.SIGKILL)  # no finally, no release: the row stays
    holder.wait()
    assert owner_of(Store(db), "s").pid == holder.pid
    with StudyLock(Store(db), "s") as lock:
        assert lock.taken_over is not None and lock.taken_over.pid == holder.pid


def test_a_reused_pid_is_not_the_owner(tmp_path):
    """The recorded PID is alive but is another process now (its start time differs)."""
    db = tmp_path / "runs.db"
    store = Store(db)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.db["study_owners"].insert(
            {"study": "s", "host": socket.gethostname(), "pid": other.pid, "pid_start": "1",
             "started_at": "2026-01-01T00:00:00+00:00", "command": "autotune search"}
        )
        with StudyLock(Store(db), "s") as lock:
            assert lock.taken_over.pid == other.pid
    finally:
        other.kill()
        other.wait()


def test_an_owner_on_another_host_is_never_taken_over(tmp_path):
    db = tmp_path / "runs.db"
    Store(db).db["study_owners"].insert(
        {"study": "s", "host": "some-other-box", "pid": 1, "pid_start": None,
         "started_at": "2026-01-01T00:00:00+00:00", "command": "autotune search"}
    )
    with pytest.raises(StudyBusy, match="PID 1 on some-other-box"):
        StudyLock(Store(db), "s").acquire()


WORKER = textwrap.dedent(
    """
    import sys
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState
    from autotune.models import Candidate, Measurement, TrialResult
    from autotune.store import Store
    from autotune.study.lock import StudyLock
    db, study, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    store = Store(db)
    with StudyLock(store, study):
        opt = optuna.create_study(study_name=study, storage=store.optuna_storage(), load_if_exists=True,
                                  direction="maximize")
        for i in range(n):
            trial = opt.ask({"x": CategoricalDistribution([1, 2, 3, 4])})
            cand = Candidate(engine="llamacpp", params={"x": trial.params["x"], "i": i})
            store.begin_attempt(study, trial.number, cand, "h", 1)
            m = Measurement.of("decode_tps.prose", "tok/s", "1 stream", [float(i), float(i) + 1])
            store.save_trial(TrialResult(study=study, number=trial.number, candidate=cand, status="ok",
                                         measurements=[m], objective=float(i), score=float(i)))
            opt.tell(trial, float(i))
    print("done", study)
    """
)


def test_different_studies_run_side_by_side_in_one_db(tmp_path):
    """Three real processes write three studies (Optuna and autotune records) into one fresh
    runs.db at the same time: none fails with "database is locked", none loses a record."""
    db = tmp_path / "runs.db"
    n = 15
    procs = [spawn(WORKER, str(db), f"study-{i}", str(n)) for i in range(3)]
    outs = [p.communicate(timeout=300)[0].decode() for p in procs]
    for proc, out in zip(procs, outs):
        assert proc.returncode == 0, out[-2000:]
    store = Store(db)
    import optuna

    for i in range(3):
        trials = store.trials(f"study-{i}")
        assert [t.number for t in trials] == list(range(n))
        opt = optuna.load_study(study_name=f"study-{i}", storage=store.optuna_storage())
        assert sum(t.state.name == "COMPLETE" for t in opt.trials) == n
        assert store.open_attempts(f"study-{i}") == []
    assert list(store.db["study_owners"].rows) == []
