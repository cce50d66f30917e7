"""runs.db's schema: one append-only list of migrations (`MIGRATIONS`), applied in order when a
Store opens; never edit an applied one, add the next instead."""

from __future__ import annotations

import json

import sqlite_utils
from sqlite_utils.migrations import Migrations

MIGRATIONS = Migrations("autotune")


@MIGRATIONS()
def m001_initial(db: sqlite_utils.Database) -> None:
    db["hosts"].create(
        {"key": str, "hostname": str, "fingerprint": str, "first_seen": str}, pk="key"
    )
    db["probe_results"].create(
        {
            "host_key": str,
            "feature": str,
            "status": str,
            "signature": str,
            "evidence": str,
            "params": str,
            "duration_s": float,
            "probed_at": str,
        },
        pk=("host_key", "feature"),
    )
    db["tuning_studies"].create(
        {
            "name": str,
            "space_name": str,
            "engine": str,
            "hardware": str,
            "nodes": int,
            "host_key": str,
            "space": str,
            "created_at": str,
        },
        pk="name",
    )
    db["trial_results"].create(
        {
            "study": str,
            "number": int,
            "candidate_key": str,
            "params": str,
            "status": str,
            "reason": str,
            "failure_class": str,
            "objective": float,
            "score": float,
            "started_at": str,
            "duration_s": float,
            "result": str,
        },
        pk=("study", "number"),
    )
    db["trial_results"].create_index(["study", "candidate_key"])
    db["measurements"].create(
        {
            "study": str,
            "trial": int,
            "name": str,
            "unit": str,
            "condition": str,
            "median": float,
            "mad": float,
            "samples": str,
        },
        pk=("study", "trial", "name"),
    )
    db["failures"].create(
        {
            "id": int,
            "host_key": str,
            "engine": str,
            "failure_class": str,
            "feature": str,
            "implicates": str,
            "knob_values": str,
            "evidence": str,
            "study": str,
            "trial": int,
            "learned_at": str,
        },
        pk="id",
    )
    db["recipes"].create(
        {"id": int, "study": str, "trial": int, "kind": str, "created_at": str, "yaml": str}, pk="id"
    )


@MIGRATIONS()
def m002_confirmations(db: sqlite_utils.Database) -> None:
    db["confirmations"].create({"study": str, "confirmed_at": str, "result": str}, pk="study")


@MIGRATIONS()
def m003_launch_noise(db: sqlite_utils.Database) -> None:
    # one row per launch of a config whose objective was measured: the launch-to-launch noise pools
    # the configs launched more than once (see noise.py); `accuracy` = the study's mode (1 = gates on)
    db["launch_samples"].create(
        {
            "id": int,
            "host_key": str,
            "engine": str,
            "study": str,
            "candidate_key": str,
            "objective": float,
            "source": str,
            "trial": int,
            "measured_at": str,
        },
        pk="id",
    )
    db["launch_samples"].create_index(["host_key", "engine"])
    db["tuning_studies"].add_column("accuracy", int)
    db["tuning_studies"].add_column("reference_trial", int)  # qeval's reference; NULL = trial 0


@MIGRATIONS()
def m004_ownership_and_attempts(db: sqlite_utils.Database) -> None:
    db["tuning_studies"].add_column("fingerprint", str)
    db["study_owners"].create(
        {"study": str, "host": str, "pid": int, "pid_start": str, "started_at": str, "command": str}, pk="study"
    )
    db["attempts"].create(
        {"study": str, "number": int, "candidate_key": str, "host": str, "pid": int, "started_at": str},
        pk=("study", "number"),
    )


@MIGRATIONS()
def m005_launch_noise_per_objective(db: sqlite_utils.Database) -> None:
    # launches vary by different amounts per objective (a wave of N streams vs one stream's decode):
    # each sample names its study's objective metric; a sample whose study is gone names none and
    # joins no pool
    db["launch_samples"].add_column("metric", str)
    spaces = {row["name"]: row["space"] for row in db["tuning_studies"].rows}
    for study in {row["study"] for row in db["launch_samples"].rows}:
        if study in spaces:
            metric = json.loads(spaces[study]).get("objective", {}).get("metric", "decode_tps_geomean")
            db.execute("update launch_samples set metric = ? where study = ?", [metric, study])
    db["launch_samples"].create_index(["host_key", "engine", "metric"])


@MIGRATIONS()
def m006_confirmation_launches(db: sqlite_utils.Database) -> None:
    # a study's confirmation rounds accumulate over its sittings: one row per relaunch, naming the
    # pair (best, baseline) its round confirmed and the round's number (objective NULL: it failed)
    db["confirmation_launches"].create(
        {
            "id": int, "study": str, "best_trial": int, "baseline_trial": int, "round": int, "trial": int,
            "objective": float, "duration_s": float, "sample_id": int, "measured_at": str,
        },
        pk="id",
    )
    db["confirmation_launches"].create_index(["study", "best_trial", "baseline_trial"])
    # earlier rounds live on as launch samples: each round relaunched the baseline, then the best,
    # so a baseline sample followed by another trial's is one round of that pair; a sample left
    # unpaired (its round's other relaunch failed) cannot be told apart and is not carried over
    baselines = {row["study"]: json.loads(row["result"])["baseline_trial"] for row in db["confirmations"].rows}
    for study, base in baselines.items():
        rows = list(db["launch_samples"].rows_where("study = ? and source = 'confirm'", [study], order_by="id"))
        rounds: dict[int, int] = {}
        for first, second in zip(rows, rows[1:]):
            if first["trial"] != base or second["trial"] == base:
                continue
            best = second["trial"]
            rounds[best] = rounds.get(best, 0) + 1
            for row in (first, second):
                db["confirmation_launches"].insert({
                    "study": study, "best_trial": best, "baseline_trial": base, "round": rounds[best],
                    "trial": row["trial"], "objective": row["objective"], "duration_s": None,
                    "sample_id": row["id"], "measured_at": row["measured_at"],
                })


@MIGRATIONS()
def m007_accuracy_failures(db: sqlite_utils.Database) -> None:
    # a numerics class that failed needle or qeval in a study: its candidates are never the best
    db["accuracy_failures"].create(
        {"id": int, "study": str, "trial": int, "knob_values": str, "result": str, "created_at": str}, pk="id"
    )
    db["accuracy_failures"].create_index(["study"])


@MIGRATIONS()
def m008_launch_gpu_state(db: sqlite_utils.Database) -> None:
    # the GPU's state in each launch (autotune/verdict/gpu_state.py): its SM clock over the
    # workloads and whether it throttled; a throttled or slow-clocked launch joins no noise pool.
    # Samples stored before have neither (NULL): they join as before
    db["launch_samples"].add_column("sm_clock_mhz", float)
    db["launch_samples"].add_column("throttled", int)


@MIGRATIONS()
def m009_boxes(db: sqlite_utils.Database) -> None:
    # trials in flight side by side, each on boxes leased from the study's pool: an attempt and a
    # launch sample name the boxes they ran on ("0", "0,1"; NULL: no pool, as before)
    db["attempts"].add_column("boxes", str)
    db["launch_samples"].add_column("boxes", str)


@MIGRATIONS()
def m010_draft_schedule(db: sqlite_utils.Database) -> None:
    # a study's draft length per batch size (autotune/study/draft_schedule.py): composed from its
    # trials, its one confirmation launch judged, or why no schedule was composed
    db["draft_schedules"].create({"study": str, "saved_at": str, "result": str}, pk="study")
