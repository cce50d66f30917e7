"""The study's run (issue 51): trials, their deferred gates, the confirmation, the noise relaunches
and the draft schedule, with the outcome judged once. Before, `commands/search.py` ran the stages
after the trials and read the study back and judged it again after each (`outcome_of` up to four
times a run)."""

from __future__ import annotations

import sys

import pytest

from stand_in import TINY_LLAMACPP, StandIn, stand_in_plan

SPACE = TINY_LLAMACPP + "gates: {{needle: null, qeval: null}}\n"


def _counting_outcome_of(monkeypatch) -> list[str]:
    """Count every call of autotune.study's `outcome_of`, wherever a module imported it from."""
    import autotune.study.outcome  # noqa: F401  (the modules that import it are loaded)
    from autotune.commands import search  # noqa: F401

    calls: list[str] = []
    original = next(m.outcome_of for name, m in list(sys.modules.items())
                    if name.startswith("autotune.study") and hasattr(m, "outcome_of"))

    def counted(*args, **kwargs):
        calls.append(args[1] if len(args) > 1 else kwargs.get("name", ""))
        return original(*args, **kwargs)

    for name, module in list(sys.modules.items()):
        if name.startswith("autotune.") and getattr(module, "outcome_of", None) is original:
            monkeypatch.setattr(module, "outcome_of", counted)
    return calls


def test_a_run_judges_its_outcome_once_and_answers_as_the_store_does(tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp")
    from autotune.commands import search
    from autotune.store import Store

    calls = _counting_outcome_of(monkeypatch)
    plan = stand_in_plan(tmp_path, SPACE, accuracy=False)
    outcome = search.run(plan, trials=2, confirm_rounds=2, noise_relaunches=3, launch=StandIn())
    assert calls == ["s"], calls  # before: after the trials, the confirmation, the noise relaunches, the schedule
    assert outcome.confirmation is not None and outcome.draft_schedule is not None and outcome.noise is not None
    monkeypatch.undo()
    from autotune.study.outcome import outcome_of

    stored = outcome_of(Store(tmp_path / "runs.db"), "s")
    for field in ("trials", "ranked", "baseline", "confirmation", "draft_schedule", "noise", "accuracy_failures"):
        assert getattr(outcome, field) == getattr(stored, field), field
