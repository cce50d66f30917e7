"""runs.db: migrations, trial round-trip, learned failures, probe results, bad paths."""

from __future__ import annotations

import math
import sqlite3

import pytest

from autotune.errors import StoreError
from autotune.models import (
    Candidate,
    FailureInfo,
    HostFingerprint,
    Measurement,
    ProbeResult,
    TrialResult,
)
from autotune.store import MIGRATIONS, Store
from autotune.verdict.noise import NoiseKey


def cand(**params) -> Candidate:
    return Candidate(engine="llamacpp", params=params)


def test_migrations_apply_once(tmp_path):
    store = Store(tmp_path / "runs.db")
    assert [m.name for m in MIGRATIONS.applied(store.db)] == [m.name for m in MIGRATIONS._migrations]
    Store(tmp_path / "runs.db")  # reopening applies nothing twice
    assert len(MIGRATIONS.applied(store.db)) == len(MIGRATIONS._migrations)
    assert {"trial_results", "measurements", "failures", "probe_results", "hosts", "tuning_studies", "recipes", "confirmations"} <= set(
        store.db.table_names()
    )


def test_trial_round_trip_with_measurements(tmp_path):
    store = Store(tmp_path / "runs.db")
    m = Measurement.of("decode_tps.prose", "tok/s", "1 stream", [50.0, 52.0, 51.0])
    result = TrialResult(study="s", number=3, candidate=cand(type_k="q8_0"), status="ok", measurements=[m], objective=51.0, score=50.0)
    store.save_trial(result)
    assert store.trial("s", 3) == result
    assert store.trial_by_candidate("s", cand(type_k="q8_0")) == result
    assert store.trial_by_candidate("s", cand(type_k="f16")) is None
    row = next(store.db["measurements"].rows)
    assert row["median"] == 51.0 and row["condition"] == "1 stream"


def test_skipped_trials_do_not_count_as_measured(tmp_path):
    store = Store(tmp_path / "runs.db")
    store.save_trial(TrialResult(study="s", number=1, candidate=cand(a=1), status="skipped", reason="rule"))
    assert store.trial_by_candidate("s", cand(a=1)) is None


def test_learned_failure_matches_on_implicated_knobs_only(tmp_path):
    store = Store(tmp_path / "runs.db")
    failure = FailureInfo(failure_class="kv_dtype_unsupported", message="x", implicates=["type_v", "flash_attn"])
    store.add_failure("host", "llamacpp", failure, cand(type_v="q4_0", flash_attn=False, n_threads=2), "s", 4)
    [learned] = store.learned_failures("host", "llamacpp")
    assert learned.knob_values == {"flash_attn": False, "type_v": "q4_0"}
    assert learned.matches(cand(type_v="q4_0", flash_attn=False, n_threads=1))
    assert not learned.matches(cand(type_v="q4_0", flash_attn=True, n_threads=2))
    assert store.learned_failures("other-host", "llamacpp") == []


def test_probe_results_upsert_per_host(tmp_path):
    store = Store(tmp_path / "runs.db")
    host = HostFingerprint(hostname="h", engine="llamacpp", engine_version="0.3.36")
    key = store.save_host(host)
    assert store.save_host(host) == key
    first = ProbeResult(feature="f", status="fails", evidence="boom", params={"type_k": "q4_0"})
    store.save_probe_results(key, [first])
    store.save_probe_results(key, [first.model_copy(update={"status": "works", "evidence": "ok"})])
    [stored] = store.probe_results(key)
    assert stored.status == "works" and stored.params == {"type_k": "q4_0"}


def test_fingerprint_ignores_hostname():
    a = HostFingerprint(hostname="a", engine="vllm", engine_version="0.26.0", compute_capability="sm_90")
    b = a.model_copy(update={"hostname": "b"})
    assert a.key() == b.key()
    assert a.key() != a.model_copy(update={"engine_version": "0.27.0"}).key()


def test_missing_folder_is_a_store_error(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "nope" / "runs.db")


def test_must_exist(tmp_path):
    with pytest.raises(StoreError, match="no database"):
        Store(tmp_path / "runs.db", must_exist=True)
    assert not (tmp_path / "runs.db").exists()


def test_not_a_database_is_a_store_error_and_file_untouched(tmp_path):
    path = tmp_path / "runs.db"
    path.write_bytes(b"this is not sqlite" * 100)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="cannot use"):
        Store(path)
    assert path.read_bytes() == before


def test_sqlite_file_is_plain_sqlite(tmp_path):
    Store(tmp_path / "runs.db")
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        assert conn.execute("select count(*) from _sqlite_migrations").fetchone()[0] >= 1


def test_a_runs_db_from_before_issue_17_is_migrated_and_keeps_its_studies(tmp_path):
    import sqlite_utils

    from autotune.space.candidates import load_space

    path = tmp_path / "runs.db"
    old = sqlite_utils.Database(path)
    MIGRATIONS.apply(old, stop_before="m003_launch_noise")
    space = load_space("llamacpp-gemma3-270m")
    old["tuning_studies"].insert({"name": "s", "space_name": space.name, "engine": "llamacpp", "hardware": "cpu",
                                  "nodes": 1, "host_key": "h", "space": space.model_dump_json(), "created_at": "x"})
    old.conn.close()
    store = Store(path)
    assert "fingerprint" in store.db["tuning_studies"].columns_dict
    assert {"study_owners", "attempts"} <= set(store.db.table_names())
    assert store.study_space("s") == space  # the fingerprint check of an old study reads its stored space


def c8_space():
    from autotune.models import SearchSpace
    from autotune.space.candidates import load_space

    data = load_space("llamacpp-gemma3-270m").model_dump()
    data["workload"]["concurrency"] = [1, 8]
    data["objective"]["metric"] = "output_tps_c8"
    return SearchSpace.model_validate(data)


def test_launch_noise_is_pooled_per_objective_never_across_them(tmp_path):
    # A wave of 8 streams and single-stream decode vary by different amounts from launch to
    # launch: a verdict on one must not borrow the other's spread.
    from autotune.models import Candidate

    store = Store(tmp_path / "runs.db")
    cand = Candidate(engine="llamacpp", params={"n_threads": 2})
    for study, metric, values in [("one", "decode_tps_geomean", [100.0, 101.0]),
                                  ("two", "decode_tps_geomean", [200.0, 202.0]),
                                  ("wave", "output_tps_c8", [1000.0, 1500.0])]:
        for i, value in enumerate(values):
            store.add_launch_sample(NoiseKey(host="h", engine="llamacpp", metric=metric), study, cand, value, "trial", i)
    decode = store.launch_noise(NoiseKey(host="h", engine="llamacpp", metric="decode_tps_geomean"))
    wave = store.launch_noise(NoiseKey(host="h", engine="llamacpp", metric="output_tps_c8"))
    assert decode is not None and (decode.df, decode.groups) == (2, 2) and decode.sigma < 0.01
    assert wave is not None and (wave.df, wave.groups) == (1, 1)
    assert wave.sigma == pytest.approx(math.log(1.5) / math.sqrt(2))
    assert store.launch_noise(NoiseKey(host="h", engine="llamacpp", metric="decode_tps_prose")) is None


def test_a_box_that_runs_faster_is_not_launch_noise(tmp_path):
    """Issue 35: launch noise is pooled with the box as a factor. One config launched four times on
    box 0 and four times on box 1, box 1 a constant 5 % faster, each launch within ±0.5 % of its
    box's level: the noise is that ±0.5 %, not the 5 % between the boxes (pooled over boxes it
    would be ~2.6 %, and every single-launch ratio under ~x1.09 would read as noise)."""
    from autotune.models import Candidate

    store = Store(tmp_path / "runs.db")
    cand = Candidate(engine="llamacpp", params={"n_threads": 2})
    jitter = [1.0, 1.005, 0.995, 1.0]
    for box, level in ((0, 100.0), (1, 105.0)):
        for i, j in enumerate(jitter):
            store.add_launch_sample(NoiseKey(host="h", engine="llamacpp", metric="m"), "s", cand, level * j, "confirm", i, boxes=(box,))
    noise = store.launch_noise(NoiseKey(host="h", engine="llamacpp", metric="m"))
    assert noise is not None and (noise.groups, noise.df, noise.launches) == (2, 6, 8)
    assert noise.sigma < 0.006


def test_launch_samples_stored_before_objectives_were_kept_apart_take_their_studys_metric(tmp_path):
    import sqlite_utils

    from autotune.space.candidates import load_space

    path = tmp_path / "runs.db"
    old = sqlite_utils.Database(path)
    MIGRATIONS.apply(old, stop_before="m005_launch_noise_per_objective")
    for name, space in [("plain", load_space("llamacpp-gemma3-270m")), ("wave", c8_space())]:
        old["tuning_studies"].insert({"name": name, "space_name": space.name, "engine": "llamacpp", "hardware": "cpu",
                                      "nodes": 1, "host_key": "h", "space": space.model_dump_json(), "created_at": "x"})
    rows = [("plain", 100.0), ("plain", 110.0), ("wave", 1000.0), ("wave", 1500.0), ("gone", 5.0), ("gone", 50.0)]
    for i, (study, value) in enumerate(rows):
        old["launch_samples"].insert({"host_key": "h", "engine": "llamacpp", "study": study, "candidate_key": "k",
                                      "objective": value, "source": "trial", "trial": i, "measured_at": "x"})
    old.conn.close()
    store = Store(path)
    metrics = {r["study"]: r["metric"] for r in store.db["launch_samples"].rows}
    assert metrics == {"plain": "decode_tps_geomean", "wave": "output_tps_c8", "gone": None}
    decode = store.launch_noise(NoiseKey(host="h", engine="llamacpp", metric="decode_tps_geomean"))
    assert decode is not None and decode.sigma == pytest.approx(math.log(1.1) / math.sqrt(2))
    assert store.launch_noise(NoiseKey(host="h", engine="llamacpp", metric="output_tps_c8")).groups == 1


def test_a_studys_outcome_judges_with_the_noise_of_its_own_objective(tmp_path):
    from autotune.models import Candidate
    from autotune.space.candidates import load_space
    from autotune.study.outcome import outcome_of

    store = Store(tmp_path / "runs.db")
    for name, space in [("plain", load_space("llamacpp-gemma3-270m")), ("wave", c8_space())]:
        store.db["tuning_studies"].insert({"name": name, "space_name": space.name, "engine": "llamacpp",
                                           "hardware": "cpu", "nodes": 1, "host_key": "h",
                                           "space": space.model_dump_json(), "created_at": "x"})
        metric = space.objective.metric
        values = [100.0, 100.5] if name == "plain" else [1000.0, 1500.0]
        for i, value in enumerate(values):
            store.add_launch_sample(NoiseKey(host="h", engine="llamacpp", metric=metric), name,
                                    Candidate(engine="llamacpp", params={}), value, "trial", i)
    assert outcome_of(store, "wave").noise.sigma == pytest.approx(math.log(1.5) / math.sqrt(2))
    assert outcome_of(store, "plain").noise.sigma == pytest.approx(math.log(100.5 / 100) / math.sqrt(2))


def test_a_learned_failure_on_an_env_knob_matches_only_candidates_holding_its_value(tmp_path):
    """An env-kind knob lives in Candidate.env: a failure that implicates it learns that value and
    prunes only candidates that hold it (before: it learned None and matched every candidate)."""
    from autotune.models import Candidate

    store = Store(tmp_path / "runs.db")
    failing = Candidate(engine="vllm", params={"kv_cache_dtype": "fp8"}, env={"VLLM_USE_X": "1"})
    failure = FailureInfo(failure_class="kv_dtype_unsupported", message="x", implicates=["VLLM_USE_X", "kv_cache_dtype"])
    store.add_failure("host", "vllm", failure, failing, "s", 1)
    [learned] = store.learned_failures("host", "vllm")
    assert learned.knob_values == {"VLLM_USE_X": "1", "kv_cache_dtype": "fp8"}
    assert learned.matches(failing)
    assert not learned.matches(Candidate(engine="vllm", params={"kv_cache_dtype": "fp8"}, env={"VLLM_USE_X": "0"}))
    assert not learned.matches(Candidate(engine="vllm", params={"kv_cache_dtype": "fp8"}))
    assert learned.failure_class == "kv_dtype_unsupported" and learned.trial == 1 and learned.study == "s"
