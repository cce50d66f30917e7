"""Ground truth of a search space: every candidate measured, in grid order, as resumable studies.

    python benchmarks/ground_truth.py measure --space benchmarks/spaces/llamacpp-gemma3-270m-gt48.yaml \
        --db benchmarks/gt/runs.db --launches 2
    python benchmarks/ground_truth.py export --db benchmarks/gt/runs.db --out benchmarks/data/FILE.json \
        --space-file benchmarks/spaces/SPACE.yaml   # needed where the model is a shape directory
    python benchmarks/ground_truth.py restore benchmarks/data/FILE.json --space SPACE.yaml --db NEW.db

`measure` runs the study machinery itself (autotune.commands.search `prepare` / `run`): one throughput-only
study per launch repeat (`<space>-launch1`, `-launch2`, ...), each with the whole grid queued in
grid order, and one accuracy study (`<space>-accuracy`, gates on) over one candidate per numerics
class plus the `--neutral-checks` candidates that differ from a measured one only in a knob
assumed numerics-neutral (n_threads), so the export can check that assumption against the
greedy answers. The studies advance together one candidate at a time, so launch repeats are
spread over the sitting and an interrupted run resumes where it stopped (re-run the command).

`restore` rebuilds a table's studies (space, host, hardware, trials under their numbers, Optuna's
trials with them) in a runs.db that holds none of them: the db of a sitting on a lent machine goes
with the machine, the committed table stays, and `measure` goes on from the restored db.

`export` turns the studies into the table (benchmarks/data/*.json) that benchmarks/search_quality.py
replays: per candidate its launches (status, objective, score, failure), its numerics class and
that class's accuracy evidence, and the conditions (date, machine, command, load average). The
hardware profile and the machine come from runs.db (the studies' --hardware, the hosts they ran
on), so a table measured on a lent GPU machine can be exported anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic import BaseModel, ValidationError

from autotune.commands import search
from autotune.commands.setup import prepare
from autotune.study.prepared import PreparedStudy
from autotune.bench.throughput import MeasurementFailed, objective_value
from autotune.hardware.device import detect
from autotune.errors import ConfigError
from autotune.hardware.profiles import resolve_hardware
from autotune.models import Candidate, HardwareProfile, HostFingerprint, Measurement, SearchSpace, TrialResult, utc_now
from autotune.space.candidates import baseline, enumerate_candidates, load_space
from autotune.space.fingerprint import changes, fingerprint
from autotune.store import RERUN_STATUSES, Store
from autotune.study.tuner import restore_trials

#: knobs whose values change the engine's arithmetic (hence greedy output) on llama.cpp
NUMERICS_KNOBS = ("type_k", "type_v", "flash_attn", "draft_k")
#: knobs assumed to leave greedy output unchanged; checked by `--neutral-checks`
NEUTRAL_KNOBS = ("n_threads",)


def numerics_key(space: SearchSpace, candidate: Candidate) -> str:
    values = {k.name: candidate.params.get(k.name) for k in space.knobs if k.name not in NEUTRAL_KNOBS}
    return ",".join(f"{k}={v}" for k, v in sorted(values.items()))


def accuracy_candidates(space: SearchSpace, grid: list[Candidate], neutral_checks: int) -> list[Candidate]:
    """One candidate per numerics class (the first in grid order: neutral knobs at their first
    value), then `neutral_checks` candidates that differ from one of those only in neutral knobs."""
    reps: dict[str, Candidate] = {}
    others: list[Candidate] = []
    for candidate in grid:
        key = numerics_key(space, candidate)
        if key not in reps:
            reps[key] = candidate
        else:
            others.append(candidate)
    # spread the checks over the classes: every len(others)//n-th one
    step = max(1, len(others) // max(1, neutral_checks))
    checks = others[::step][:neutral_checks]
    return [*reps.values(), *checks]


def study_names(space: SearchSpace, launches: int) -> tuple[list[str], str]:
    return [f"{space.name}-launch{i + 1}" for i in range(launches)], f"{space.name}-accuracy"


#: a gap longer than this between two launches: another sitting, on another lent machine
SITTING_GAP_MIN = 15.0


def by_sitting(timed: list[tuple], gap_min: float = SITTING_GAP_MIN) -> list[list[tuple]]:
    """Tuples whose first item is an ISO time, sorted and split wherever two are more than
    `gap_min` minutes apart (each session gets a fresh lent machine)."""
    from datetime import datetime

    ordered = sorted(timed)
    groups: list[list[tuple]] = [[ordered[0]]] if ordered else []
    for prev, cur in zip(ordered, ordered[1:]):
        if (datetime.fromisoformat(cur[0]) - datetime.fromisoformat(prev[0])).total_seconds() > gap_min * 60:
            groups.append([])
        groups[-1].append(cur)
    return groups


def warm_launches_s(trials: list[TrialResult], gap_min: float = SITTING_GAP_MIN) -> list[float]:
    """Durations of the launches that were not the first of their sitting (that one compiles cold)."""
    launched = [(t.started_at, t.duration_s) for t in trials if t.status in ("ok", "failed") and t.duration_s > 0]
    return [seconds for sitting in by_sitting(launched, gap_min) for _, seconds in sitting[1:]]


def next_launch_guess_s(took: list[float], earlier_warm: list[float] | None = None) -> float:
    """How long the sitting's next launch is assumed to take: its longest launch after the first,
    which alone pays a fresh machine's cold compile (measured on the H200: 249-281 s, then
    72-150 s); with only that first launch, the longest warm launch of earlier sittings
    (runs.db), else as long as it."""
    if not took:
        return 0.0
    if len(took) > 1:
        return max(took[1:])
    return max(earlier_warm) if earlier_warm else took[0]


def plan_for(args: argparse.Namespace, name: str, accuracy: bool, first: list[Candidate]) -> PreparedStudy:
    """The study plan `measure` runs (and `restore` rebuilds) under `name`: every candidate takes its
    gates, since the table needs them and a study's "cannot rank first" does not apply."""
    plan = prepare(
        space_name=args.space, model_path=args.model, db_path=args.db, study=name, hardware=args.hardware,
        nodes=None, accuracy=accuracy, logs_dir=args.logs, every_trial=True,
    )
    return plan.model_copy(update={"first": first})


def measure(args: argparse.Namespace) -> None:
    space = load_space(args.space)
    grid = list(enumerate_candidates(space))
    launch_names, accuracy_name = study_names(space, args.launches)
    accuracy_grid = accuracy_candidates(space, grid, args.neutral_checks) if not args.no_accuracy else []
    # an accuracy trial measures throughput with the same workload first: it is one of its
    # candidate's launches, so the last launch study leaves those candidates out
    measured_with_accuracy = {c.key() for c in accuracy_grid}
    # the repeats: every candidate, or every Nth in grid order (--repeat-every), each --repeat-lag
    # candidates after its first launch, so that the two launches do not sit back to back
    repeated = [c for i, c in enumerate(grid) if i % args.repeat_every == 0]
    queues = [grid, *[repeated] * (args.launches - 1)]
    queues[-1] = [c for c in queues[-1] if c.key() not in measured_with_accuracy]
    lags = [0, *[args.repeat_lag] * (args.launches - 1)]
    plans = [(plan_for(args, n, False, q), q, lag) for n, q, lag in zip(launch_names, queues, lags)]
    if not args.no_accuracy:
        plans.append((plan_for(args, accuracy_name, True, accuracy_grid), accuracy_grid, 0))
    print(f"{len(grid)} candidates, {args.launches} launch studies ({len(repeated)} candidates repeated), "
          f"{len(accuracy_grid)} accuracy trials", flush=True)
    sitting = time.monotonic()
    took: list[float] = []  # this sitting's launches, in seconds
    earlier_warm = warm_launches_s([t for plan, _, _ in plans if plan.store for t in plan.store.trials(plan.study)])
    for k in range(1, len(grid) + args.repeat_lag + 1):
        for plan, queue, lag in plans:
            upto = {c.key() for c in grid[:max(0, min(k - lag, len(grid)))]}
            assert plan.store is not None
            trials = plan.store.trials(plan.study)
            # a launch cut (crashed, interrupted) or stopped by the environment is run again: not done
            done = {t.candidate.key() for t in trials if t.status not in RERUN_STATUSES}
            missing = [c for c in queue if c.key() in upto and c.key() not in done]
            if not missing:
                continue
            launched = sum(1 for t in trials if t.status in ("ok", "failed"))
            t0 = time.monotonic()
            guess = next_launch_guess_s(took, earlier_warm)
            if args.time_budget is not None and guess and t0 - sitting + guess > args.time_budget * 60:
                print(f"stopped: time budget ({args.time_budget} min; a launch takes ~{guess:.0f} s here); "
                      "run the same command to go on", flush=True)
                return
            outcome = search.run(plan, trials=launched + len(missing), seed=0, noise_relaunches=0)
            took.append(time.monotonic() - t0)
            last = outcome.trials[-1] if outcome.trials else None
            status = f"{last.status} {last.objective or last.reason or ''}" if last else "-"
            print(f"{utc_now()} {plan.study} k={k} load={os.getloadavg()[0]:.2f} "
                  f"{time.monotonic() - t0:.0f}s last: {status}", flush=True)
            if outcome.environment is not None:  # every later launch would meet it too (a held GPU, a package)
                print(f"stopped: {outcome.environment.describe()}", flush=True)
                raise SystemExit(3)


def _launch_record(t: TrialResult) -> dict:
    phases = {m.name: m.median for m in t.measurements}
    return {
        "study": t.study,
        "trial": t.number,
        "status": t.status,
        "objective": t.objective,
        "score": t.score,
        "reason": t.reason,
        "failure": t.failure.model_dump(mode="json") if t.failure else None,
        "duration_s": t.duration_s,
        "started_at": t.started_at,
        "medians": phases,
        "result": t.model_dump(mode="json", exclude={"launch", "log_path"}),
    }


def measured_on(store: Store, study_names: list[str]) -> tuple[HardwareProfile, str]:
    """The hardware profile the studies ran under and the hosts they ran on, from runs.db: a table
    measured on a lent GPU machine is exported elsewhere. The profile with this host's detected
    memory and cores only where this host is the profile the studies named."""
    rows = [store.study(name) for name in study_names]
    name = rows[0]["hardware"]
    try:
        here = resolve_hardware("auto", detect())
    except ConfigError:
        here = None
    profile = here if here is not None and here.name == name else resolve_hardware(name, None)
    hosts = {r["key"]: r for r in store.db["hosts"].rows}
    described = []
    for key in dict.fromkeys(r["host_key"] for r in rows):
        host = hosts.get(key)
        if host is None:
            continue
        facts = json.loads(host["fingerprint"] or "{}")
        described.append(f"{host['hostname']} (" + ", ".join(f"{k} {v}" for k, v in facts.items() if k != "hostname" and v) + ")")
    return profile, "; ".join(described) or "unknown (runs.db records no host)"


def studies_of(store: Store, names: list[str]) -> list[dict]:
    """Each study's hardware profile, node count and host fingerprint: what `restore` needs."""
    hosts = {r["key"]: json.loads(r["fingerprint"] or "{}") for r in store.db["hosts"].rows}
    rows = [(name, store.study(name)) for name in names]
    return [{"name": name, "hardware": row["hardware"], "nodes": row["nodes"], "host": hosts.get(row["host_key"])}
            for name, row in rows if row is not None]


def export(args: argparse.Namespace) -> None:
    store = Store(args.db, must_exist=True)
    row = next((s for s in store.studies() if s["name"].endswith("-launch1")), None)
    if row is None:
        sys.exit(f"{args.db} holds no ground-truth study (*-launch1)")
    space = SearchSpace.model_validate_json(store.study(row["name"])["space"])
    launch_names = sorted(s["name"] for s in store.studies() if s["name"].startswith(f"{space.name}-launch"))
    accuracy_name = f"{space.name}-accuracy"
    grid = list(enumerate_candidates(space))
    hardware, machine = measured_on(store, launch_names)
    by_key: dict[str, dict] = {c.key(): {"params": dict(c.params), "env": dict(c.env), "launches": [], "skipped": []} for c in grid}
    for name in launch_names:
        for t in store.trials(name):
            entry = by_key.get(t.candidate.key())
            if entry is None:
                continue
            if t.status == "skipped":
                entry["skipped"].append({"study": name, "reason": t.reason})
            else:
                entry["launches"].append(_launch_record(t))
    accuracy: dict[str, dict] = {}
    neutral_checks: list[dict] = []
    acc_trials = [t for t in store.trials(accuracy_name) if t.status == "ok"]
    for t in acc_trials:
        key = numerics_key(space, t.candidate)
        answers = {"qeval": t.qeval.answers if t.qeval else None,
                   "needle": [c.model_dump(mode="json") for c in t.needle.cases] if t.needle else None}
        record = {"trial": t.number, "params": dict(t.candidate.params),
                  "needle": t.needle.model_dump(mode="json") if t.needle else None,
                  "qeval": t.qeval.model_dump(mode="json") if t.qeval else None,
                  "answers_digest": _digest(answers)}
        if key not in accuracy:
            accuracy[key] = record
        else:
            same = accuracy[key]["answers_digest"] == record["answers_digest"]
            neutral_checks.append({"class": key, "trial": t.number, "reference_trial": accuracy[key]["trial"],
                                   "params": dict(t.candidate.params), "same_greedy_answers": same})
        by_key[t.candidate.key()]["launches"].append({**_launch_record(t), "with_accuracy": True})
    # greedy answers per numerics class: which classes answer alike (does a numerics knob matter?)
    digests: dict[str, list[str]] = {}
    for key, record in accuracy.items():
        digests.setdefault(record["answers_digest"], []).append(key)
    learned = [dict(r) for r in store.db["failures"].rows] if "failures" in store.db.table_names() else []
    # the model file's path on the measuring machine is not part of the table: the package names
    # the model, or (a shape directory of this repo) the space file's own relative path
    shipped = load_space(args.space_file).model.path if args.space_file else None
    if space.model.package is None and shipped is None:
        sys.exit(f"{space.model.name} comes from no package: pass --space-file (the space's YAML in this repo)")
    portable = space.model_copy(update={"model": space.model.model_copy(update={"path": shipped if space.model.package is None else None})})
    table = {
        "space": portable.model_dump(mode="json"),
        "space_file": args.space_file,
        "objective": space.objective.metric,
        "baseline_key": baseline(space).key(),
        "knobs": {k.name: list(k.values) for k in space.knobs},
        "neutral_knobs": list(NEUTRAL_KNOBS),
        "hardware": hardware.model_dump(mode="json"),
        "candidates": [{"key": key, **entry, "numerics_class": numerics_key(space, Candidate.model_validate({"engine": space.engine, "params": entry["params"], "env": entry["env"]}))} for key, entry in by_key.items()],
        "accuracy": accuracy,
        "neutral_checks": neutral_checks,
        "answer_groups": list(digests.values()),
        "learned_failures": [{k: r.get(k) for k in ("knob_values", "failure_class", "study", "trial")} for r in learned],
        "studies": studies_of(store, [*launch_names, accuracy_name]),
        "conditions": {
            "exported_at": utc_now(),
            "first_trial_at": min((l["started_at"] for e in by_key.values() for l in e["launches"] if l["started_at"]), default=None),
            "last_trial_at": max((l["started_at"] for e in by_key.values() for l in e["launches"] if l["started_at"]), default=None),
            "machine": machine,
            "command": args.command or "",
            "load_average": args.load or "",
            "engine_version": next((l["result"].get("engine_version") for e in by_key.values() for l in e["launches"]), None),
        },
    }
    Path(args.out).write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    ok = sum(1 for e in by_key.values() if any(l["status"] == "ok" for l in e["launches"]))
    print(f"wrote {args.out}: {len(by_key)} candidates, {ok} with an ok launch, {len(accuracy)} accuracy classes, "
          f"{len(neutral_checks)} neutral checks ({sum(c['same_greedy_answers'] for c in neutral_checks)} same)")


def host_from_machine_line(machine: str, engine: str) -> HostFingerprint:
    """The first host of a table's `conditions.machine` line ("name (key value, key value, ...)"),
    for tables exported before they recorded their studies' hosts."""
    first = machine.split("; ")[0]
    hostname, _, rest = first.partition(" (")
    keys = [k for k in HostFingerprint.model_fields if k != "hostname"]
    facts: dict[str, str] = {}
    for part in re.split(rf", (?=(?:{'|'.join(keys)}) )", rest.removesuffix(")")):
        key, _, value = part.partition(" ")
        if key in keys:
            facts[key] = value
    return HostFingerprint.model_validate({"engine": engine, **facts, "hostname": hostname})


def restore(args: argparse.Namespace) -> None:
    """Rebuild a table's studies in a runs.db that holds none of them (the db of a sitting on a lent
    machine goes with the machine; the committed table does not), so `measure` goes on from there:
    the same space (built as `measure` builds it), host, hardware and trials under their numbers."""
    table = json.loads(Path(args.table).read_text())
    launches = [launch for entry in table["candidates"] for launch in entry["launches"]]
    names = sorted({launch["study"] for launch in launches})
    store = Store(args.db)
    held = [name for name in names if store.study(name) is not None]
    if held:
        sys.exit(f"{args.db} already holds study {held[0]!r}: restore writes only into a runs.db without the "
                 "table's studies (nothing stored is replaced); pass another --db")
    measured = SearchSpace.model_validate(table["space"])
    recorded = {s["name"]: s for s in table.get("studies", [])}
    host_keys: dict[str, str] = {}
    for name in names:
        plan = plan_for(args, name, name.endswith("-accuracy"), [])
        differs = [c for c in changes(measured, plan.space) if not c.startswith("model.path")]
        if differs:
            sys.exit(f"{args.space} is not the space {args.table} was measured with: {'; '.join(differs[:4])}")
        info = recorded.get(name, {})
        host = (HostFingerprint.model_validate(info["host"]) if info.get("host")
                else host_from_machine_line(table["conditions"]["machine"], measured.engine))
        host_keys[name] = store.save_host(host)
        store.save_study(name, plan.space, info.get("hardware") or table["hardware"]["name"], info.get("nodes") or plan.nodes,
                         host_keys[name], fingerprint(plan.space), accuracy=name.endswith("-accuracy"))
        restore_trials(store, plan.ctx, [TrialResult.model_validate(l["result"]) for l in launches if l["study"] == name])
    for learned in table.get("learned_failures", []):
        source = store.trial(learned["study"], learned["trial"]) if learned["study"] in host_keys else None
        if source is not None and source.failure is not None:
            store.add_failure(host_keys[learned["study"]], measured.engine, source.failure, source.candidate,
                              learned["study"], learned["trial"])
    print(f"restored {len(names)} studies, {len(launches)} launches from {args.table} into {args.db}")


def retarget(args: argparse.Namespace) -> None:
    """The table with another objective, read from the stored measurements of the same launches
    (e.g. the 8-stream wave every H200 launch measured besides its single-stream objective)."""
    table = json.loads(Path(args.table).read_text())
    try:
        space = SearchSpace.model_validate({**table["space"], "objective": {**table["space"]["objective"],
                                                                             "metric": args.objective}})
    except ValidationError as exc:
        sys.exit(f"{args.objective}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}")
    out = json.loads(json.dumps(table))
    for entry in out["candidates"]:
        for launch in entry["launches"]:
            if launch["status"] != "ok":
                continue
            measured = [Measurement.model_validate(m) for m in launch["result"]["measurements"]]
            try:
                objective, score = objective_value(measured, space.objective)
            except MeasurementFailed as exc:
                sys.exit(f"{launch['study']} trial {launch['trial']}: {exc}")
            for record in (launch, launch["result"]):
                record["objective"], record["score"] = round(objective, 4), round(score, 4)
    out["space"], out["objective"] = space.model_dump(mode="json"), args.objective
    out["conditions"]["retargeted"] = (f"objective {args.objective} instead of {table['objective']}, read from the "
                                       f"stored measurements of the same launches (ground_truth.py retarget)")
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}: objective {args.objective} over {sum(len(e['launches']) for e in out['candidates'])} launches")


def slice_table(table: dict, fixed: dict[str, str]) -> dict:
    """The table restricted to the candidates with the `fixed` knob values (matched as text): the
    space keeps those knobs with the one value, so every kept candidate keeps its key."""
    space = SearchSpace.model_validate(table["space"])
    chosen = {}
    for knob in space.knobs:
        if knob.name in fixed:
            matches = [v for v in knob.values if str(v).lower() == fixed[knob.name].lower()]
            if not matches:  # (a knob's value may itself be null: "none" fixes it)
                raise SystemExit(f"knob {knob.name} has no value {fixed[knob.name]!r}")
            chosen[knob.name] = matches[0]
    unknown = set(fixed) - set(chosen)
    if unknown:
        raise SystemExit(f"no knob {sorted(unknown)[0]!r} in {space.name}")
    knobs = [k.model_copy(update={"values": [chosen[k.name]], "default": chosen[k.name]}) if k.name in chosen else k
             for k in space.knobs]
    sliced = space.model_copy(update={"knobs": knobs, "name": f"{space.name}-slice"})
    keep = {c.key() for c in enumerate_candidates(sliced)}
    out = dict(table)
    out["space"] = sliced.model_dump(mode="json")
    out["knobs"] = {k.name: list(k.values) for k in knobs}
    out["candidates"] = [c for c in table["candidates"] if c["key"] in keep]
    classes = {c["numerics_class"] for c in out["candidates"]}
    out["accuracy"] = {k: v for k, v in table["accuracy"].items() if k in classes}
    out["baseline_key"] = baseline(sliced).key()
    out["sliced_from"] = {"space": space.name, "fixed": fixed}
    return out


def slice_command(args: argparse.Namespace) -> None:
    fixed = dict(part.split("=", 1) for part in args.fix)
    table = slice_table(json.loads(Path(args.table).read_text()), fixed)
    Path(args.out).write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {args.out}: {len(table['candidates'])} candidates")


class Machine(BaseModel):
    """One lent machine's launches: consecutive launches with no gap longer than the split's."""

    first_at: str
    last_at: str
    launches: list[tuple[str, str, float]]  # (started_at, candidate key, objective), in time order
    offset: float = 1.0  # its launches' level against the first machine's (fitted)


class MachineFit(BaseModel):
    """log(objective) = candidate + machine, by least squares over every ok launch of the table."""

    machines: list[Machine]
    values: dict[str, float]  # candidate key -> value on the first machine's level
    sigma: float | None  # launch noise within a machine (log), None with nothing left to estimate it
    df: int
    # F test of "the candidates differ at all" (candidate + machine against machine alone); None at df 0
    candidates_differ_p: float | None = None


def ok_launches(table: dict) -> list[tuple[str, str, float]]:
    """Every ok launch of the table as (started_at, candidate key, objective), in time order."""
    return sorted((launch["started_at"], entry["key"], float(launch["objective"]))
                  for entry in table["candidates"] for launch in entry["launches"]
                  if launch["status"] == "ok" and launch.get("objective"))


def machine_fit(table: dict, gap_min: float = SITTING_GAP_MIN) -> MachineFit:
    """Split the table's launches into machines wherever two consecutive launches are more than
    `gap_min` minutes apart (a lent machine is given back when idle; the next sitting gets another)
    and fit candidate and machine together. Refused when a machine shares no candidate with the
    others: its level could not be told from its candidates'."""
    import math

    import numpy as np

    ok = ok_launches(table)
    if not ok:
        raise ConfigError("the table has no ok launch")
    groups = by_sitting(ok, gap_min)
    keys = list(dict.fromkeys(key for _, key, _ in ok))
    rows = [(keys.index(key), m, math.log(value)) for m, group in enumerate(groups) for _, key, value in group]
    x = np.zeros((len(rows), len(keys) + len(groups) - 1))
    for r, (c, m, _) in enumerate(rows):
        x[r, c] = 1.0
        if m:
            x[r, len(keys) + m - 1] = 1.0
    y = np.array([v for _, _, v in rows])
    beta, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    if rank < x.shape[1]:
        raise ConfigError("a machine shares no candidate with the others: its level cannot be told from its candidates'")
    df = len(rows) - rank
    rss = float(((y - x @ beta) ** 2).sum())
    machines = [
        Machine(first_at=g[0][0], last_at=g[-1][0], launches=g, offset=1.0 if m == 0 else math.exp(beta[len(keys) + m - 1]))
        for m, g in enumerate(groups)
    ]
    return MachineFit(machines=machines, values={k: math.exp(beta[i]) for i, k in enumerate(keys)},
                      sigma=math.sqrt(rss / df) if df > 0 else None, df=df,
                      candidates_differ_p=_candidates_differ_p(x, y, len(keys), rss, rank, df))


def _candidates_differ_p(x, y, n_candidates: int, rss: float, rank: int, df: int) -> float | None:
    """p of the F test that the candidate columns of `x` explain nothing the machine columns do not."""
    import numpy as np
    from scipy.stats import f

    if df <= 0 or n_candidates < 2:
        return None
    machine_only = np.column_stack([np.ones(len(y)), x[:, n_candidates:]])
    beta0, _, rank0, _ = np.linalg.lstsq(machine_only, y, rcond=None)
    rss0 = float(((y - machine_only @ beta0) ** 2).sum())
    extra = rank - rank0
    if rss <= 0:
        return 0.0
    return float(f.sf(((rss0 - rss) / extra) / (rss / df), extra, df))


class KnobEffect(BaseModel):
    knob: str
    value: object
    factor: float  # objective with this value over the knob's default, the other knobs and the machine held
    low: float  # 95 % interval of the factor
    high: float
    p: float  # two-sided: the factor is 1


def knob_effects(table: dict, gap_min: float = SITTING_GAP_MIN) -> list[KnobEffect]:
    """log(objective) = machine + one term per knob value off its default (main effects, no
    interactions), by least squares over every ok launch: what each knob does, with its uncertainty,
    pooled over every candidate that holds it. Empty where no launch noise is left to judge by."""
    import math

    import numpy as np
    from scipy.stats import t as student

    space = SearchSpace.model_validate(table["space"])
    params_of = {entry["key"]: entry["params"] for entry in table["candidates"]}
    ok = ok_launches(table)
    machine_of = {at: m for m, group in enumerate(by_sitting(ok, gap_min)) for at, _, _ in group}
    terms = [(k.name, v) for k in space.knobs for v in k.values if v != k.default
             and any(params_of[key].get(k.name) == v for _, key, _ in ok)]
    machines = max(machine_of.values(), default=0)
    x = np.array([[1.0, *(1.0 if params_of[key].get(n) == v else 0.0 for n, v in terms),
                   *(1.0 if machine_of[at] == m else 0.0 for m in range(1, machines + 1))] for at, key, _ in ok])
    y = np.array([math.log(value) for _, _, value in ok])
    if not len(y):
        return []
    beta, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    df = len(y) - rank
    if df <= 0 or rank < x.shape[1]:
        return []
    s2 = float(((y - x @ beta) ** 2).sum()) / df
    cov = s2 * np.linalg.inv(x.T @ x)
    q = float(student.ppf(0.975, df))
    out = []
    for i, (name, value) in enumerate(terms, start=1):
        se = math.sqrt(cov[i, i])
        out.append(KnobEffect(knob=name, value=value, factor=math.exp(beta[i]), low=math.exp(beta[i] - q * se),
                              high=math.exp(beta[i] + q * se), p=float(2 * student.sf(abs(beta[i]) / se, df))))
    return out


def on_one_machine(table: dict, fit: MachineFit) -> dict:
    """The table with every launch divided by its machine's fitted level: what one machine (the
    first) would have measured, as far as the fit knows. Its spread is the within-machine noise."""
    import copy

    level = {at: m.offset for m in fit.machines for at, _, _ in m.launches}
    adjusted = copy.deepcopy(table)
    for entry in adjusted["candidates"]:
        for launch in entry["launches"]:
            if launch["status"] != "ok" or not launch.get("objective"):
                continue
            offset = level[launch["started_at"]]
            for record in (launch, launch.get("result") or {}):
                for field in ("objective", "score"):
                    if record.get(field) is not None:
                        record[field] = round(record[field] / offset, 4)
    adjusted.setdefault("conditions", {})["machine_adjusted"] = (
        f"each launch divided by its lent machine's level (ground_truth.py machines: {len(fit.machines)} machines, "
        f"{', '.join(f'x{m.offset:.3f}' for m in fit.machines)}; within-machine noise "
        f"{'±%.1f%%' % (100 * fit.sigma) if fit.sigma is not None else 'unknown'}, df {fit.df})"
    )
    return adjusted


def machines_command(args: argparse.Namespace) -> None:
    table = json.loads(Path(args.table).read_text())
    fit = machine_fit(table, args.gap_min)
    if args.out:
        Path(args.out).write_text(json.dumps(on_one_machine(table, fit), indent=1) + "\n")
        print(f"wrote {args.out}: every launch on machine 1's level")
    labels = {e["key"]: " ".join(f"{k}={v}" for k, v in sorted(e["params"].items()) if v is not None)
              for e in table["candidates"]}
    for m, machine in enumerate(fit.machines):
        print(f"machine {m + 1}: {len(machine.launches)} launches {machine.first_at} .. {machine.last_at}, "
              f"level x{machine.offset:.3f} of machine 1")
    noise = f"±{fit.sigma:.1%} within a machine (df {fit.df})" if fit.sigma is not None else "not estimable (df 0)"
    print(f"launch noise: {noise}")
    if fit.candidates_differ_p is not None:
        print(f"do the candidates differ at all, beyond that noise (F test, machines accounted for): "
              f"p = {fit.candidates_differ_p:.3g}")
    for effect in knob_effects(table, args.gap_min):
        print(f"knob {effect.knob}={effect.value}: x{effect.factor:.3f} [{effect.low:.3f}, {effect.high:.3f}] "
              f"p = {effect.p:.2g} (main effect, machines and the other knobs held)")
    best = max(fit.values.values())
    for key, value in sorted(fit.values.items(), key=lambda kv: -kv[1]):
        print(f"{value:8.1f} {value / best:.3f}  {labels.get(key, key)}")


def _digest(value: object) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure the grid (resumable: re-run to continue)")
    m.add_argument("--space", required=True)
    m.add_argument("--db", type=Path, required=True)
    m.add_argument("--logs", type=Path, default=Path("benchmarks/gt/logs"))
    m.add_argument("--model", default=None)
    m.add_argument("--launches", type=int, default=2)
    m.add_argument("--repeat-every", type=int, default=1, metavar="N",
                   help="launches after the first: every Nth candidate in grid order (default: every one)")
    m.add_argument("--repeat-lag", type=int, default=0, metavar="L",
                   help="a candidate's later launch comes L candidates after its first (default: right after)")
    m.add_argument("--neutral-checks", type=int, default=3)
    m.add_argument("--no-accuracy", action="store_true")
    m.add_argument("--hardware", default=None, help="hardware profile (default: detected)")
    m.add_argument("--time-budget", type=float, default=None, metavar="MIN",
                   help="start no launch that would end after MIN minutes (at least one per sitting)")
    e = sub.add_parser("export", help="write the table")
    e.add_argument("--db", type=Path, required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--space-file", default="")
    e.add_argument("--command", default="", help="the measure command, recorded in the table")
    e.add_argument("--load", default="", help="load average seen during the measurement")
    r = sub.add_parser("restore", help="rebuild a table's studies in a runs.db without them (measure then goes on)")
    r.add_argument("table")
    r.add_argument("--space", required=True, help="the space file the table was measured with")
    r.add_argument("--db", type=Path, required=True)
    r.add_argument("--logs", type=Path, default=Path("benchmarks/gt/logs"))
    r.add_argument("--model", default=None)
    r.add_argument("--hardware", default=None, help="hardware profile, as given to measure")
    g = sub.add_parser("retarget", help="the table with another objective, read from the same launches' measurements")
    g.add_argument("table")
    g.add_argument("--objective", required=True, help="e.g. output_tps_c8")
    g.add_argument("--out", required=True)
    c = sub.add_parser("slice", help="a table restricted to some knob values (e.g. the tiny table of the CI test)")
    c.add_argument("table")
    c.add_argument("--fix", action="append", default=[], help="KNOB=VALUE, repeatable")
    c.add_argument("--out", required=True)
    k = sub.add_parser("machines", help="candidate and lent-machine levels fitted together (launches split by gaps), whether the "
                         "candidates differ at all (F test) and each knob's main effect")
    k.add_argument("table")
    k.add_argument("--gap-min", type=float, default=SITTING_GAP_MIN, help="a gap longer than this starts another machine")
    k.add_argument("--out", default=None, help="also write the table with every launch on the first machine's level")
    args = parser.parse_args(argv)
    {"measure": measure, "export": export, "restore": restore, "retarget": retarget, "slice": slice_command,
     "machines": machines_command}[args.cmd](args)


if __name__ == "__main__":
    main()
