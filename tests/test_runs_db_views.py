"""runs.db seen through other tools: optuna-dashboard reads the Optuna study back through its
HTTP API, and the sqlite-utils queries of docs/guide.md run as written and agree with the store."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from autotune.launchers.base import free_port
from autotune.store import Store
from real_study import real_study

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def guide_section(title: str) -> str:
    text = (ROOT / "docs" / "guide.md").read_text()
    return text.split(f"## {title}")[1].split("\n## ")[0]


def guide_queries() -> list[list[str]]:
    lines = re.findall(r"^(sqlite-utils runs\.db .+)$", guide_section("Looking at results"), flags=re.M)
    return [shlex.split(line) for line in lines]


def test_optuna_dashboard_reads_the_study_back(tmp_path_factory, gemma_gguf):
    study = real_study(tmp_path_factory, gemma_gguf)
    assert f"optuna-dashboard sqlite:///runs.db" in guide_section("Looking at results")
    port = free_port()
    proc = subprocess.Popen(
        [str(BIN / "optuna-dashboard"), f"sqlite:///{study.db}", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        summaries = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                summaries = httpx.get(f"{base}/api/studies", timeout=5).json()["study_summaries"]
                break
            except httpx.HTTPError:
                time.sleep(0.5)
        assert summaries is not None, "optuna-dashboard did not answer"
        (summary,) = [s for s in summaries if s["study_name"] == study.study]
        assert summary["directions"] == ["maximize"]
        detail = httpx.get(f"{base}/api/studies/{summary['study_id']}", params={"after": 0}, timeout=30).json()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    # Optuna holds every ask, repeats of a measured candidate included (told its stored result again)
    state_of = {"ok": "Complete", "failed": "Fail", "skipped": "Pruned"}
    stored = {}
    for t in Store(study.db).trials(study.study):
        key = (str(t.candidate.params["n_threads"]), str(t.candidate.params["type_v"]))
        stored.setdefault(key, set()).add((state_of[t.status], round(t.score, 3) if t.score is not None else None))
    seen = {}
    for t in detail["trials"]:
        params = {p["name"]: p["param_external_value"] for p in t["params"]}
        key = (params["n_threads"], params["type_v"])
        value = round(t["values"][0], 3) if t["state"] == "Complete" else None
        seen.setdefault(key, set()).add((t["state"], value))
    assert seen.keys() == stored.keys()
    for key, states in seen.items():
        assert states <= stored[key], (key, states, stored[key])
    assert any(state == "Complete" for states in seen.values() for state, _ in states)


def test_guide_sqlite_utils_queries_run_and_agree_with_the_store(tmp_path_factory, gemma_gguf):
    study = real_study(tmp_path_factory, gemma_gguf)
    queries = guide_queries()
    assert len(queries) == 2
    results = []
    for argv in queries:
        assert argv[:2] == ["sqlite-utils", "runs.db"]
        argv = [str(BIN / "sqlite-utils"), str(study.db), *argv[2:]]
        if "-p" in argv:
            argv[argv.index("-p") + 2] = study.study
        table = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert table.returncode == 0, table.stderr
        as_json = subprocess.run([a for a in argv if a != "--table"], capture_output=True, text=True, timeout=60)
        results.append((table.stdout, json.loads(as_json.stdout)))
    trials = Store(study.db).trials(study.study)

    table, ranked = results[0]  # the study's launched trials, fastest first
    assert "decode_tps" in table.splitlines()[0]
    launched = [t for t in trials if t.status != "skipped"]
    fastest_first = sorted(launched, key=lambda t: (t.objective is None, -(t.objective or 0.0), t.number))
    assert [r["number"] for r in ranked] == [t.number for t in fastest_first]
    for row in ranked:
        trial = next(t for t in launched if t.number == row["number"])
        assert row["status"] == trial.status
        assert row["decode_tps"] == (round(trial.objective, 1) if trial.objective is not None else None)

    table, why = results[1]  # what failed or was pruned, and why, across studies
    counts = {(r["status"], r["why"]): r["n"] for r in why}
    failed = next(t for t in trials if t.status == "failed")
    assert counts[("failed", failed.failure.failure_class)] >= 1
    assert sum(n for (status, _), n in counts.items() if status == "skipped") == sum(t.status == "skipped" for t in trials)
