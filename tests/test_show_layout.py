"""`show` at 80 columns, piped, and at 200 columns: every trial's config and verdict are printed
in full (issue 13: at 80 columns the old table squeezed both columns out)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.models import Candidate, GateOutcome, Measurement, NeedleCase, NeedleReport, QevalReport, TrialResult
from autotune.output.cells import diff_label
from autotune.gates.score import verdict
from autotune.space.candidates import load_space
from autotune.store import Store

ROOT = Path(__file__).resolve().parent.parent
STUDY = "layout"


def _trial(number: int, params: dict, **extra) -> TrialResult:
    base = {"chat_format": "gemma", "seed": 1234, "n_threads": 1, "type_k": "f16", "type_v": "f16",
            "flash_attn": False, "draft_k": 0, "n_batch": 512, "n_ubatch": 512, "n_ctx": 2048}
    return TrialResult(study=STUDY, number=number, candidate=Candidate(engine="llamacpp", params={**base, **params}), **extra)


def _qeval(correct: int) -> QevalReport:
    results = {f"t{i:03d}": i < correct for i in range(75)}
    return QevalReport(results=results, correct=correct, total=75, per_category={})


NEEDLE = NeedleReport(cases=[NeedleCase(length_tokens=1843, prompt_tokens=1840, depth=0.5, passed=True,
                                        expected="12345", answer="12345")])


def _ok(number: int, params: dict, tps: float, gates: list[GateOutcome] | None = None, correct: int = 19) -> TrialResult:
    ms = [
        Measurement.of("decode_tps.prose", "tok/s", "decode", [tps, tps * 1.01, tps * 0.99]),
        Measurement.of("decode_tps.structured", "tok/s", "decode", [tps * 1.1] * 3),
        Measurement.of("ttft_ms.prose", "ms", "ttft", [300.0]),
        Measurement.of("prefill_tps.1024", "tok/s", "prefill", [97.0]),
    ]
    # the gates as stored; `show` judges them again from this evidence (needle, qeval vs trial 0)
    return _trial(number, params, status="ok", measurements=ms, objective=tps, score=tps * 0.98, qeval=_qeval(correct),
                  needle=NEEDLE,
                  gates=gates or [GateOutcome(gate="qeval", passed=True, detail="reference")], duration_s=300.0,
                  predicted={"decode_tps": 33.2})


def build_db(path: Path) -> Path:
    """runs.db with one study of four trials saved through the Store: ran, ran, failed, rejected."""
    store = Store(path)
    store.save_study(STUDY, load_space("llamacpp-gemma3-270m"), "cpu", 1, "host")
    for trial in [
        _ok(0, {}, 23.6),
        _ok(1, {"n_threads": 2, "type_k": "q8_0", "type_v": "q8_0", "flash_attn": True, "draft_k": 8, "n_ctx": 4096}, 61.2),
        _trial(2, {"type_v": "q4_0"}, status="failed", reason="llama_init_from_model: quantized V cache requires flash_attn",
               failure={"failure_class": "kv_quant_needs_flash_attn", "message": "quantized V cache requires flash_attn"}),
        _ok(3, {"n_threads": 2, "draft_k": 4, "n_batch": 256, "n_ubatch": 128}, 40.1,
            [GateOutcome(gate="qeval", passed=False, detail="worse than the baseline: 9 vs 19 of 75, p=0.004")], correct=9),
    ]:
        store.save_trial(trial)
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return build_db(tmp_path / "runs.db")


def column_text(out: str) -> str:
    """Every table cell's text joined with single spaces, whatever the wrapping."""
    pieces = []
    for line in out.splitlines():
        pieces += [p.strip() for p in re.split(r"[│┃]", line) if p.strip()]
    return " ".join(" ".join(pieces).split())


def assert_nothing_dropped(out: str, db: Path) -> None:
    text = column_text(out)
    from autotune.study.outcome import outcome_of

    trials = outcome_of(Store(db), STUDY).trials  # gates as `show` judges them from the stored evidence
    base = trials[0].candidate
    for t in trials:
        for pair in diff_label(t.candidate, base).split():
            assert pair in text, f"trial {t.number}: {pair!r} missing"
        assert " ".join(verdict(t).split()) in text, f"trial {t.number}: verdict {verdict(t)!r} missing"
    assert "best: trial 1" in out


@pytest.mark.parametrize("columns", [80, 200])
def test_show_prints_config_and_verdict_at_80_and_200_columns(db, columns, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["show", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines() if "│" in line) <= columns
    assert_nothing_dropped(out, db)
    numbers = column_text(out)
    assert "61.2" in numbers and "19/75" in numbers
    if columns == 200:  # wide: one row per trial with its own columns
        assert "TTFT ms" in out and "verdict" in out


def test_show_piped_keeps_config_and_verdict(db):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "autotune", "show", "--db", str(db)], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert_nothing_dropped(out, db)


def test_show_names_what_the_objective_measures(tmp_path, monkeypatch, capsys):
    """A study tuned for 8 concurrent streams ranks aggregate output, not single-stream decode: the
    table's caption and the verdict say which (they said "decode" whatever the objective)."""
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["show", "--db", str(build_db(tmp_path / "decode.db"))]) == 0
    assert "decode tok/s, 1 stream, geometric mean of prose and structured" in column_text(capsys.readouterr().out)
    space = load_space("llamacpp-gemma3-270m")
    space = space.model_copy(update={"workload": space.workload.model_copy(update={"concurrency": [1, 8]}),
                                     "objective": space.objective.model_copy(update={"metric": "output_tps_c8"})})
    path = tmp_path / "c8.db"
    build_db(path)
    Store(path).db["tuning_studies"].update(STUDY, {"space": space.model_dump_json()})
    assert main(["show", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert "output tok/s of 8 concurrent requests (one wave)" in column_text(out)
    assert "tok/s output at 8 streams: x" in out
