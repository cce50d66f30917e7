"""The Tuner's view of its study's trials: read from runs.db once when the Tuner starts and written
through on every save, so that a decision reads memory, not the database. The Tuner is the only
writer of its study while it runs (the study lock, autotune/study/lock.py), so the view and
runs.db say the same."""

from __future__ import annotations

from autotune.models import Candidate, TrialResult
from autotune.store import ATTEMPTS_BEFORE_FAILURE, CUT_STATUSES, Store


class StudyTrials:
    """Every trial row of one study, by number, as runs.db holds them."""

    def __init__(self, store: Store, study: str) -> None:
        self.store = store
        self.study = study
        self._by_number = {t.number: t for t in store.trials(study)}

    def all(self) -> list[TrialResult]:
        """Every trial, in number order (as `Store.trials`)."""
        return [self._by_number[n] for n in sorted(self._by_number)]

    def get(self, number: int) -> TrialResult | None:
        return self._by_number.get(number)

    def save(self, result: TrialResult) -> None:
        """Store `result` in runs.db and in the view (a row of the same number is replaced)."""
        self.store.save_trial(result)
        self._by_number[result.number] = result

    def by_candidate(self, candidate: Candidate) -> TrialResult | None:
        """As `Store.trial_by_candidate`: the first finished trial of this candidate, or its last cut
        attempt once it was cut ATTEMPTS_BEFORE_FAILURE times (which then counts as its failure)."""
        key = candidate.key()
        mine = [t for t in self.all() if t.candidate.key() == key]
        finished = next((t for t in mine if t.status in ("ok", "failed")), None)
        if finished is not None:
            return finished
        cut = [t for t in mine if t.status in CUT_STATUSES]
        return cut[-1] if len(cut) >= ATTEMPTS_BEFORE_FAILURE else None
