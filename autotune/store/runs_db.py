"""runs.db through sqlite-utils: hosts, probe_results, tuning_studies, trial_results,
measurements, failures (learned), accuracy_failures (numerics classes that failed a gate), confirmations,
confirmation_launches, recipes, study_owners (who runs a study now) and
attempts (launches in flight). Optuna keeps its own tables (studies, trials, ...) in the same file
through its RDB storage (`optuna_storage()`), hence the distinct names.

Several processes may use one runs.db at once (different studies side by side): every connection
waits up to BUSY_TIMEOUT_S for another's write instead of failing with "database is locked", and
every write transaction starts with BEGIN IMMEDIATE. (A deferred transaction that reads first and
writes second cannot wait: SQLite answers "database is locked" at once to avoid a deadlock.)

Its schema is one append-only list of migrations (`MIGRATIONS`, autotune/store/migrations.py).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from autotune.errors import StoreError
from autotune.models import (
    AccuracyFailure,
    Candidate,
    Confirmation,
    ConfirmationLaunch,
    DraftScheduleReport,
    FailureInfo,
    HostFingerprint,
    LearnedFailure,
    ProbeResult,
    SearchSpace,
    TrialEnergy,
    TrialResult,
    utc_now,
)
from autotune.store.migrations import MIGRATIONS
from autotune.verdict.gpu_state import flags_of, usual_clock
from autotune.verdict.noise import LaunchNoise, NoiseKey, pooled

BUSY_TIMEOUT_S = 60.0


def boxes_text(boxes: tuple[int, ...] | list[int]) -> str | None:
    """How runs.db stores the boxes of a launch: "0,1" (None: no pool)."""
    return ",".join(map(str, boxes)) or None


def attempt_boxes(row: dict[str, Any]) -> tuple[int, ...]:
    """The boxes an attempt row (or a launch sample row) names."""
    text = row.get("boxes") or ""
    return tuple(int(b) for b in text.split(",") if b)


#: attempts that did not end with a result of their own: re-run once on resume, then a failure
CUT_STATUSES = ("interrupted", "crashed")
ATTEMPTS_BEFORE_FAILURE = 2
#: a failure every candidate shared (autotune.failures.learning.mark_environment): re-run on every resume
ENVIRONMENT = "environment"
#: statuses that stand for a re-run of their candidate once it has one
RERUN_STATUSES = (*CUT_STATUSES, ENVIRONMENT)


def check_writable(db_path: Path) -> None:
    """Refuse, before anything runs, a runs.db path that cannot be created or written."""
    parent = db_path.parent if str(db_path.parent) else Path(".")
    target = db_path if db_path.exists() else parent
    if not target.exists():
        raise StoreError(f"cannot create {db_path}: folder {parent} does not exist")
    if not os.access(target, os.W_OK):
        raise StoreError(f"cannot write {db_path}: permission denied (choose another path with --db)")

class Store:
    """One runs.db. Opening it creates and migrates it unless `must_exist` is set."""

    def __init__(self, path: Path | str, *, must_exist: bool = False) -> None:
        self.path = Path(path)
        if must_exist and not self.path.exists():
            raise StoreError(f"no database at {self.path}: run `autotune search` first or pass --db")
        if not self.path.exists():
            parent = self.path.parent if str(self.path.parent) else Path(".")
            if not parent.is_dir():
                raise StoreError(f"cannot create {self.path}: folder {parent} does not exist")
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level="IMMEDIATE")
            self.db = sqlite_utils.Database(conn)
            if not self.db[MIGRATIONS.migrations_table].exists() or list(MIGRATIONS.pending(self.db)):
                with self.atomic():  # two processes opening a new runs.db: one migrates, one waits
                    MIGRATIONS.apply(self.db)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot use {self.path} as runs.db: {exc}") from exc

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One write transaction that holds the write lock from its start (BEGIN IMMEDIATE)."""
        conn = self.db.conn
        if conn.in_transaction:
            with self.db.atomic():
                yield
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @property
    def optuna_url(self) -> str:
        return f"sqlite:///{self.path.resolve()}"

    def optuna_storage(self):
        """Optuna's RDB storage on this file, waiting for other processes' writes like Store does."""
        import optuna
        import sqlalchemy.exc
        from sqlalchemy import event

        # the driver opens no transaction of its own (isolation_level None); each one SQLAlchemy
        # begins is BEGIN IMMEDIATE, so it waits for another process's write instead of failing
        kwargs = {"connect_args": {"timeout": BUSY_TIMEOUT_S, "isolation_level": None}}
        for attempt in range(5):
            try:
                storage = optuna.storages.RDBStorage(self.optuna_url, engine_kwargs=kwargs)
                break
            except sqlalchemy.exc.SQLAlchemyError:  # another process created Optuna's tables meanwhile
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
        event.listen(storage.engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        return storage

    # ------------------------------------------------------------ hosts and probes

    def save_host(self, host: HostFingerprint) -> str:
        key = host.key()
        if not self.db["hosts"].count_where("key = ?", [key]):
            self.db["hosts"].insert(
                {"key": key, "hostname": host.hostname, "fingerprint": host.model_dump_json(), "first_seen": utc_now()}
            )
        return key

    def save_probe_results(self, host_key: str, results: list[ProbeResult]) -> None:
        rows = [
            {
                "host_key": host_key,
                "feature": r.feature,
                "status": r.status,
                "signature": r.signature,
                "evidence": r.evidence,
                "params": json.dumps(r.params, sort_keys=True),
                "duration_s": r.duration_s,
                "probed_at": utc_now(),
            }
            for r in results
        ]
        with self.atomic():
            self.db["probe_results"].upsert_all(rows, pk=("host_key", "feature"))

    def probe_results(self, host_key: str) -> list[ProbeResult]:
        return [
            ProbeResult(
                feature=row["feature"],
                status=row["status"],
                evidence=row["evidence"] or "",
                signature=row["signature"],
                params=json.loads(row["params"] or "{}"),
                duration_s=row["duration_s"] or 0.0,
            )
            for row in self.db["probe_results"].rows_where("host_key = ?", [host_key], order_by="feature")
        ]

    # ------------------------------------------------------------ studies and trials

    def save_study(
        self,
        name: str,
        space: SearchSpace,
        hardware: str,
        nodes: int,
        host_key: str,
        fingerprint: str | None = None,
        accuracy: bool = True,
    ) -> None:
        existing = self.study(name)
        if existing is not None:
            if existing["space_name"] != space.name or existing["engine"] != space.engine:
                raise StoreError(
                    f"study {name!r} already exists for space {existing['space_name']!r}; "
                    "pick another --study name"
                )
            return
        self.db["tuning_studies"].insert(
            {
                "name": name,
                "space_name": space.name,
                "engine": space.engine,
                "hardware": hardware,
                "nodes": nodes,
                "host_key": host_key,
                "space": space.model_dump_json(),
                "created_at": utc_now(),
                "fingerprint": fingerprint,
                "accuracy": int(accuracy),
            }
        )

    def study_space(self, name: str) -> SearchSpace | None:
        """The space a study was created from (None when there is no such study)."""
        row = self.study(name)
        return None if row is None else SearchSpace.model_validate_json(row["space"])

    def study_reference(self, name: str) -> int:
        """The trial qeval compares with: trial 0 unless the user named another."""
        row = self.study(name)
        return 0 if row is None or row.get("reference_trial") is None else int(row["reference_trial"])

    def set_study_reference(self, name: str, trial: int) -> None:
        self.db["tuning_studies"].update(name, {"reference_trial": trial})

    def study_accuracy(self, name: str) -> bool:
        """Whether the study was created with its accuracy gates on (unknown: on, so nothing passes unchecked)."""
        row = self.study(name)
        return row is None or row.get("accuracy") is None or bool(row["accuracy"])

    def study(self, name: str) -> dict[str, Any] | None:
        rows = list(self.db["tuning_studies"].rows_where("name = ?", [name]))
        return rows[0] if rows else None

    def studies(self) -> list[dict[str, Any]]:
        return list(self.db["tuning_studies"].rows_where(order_by="created_at"))

    def save_trial(self, result: TrialResult) -> None:
        row = {
            "study": result.study,
            "number": result.number,
            "candidate_key": result.candidate.key(),
            "params": json.dumps(result.candidate.params, sort_keys=True),
            "status": result.status,
            "reason": result.reason,
            "failure_class": result.failure.failure_class if result.failure else None,
            "objective": result.objective,
            "score": result.score,
            "started_at": result.started_at,
            "duration_s": result.duration_s,
            "result": result.model_dump_json(),
        }
        measurements = [
            {
                "study": result.study,
                "trial": result.number,
                "name": m.name,
                "unit": m.unit,
                "condition": m.condition,
                "median": m.median,
                "mad": m.mad,
                "samples": json.dumps(m.samples),
            }
            for m in result.measurements
        ]
        with self.atomic():
            self.db["trial_results"].upsert(row, pk=("study", "number"))
            self.db["measurements"].delete_where("study = ? and trial = ?", [result.study, result.number])
            if measurements:
                self.db["measurements"].insert_all(measurements)
            self.db["attempts"].delete_where("study = ? and number = ?", [result.study, result.number])

    def trials(self, study: str) -> list[TrialResult]:
        return [
            TrialResult.model_validate_json(row["result"])
            for row in self.db["trial_results"].rows_where("study = ?", [study], order_by="number")
        ]

    def trial(self, study: str, number: int) -> TrialResult | None:
        rows = list(self.db["trial_results"].rows_where("study = ? and number = ?", [study, number]))
        return TrialResult.model_validate_json(rows[0]["result"]) if rows else None

    def trial_by_candidate(self, study: str, candidate: Candidate) -> TrialResult | None:
        """The first finished (ok or failed) trial of this exact candidate in this study; or, when
        it was cut ATTEMPTS_BEFORE_FAILURE times (interrupted / crashed), the last cut attempt,
        which then counts as its failure."""
        rows = self.db["trial_results"].rows_where(
            "study = ? and candidate_key = ? and status in ('ok', 'failed')",
            [study, candidate.key()],
            order_by="number",
            limit=1,
        )
        row = next(iter(rows), None)
        if row is not None:
            return TrialResult.model_validate_json(row["result"])
        cut = self.cut_attempts(study, candidate)
        return cut[-1] if len(cut) >= ATTEMPTS_BEFORE_FAILURE else None

    def cut_attempts(self, study: str, candidate: Candidate) -> list[TrialResult]:
        """The interrupted or crashed attempts of this candidate, oldest first."""
        rows = self.db["trial_results"].rows_where(
            f"study = ? and candidate_key = ? and status in {CUT_STATUSES!r}",
            [study, candidate.key()],
            order_by="number",
        )
        return [TrialResult.model_validate_json(row["result"]) for row in rows]

    # ------------------------------------------------------------ attempts in flight

    def begin_attempt(
        self, study: str, number: int, candidate: Candidate, host: str, pid: int, boxes: tuple[int, ...] = ()
    ) -> None:
        """A launch starts (on `boxes` of the study's pool): kept until its result is saved, so a
        process killed mid-trial leaves a trace the next owner of the study turns into a `crashed` trial."""
        self.db["attempts"].upsert(
            {
                "study": study,
                "number": number,
                "candidate_key": candidate.key(),
                "host": host,
                "pid": pid,
                "started_at": utc_now(),
                "boxes": boxes_text(boxes),
            },
            pk=("study", "number"),
        )

    def end_attempt(self, study: str, number: int) -> None:
        self.db["attempts"].delete_where("study = ? and number = ?", [study, number])

    def open_attempts(self, study: str) -> list[dict[str, Any]]:
        return list(self.db["attempts"].rows_where("study = ?", [study], order_by="number"))

    # ------------------------------------------------------------ learned failures

    def add_failure(
        self,
        host_key: str,
        engine: str,
        failure: FailureInfo,
        candidate: Candidate,
        study: str | None = None,
        trial: int | None = None,
    ) -> None:
        values = {k: candidate.values().get(k) for k in failure.implicates}
        self.db["failures"].insert(
            {
                "host_key": host_key,
                "engine": engine,
                "failure_class": failure.failure_class,
                "feature": failure.feature,
                "implicates": json.dumps(failure.implicates),
                "knob_values": json.dumps(values, sort_keys=True),
                "evidence": "\n".join(failure.evidence),
                "study": study,
                "trial": trial,
                "learned_at": utc_now(),
            }
        )

    def forget_failures(self, study: str, trials: list[int]) -> int:
        """Drop what `trials` of `study` taught (they failed for a cause no knob explains); returns how many."""
        if not trials or "failures" not in self.db.table_names():
            return 0
        where = f"study = ? and trial in ({','.join('?' * len(trials))})"
        with self.atomic():
            gone = self.db["failures"].count_where(where, [study, *trials])
            self.db["failures"].delete_where(where, [study, *trials])
        return gone

    def learned_failures(self, host_key: str, engine: str) -> list[LearnedFailure]:
        return [
            LearnedFailure.from_row(row)
            for row in self.db["failures"].rows_where("host_key = ? and engine = ?", [host_key, engine], order_by="id")
        ]

    def save_confirmation(self, confirmation: Confirmation) -> None:
        self.db["confirmations"].upsert(
            {"study": confirmation.study, "confirmed_at": utc_now(), "result": confirmation.model_dump_json()},
            pk="study",
        )

    def confirmation(self, study: str) -> Confirmation | None:
        rows = list(self.db["confirmations"].rows_where("study = ?", [study]))
        return Confirmation.model_validate_json(rows[0]["result"]) if rows else None

    def save_draft_schedule(self, report: DraftScheduleReport) -> None:
        self.db["draft_schedules"].upsert(
            {"study": report.study, "saved_at": utc_now(), "result": report.model_dump_json()}, pk="study")

    def draft_schedule(self, study: str) -> DraftScheduleReport | None:
        rows = list(self.db["draft_schedules"].rows_where("study = ?", [study]))
        return DraftScheduleReport.model_validate_json(rows[0]["result"]) if rows else None

    def add_confirmation_launch(self, launch: ConfirmationLaunch) -> ConfirmationLaunch:
        """Store one relaunch of a confirmation round; returns it with its id."""
        row = launch.model_dump(exclude={"id"})
        return launch.model_copy(update={"id": self.db["confirmation_launches"].insert(row).last_pk})

    def add_accuracy_failure(self, failure: AccuracyFailure) -> AccuracyFailure:
        row = {"study": failure.study, "trial": failure.trial, "knob_values": json.dumps(failure.knob_values, sort_keys=True),
               "result": failure.model_dump_json(), "created_at": failure.created_at}
        return failure.model_copy(update={"id": self.db["accuracy_failures"].insert(row).last_pk})

    def update_accuracy_failure(self, failure: AccuracyFailure) -> AccuracyFailure:
        """Store what isolating a failed class narrowed it to (same row)."""
        self.db["accuracy_failures"].update(failure.id, {
            "knob_values": json.dumps(failure.knob_values, sort_keys=True), "result": failure.model_dump_json()})
        return failure

    def accuracy_failures(self, study: str) -> list[AccuracyFailure]:
        """The numerics classes that failed accuracy in this study, in the order they were learned."""
        rows = self.db["accuracy_failures"].rows_where("study = ?", [study], order_by="id")
        return [AccuracyFailure.model_validate_json(row["result"]).model_copy(update={"id": row["id"]}) for row in rows]

    def relaunch_seconds(self, study: str) -> list[float]:
        """Wall seconds of the study's confirmation relaunches that were timed (objective-only launches)."""
        rows = self.db["confirmation_launches"].rows_where("study = ? and duration_s is not null", [study])
        return [row["duration_s"] for row in rows]

    def confirmation_launches(self, study: str, best_trial: int, baseline_trial: int) -> list[ConfirmationLaunch]:
        """Every relaunch of this pair's confirmation rounds, over all sittings, in order."""
        rows = self.db["confirmation_launches"].rows_where(
            "study = ? and best_trial = ? and baseline_trial = ?", [study, best_trial, baseline_trial], order_by="id"
        )
        return [ConfirmationLaunch.model_validate(row) for row in rows]

    # ------------------------------------------------------------ launch-to-launch noise

    def add_launch_sample(
        self, key: NoiseKey, study: str, candidate: Candidate, objective: float, source: str, trial: int,
        *, energy: TrialEnergy | None = None, boxes: tuple[int, ...] = (),
    ) -> int:
        """One launch's objective value, a sample of `key`'s noise (its host, engine and the objective
        metric it measures: its study's); `energy` the GPU's state in that launch (its clock, whether
        it throttled), `boxes` where it ran (the study's pool; () without one). Returns the sample's id."""
        return self.db["launch_samples"].insert(
            {
                "host_key": key.host,
                "engine": key.engine,
                "study": study,
                "candidate_key": candidate.key(),
                "objective": objective,
                "source": source,
                "trial": trial,
                "measured_at": utc_now(),
                "metric": key.metric,
                "sm_clock_mhz": energy.sm_clock_mhz() if energy else None,
                "throttled": int(energy.throttled) if energy else None,
                "boxes": boxes_text(boxes),
            }
        ).last_pk

    def slowed_samples(self, key: NoiseKey) -> frozenset[int]:
        """Launch samples of `key`'s host and engine (any metric) measured on a slowed GPU (throttled,
        or SM clocks below the host's usual by more than autotune.verdict.gpu_state.CLOCK_DROP_SHARE):
        left out of every noise pool."""
        rows = list(self.db["launch_samples"].rows_where("host_key = ? and engine = ?", [key.host, key.engine]))
        usual = usual_clock([r["sm_clock_mhz"] for r in rows if r.get("sm_clock_mhz") and not r.get("throttled")])
        return frozenset(r["id"] for r in rows if flags_of(r.get("sm_clock_mhz"), bool(r.get("throttled")), usual))

    def launch_groups(self, key: NoiseKey, exclude: frozenset[int] = frozenset()) -> list[list[float]]:
        """Objectives per (study, candidate, boxes) on this host and engine, of this objective metric
        only: one list per config launched on the same boxes (the box is a factor: a box that runs
        faster is not launch noise); `exclude` leaves out samples by id, and a launch on a slowed GPU
        is always left out."""
        exclude = exclude | self.slowed_samples(key)
        groups: dict[tuple[str, str, str | None], list[float]] = {}
        rows = self.db["launch_samples"].rows_where(
            "host_key = ? and engine = ? and metric = ?", [key.host, key.engine, key.metric], order_by="id"
        )
        for row in rows:
            if row["id"] not in exclude:
                groups.setdefault((row["study"], row["candidate_key"], row.get("boxes")), []).append(row["objective"])
        return list(groups.values())

    def launch_samples_of(self, study: str, candidate: Candidate) -> list[float]:
        rows = self.db["launch_samples"].rows_where(
            "study = ? and candidate_key = ?", [study, candidate.key()], order_by="id"
        )
        return [row["objective"] for row in rows]

    def launch_noise(self, key: NoiseKey, exclude: frozenset[int] = frozenset()) -> LaunchNoise | None:
        """The launch-to-launch spread of `key` (an objective metric on a host and engine), without the
        samples in `exclude` (a verdict pools its own launches with this, and must not count them twice)."""
        return pooled(self.launch_groups(key, exclude))

    # ------------------------------------------------------------ recipes

    def save_recipe(self, study: str, trial: int | None, kind: str, yaml_text: str) -> None:
        self.db["recipes"].insert(
            {"study": study, "trial": trial, "kind": kind, "created_at": utc_now(), "yaml": yaml_text}
        )
