"""What a failed trial teaches the study, stored as learned failures in runs.db.

- A signature that implicates knobs: learn their values, and where the signature covers a class of
  values of a knob (autotune.engines.signatures.Covers), the space's other values in that class too (each
  with an evidence line naming the failed value it was generalized from). When an implicated knob
  was left to the engine (None) and the engine reported what it selected, blame the selection
  instead: the selected value fails when asked for explicitly too, and "left to the engine" fails
  only together with the knobs that steer that selection (a KV dtype makes vLLM pick FlashInfer),
  not always.
- A failure no signature explains (`FailureCause.UNEXPLAINED`): isolate the knob values that broke
  (autotune/failures/isolation.py) and learn those, with the evidence and the cost.
- Nothing from an ENVIRONMENT failure (the host, a package, the driver, NCCL, the image: no knob
  value explains it, so none is learned and nothing is isolated; the study decides whether to stop
  or retry) and nothing from LIMITS (memory, time, load, the study's settings: the knobs together).

Isolation records live in their own table, `isolations` (own migration set, so this module's
schema evolves apart from autotune/store/migrations.py's).
"""

from __future__ import annotations

from collections.abc import Callable

import sqlite_utils
from sqlite_utils.migrations import Migrations

from autotune.failures.isolation import Isolation, isolate
from autotune.models import (
    Candidate, EnvironmentFailure, FailureCause, FailureInfo, Scalar, SearchSpace, TrialResult, utc_now,
)
from autotune.engines.signatures import covers_for
from autotune.models import LearnedFailure
from autotune.store import ENVIRONMENT, Store
from autotune.trial.context import TrialContext
from autotune.trial.launch import Launch, LaunchRequest, Purpose

#: knobs that steer an engine's own choice of another knob (when that one is left to the engine)
SELECTION_INPUTS: dict[str, tuple[str, ...]] = {
    "attention_backend": ("kv_cache_dtype", "block_size"),
    "moe_backend": ("quantization",),
}
MIGRATIONS = Migrations("autotune-learning")


@MIGRATIONS()
def m001_isolations(db: sqlite_utils.Database) -> None:
    db["isolations"].create(
        {"id": int, "study": str, "trial": int, "host_key": str, "engine": str, "created_at": str, "result": str},
        pk="id",
    )


def save_isolation(store: Store, host_key: str, engine: str, isolation: Isolation) -> None:
    MIGRATIONS.apply(store.db)
    store.db["isolations"].insert({
        "study": isolation.study, "trial": isolation.trial, "host_key": host_key, "engine": engine,
        "created_at": utc_now(), "result": isolation.model_dump_json(),
    })


def isolations(store: Store, study: str) -> list[Isolation]:
    if "isolations" not in store.db.table_names():
        return []
    rows = store.db["isolations"].rows_where("study = ?", [study], order_by="id")
    return [Isolation.model_validate_json(row["result"]) for row in rows]


def _cause(t: TrialResult) -> tuple[str, str] | None:
    f = t.failure
    return (f.failure_class, f.message) if t.status in ("failed", ENVIRONMENT) and f and not f.implicates else None


def shared_failure(trials: list[TrialResult], baseline: Candidate) -> list[TrialResult]:
    """The failed trials to stop the study on: the baseline failed, and a candidate with other knob
    values failed the same way (same class and message, nothing implicated), so every candidate
    shares that cause (model, engine, workload, host) and more launches would only repeat it. Every
    failed trial with that cause, the baseline first; [] when there is no such pair."""
    base = next((t for t in trials if t.candidate.key() == baseline.key() and t.status == "failed"), None)
    if base is None or _cause(base) is None:
        return []
    same = [t for t in trials if t.status == "failed" and _cause(t) == _cause(base)]
    if not any(t.candidate.key() != base.candidate.key() for t in same):
        return []
    return sorted(same, key=lambda t: (t.number != base.number, t.number))


def environment_failed(trials: list[TrialResult], result: TrialResult, baseline: Candidate) -> list[TrialResult]:
    """The trials to stop the study on after `result`: those every candidate shared with the
    baseline (`shared_failure`), or `result` alone when its signature blames the environment; []
    when the study goes on."""
    shared = shared_failure(trials, baseline)
    if shared:
        return shared
    failure = result.failure
    if result.status == "failed" and failure is not None and failure.cause is FailureCause.ENVIRONMENT:
        return [result]
    return []


def as_environment(trial: TrialResult, fix: str | None) -> TrialResult:
    """`trial` kept as history of a failure every candidate shared: re-run on resume, never a measurement."""
    failure = trial.failure.model_copy(update={"fix": fix or trial.failure.fix}) if trial.failure else None
    return trial.model_copy(update={"status": ENVIRONMENT, "failure": failure})


def environment_of(trials: list[TrialResult]) -> EnvironmentFailure | None:
    """The failure every candidate shared, where the study's latest launch ended on one (a resume
    that got past it ran later launches: then None)."""
    launched = [t for t in trials if t.status != "skipped"]
    latest = max(launched, key=lambda t: t.number, default=None)
    if latest is None or latest.status != ENVIRONMENT or latest.failure is None:
        return None
    same = [t for t in trials if t.status == ENVIRONMENT and _cause(t) == _cause(latest)]
    first = min(same, key=lambda t: t.number)
    failure = first.failure
    assert failure is not None
    return EnvironmentFailure(
        failure_class=failure.failure_class, message=failure.message,
        trials=sorted({t.number for t in same}), evidence=decisive_line(failure),
        fix=next((t.failure.fix for t in same if t.failure and t.failure.fix), None),
    )


def decisive_line(failure: FailureInfo) -> str | None:
    """The log line that shows the failure best: the last evidence line autotune did not write itself."""
    lines = [line.strip() for line in failure.evidence if line.strip() and not line.startswith("autotune:")]
    return lines[-1] if lines else None


def learned_in_study(store: Store, study: str) -> list[LearnedFailure]:
    """The failures this study's trials taught (knob values now skipped on this host)."""
    return [LearnedFailure.from_row(row) for row in store.db["failures"].rows_where("study = ?", [study], order_by="id")]


def blamed(failure: FailureInfo, candidate: Candidate, selected: dict[str, str], baseline: Candidate) -> list[dict[str, Scalar]]:
    """The knob values to learn from a failure whose signature implicates knobs (see module doc)."""
    values = {k: candidate.values().get(k) for k in failure.implicates}
    left_to_engine = [k for k, v in values.items() if v is None and selected.get(k)]
    if not left_to_engine:
        return [values]
    learned = []
    for knob in left_to_engine:
        learned.append({**{k: v for k, v in values.items() if k != knob}, knob: selected[knob]})
    steering = {
        k: candidate.values().get(k)
        for knob in left_to_engine
        for k in SELECTION_INPUTS.get(knob, ())
        if k in candidate.values() and candidate.values().get(k) != baseline.values().get(k)
    }
    learned.append({**values, **steering})
    return learned


def covered(failure: FailureInfo, values: dict[str, Scalar], space: SearchSpace) -> list[tuple[dict[str, Scalar], str]]:
    """The siblings of learned `values`: each other value of the space's choices for a knob that lies
    in a class the failure's signature covers, with the evidence line that says so."""
    choices = {k.name: k.values for k in space.knobs}
    siblings: list[tuple[dict[str, Scalar], str]] = []
    for cover in covers_for(failure.failure_class, space.engine):
        failed = values.get(cover.knob)
        if failed not in cover.values:
            continue
        for value in choices.get(cover.knob, []):
            if value != failed and value in cover.values:
                note = f"autotune: {value} covered by the same signature as the failed {failed} ({cover.name})"
                siblings.append(({**values, cover.knob: value}, note))
    return siblings


def learn_from_failure(
    ctx: TrialContext,
    store: Store,
    host_key: str,
    result: TrialResult,
    baseline: Candidate,
    launch: Launch,
    events: Callable[[str], None] = lambda _: None,
    max_launches: int | None = None,
) -> bool:
    """Store what `result` (a failed trial) teaches; True when a learned failure was added. A
    failure no signature explains is isolated by smoke launches of `launch` (in `ctx`)."""
    failure = result.failure
    if result.status != "failed" or failure is None or failure.cause is FailureCause.ENVIRONMENT:
        return False
    engine = ctx.space.engine
    if failure.implicates:
        for values in blamed(failure, result.candidate, result.selected, baseline):
            _learn(store, host_key, engine, failure, result, values, failure.evidence)
            for sibling, note in covered(failure, values, ctx.space):
                _learn(store, host_key, engine, failure, result, sibling, [*failure.evidence, note])
        return True
    if failure.cause is not FailureCause.UNEXPLAINED:
        return False  # limits (memory, time, load), or a row that names its cause but no knob
    knobs = [k.name for k in ctx.space.knobs if k.kind == "arg"]
    events("isolating the knob that broke")
    options = {} if max_launches is None else {"max_launches": max_launches}

    def smoke(candidate: Candidate, name: str) -> FailureInfo | None:
        shown = launch(LaunchRequest(ctx, candidate, result.number, Purpose.SMOKE, log_name=name))
        return shown.failure if shown.status == "failed" else None

    found = isolate(result, store.trials(ctx.study), knobs, smoke, **options)
    save_isolation(store, host_key, engine, found)
    if not found.isolated:
        return False
    evidence = [*failure.evidence, f"autotune: {found.summary()}"]
    _learn(store, host_key, engine, failure, result, found.isolated, evidence)
    return True


def _learn(
    store: Store, host_key: str, engine: str, failure: FailureInfo, result: TrialResult,
    values: dict[str, Scalar], evidence: list[str],
) -> None:
    # add_failure takes the values from the candidate: hand it one holding exactly these
    env = {k: str(values[k]) for k in result.candidate.env if k in values}
    params = {k: v for k, v in values.items() if k not in env}
    holder = Candidate(engine=engine, params={**result.candidate.params, **params}, env={**result.candidate.env, **env})
    learned = failure.model_copy(update={"implicates": list(values), "evidence": evidence})
    store.add_failure(host_key, engine, learned, holder, result.study, result.number)
