"""The Tuner decides from its own view of the study: runs.db is read once when it starts and
written through on every save, never re-read per decision (it read every trial back at about ten
places per trial before), and what it stores is what it decided from."""

from __future__ import annotations

from collections import Counter

import pytest

from autotune.store import Store
from stand_in import StandIn, tiny_llamacpp_space

SPACE = (
    "name: tiny\nengine: llamacpp\nmodel: {{name: m, path: {model}}}\n"
    "knobs:\n  - {{name: n_threads, values: [1, 2, 3, 4], default: 1}}\n"
    "  - {{name: flash_attn, values: [false, true], default: false}}\n"
)


def test_a_study_reads_its_trials_from_runs_db_once_not_per_decision(tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp")
    from autotune.commands.setup import prepare
    from autotune.study.reporter import SilentReporter
    from autotune.study.tuner import Tuner

    reads: Counter[str] = Counter()
    for name in ("trials", "trial", "trial_by_candidate", "cut_attempts"):
        original = getattr(Store, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            reads[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Store, name, counted)
    space = tiny_llamacpp_space(tmp_path, SPACE)
    plan = prepare(space_name=str(space), model_path=None, db_path=tmp_path / "runs.db", study="s", hardware="cpu",
                   nodes=1, accuracy=False, logs_dir=tmp_path)
    reads.clear()
    tuner = Tuner(plan.ctx, plan.store, plan.pruner, "h", trials=6, reporter=SilentReporter(), launch=StandIn())
    outcome = tuner.run()
    assert len([t for t in outcome.trials if t.status == "ok"]) == 6
    # one read as the Tuner starts, one for the answer it returns: six trials cost no more than one
    assert sum(reads.values()) <= 2, dict(reads)
    stored = {t.number: t for t in Store(tmp_path / "runs.db").trials("s")}
    assert {t.number: t for t in outcome.trials} == stored
