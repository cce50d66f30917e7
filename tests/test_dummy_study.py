"""A dummy-weight study end to end against the FAKE vLLM (tests/fakes/vllm_site.py): the shipped
MiniMax-M2 shape directory becomes a servable directory with a generated tokenizer, the launch
carries --load-format dummy, every decode is fixed-length, no accuracy gate runs, and the recipe
says accuracy does not apply. The fake computes nothing: its numbers mean nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fakes.vllm_site import use_fake_vllm

from autotune.cli import main
from autotune.store import Store

ROOT = Path(__file__).resolve().parents[1]

SPACE = """
name: fake-dummy
engine: vllm
model: {{name: minimax-m2-12l-dummy, path: {shape}, params_total_b: 45.254, params_active_b: 2.511, weight_bits: 16,
        n_layers: 12, n_kv_heads: 8, head_dim: 128, hidden_size: 3072}}
fixed: {{load_format: dummy, max_model_len: 4096, gpu_memory_utilization: 0.9}}
knobs:
  - {{name: quantization, values: [null, fp8], default: null}}
workload:
  decode_max_tokens: 32
  fixed_length: {fixed}
  prompt_sets: [prose]
  prompts_per_set: 1
  repeats: 2
  prefill_tokens: [300]
  prefill_repeats: 2
  decode_context_tokens: [300]
  concurrency: [1, 4]
  startup_timeout_s: 60
objective: {{metric: decode_tps_prose}}
gates: {{needle: null, qeval: null}}
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    use_fake_vllm(tmp_path, monkeypatch)
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))

    def space(fixed: bool = True) -> Path:
        path = tmp_path / f"space-{fixed}.yaml"
        path.write_text(SPACE.format(shape=ROOT / "model_shapes" / "minimax-m2-12l", fixed=str(fixed).lower()))
        return path

    return space


def test_dummy_study_decodes_fixed_lengths_and_its_recipe_says_accuracy_does_not_apply(fake, tmp_path, capsys):
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(fake()), "--db", str(db), "--hardware", "h200", "--trials", "2",
            "--confirm-rounds", "0", "--study", "d"]
    assert main(args) == 0, capsys.readouterr().out
    trials = Store(db).trials("d")
    assert [t.status for t in trials] == ["ok", "ok"]
    for t in trials:
        argv = t.launch.server.argv
        assert argv[argv.index("--load-format") + 1] == "dummy"
        assert (Path(argv[4]) / "tokenizer.json").is_file() and Path(argv[4]).parent == tmp_path / "cache" / "model-shapes"
        assert t.needle is None and t.qeval is None and t.gates == []
        for name in ("decode_tps.prose", "output_tps.c4", "ctx_decode_tps.300"):
            m = t.measurement(name)
            assert m is not None and m.failed_requests == 0 and "exactly 32 output tokens" in m.condition
        assert t.measurement("ctx_ttft_ms.300") is not None
    out = tmp_path / "r.yaml"
    assert main(["export", "--db", str(db), "--study", "d", "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["accuracy"] == ["not applicable (dummy weights)"]


def test_a_dummy_space_without_fixed_length_is_refused_before_launching(fake, tmp_path, capsys):
    args = ["search", "--space", str(fake(fixed=False)), "--db", str(tmp_path / "runs.db"), "--hardware", "h200",
            "--trials", "1", "--confirm-rounds", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "set workload.fixed_length: true" in err


def test_completion_style_sends_throughput_requests_as_raw_prompts(fake, tmp_path, capsys):
    """gpt-oss's chat path needs its harmony tokens (recorded on the H200: every chat request failed
    with KeyError '<|end|>'): `workload.request_style: completion` sends every throughput request to
    /v1/completions, and each number's condition says so."""
    space = tmp_path / "completion.yaml"
    space.write_text(fake().read_text().replace("  fixed_length: true", "  fixed_length: true\n  request_style: completion"))
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(space), "--db", str(db), "--hardware", "h200", "--trials", "1",
            "--confirm-rounds", "0", "--study", "c"]
    assert main(args) == 0, capsys.readouterr().out
    [trial] = Store(db).trials("c")
    assert trial.status == "ok"
    for name in ("decode_tps.prose", "output_tps.c4", "ctx_decode_tps.300"):
        assert "raw prompts to /v1/completions" in trial.measurement(name).condition
    served = Path(trial.log_path).read_text()  # the fake prints an access-log line per request
    assert '"POST /v1/completions' in served and "/v1/chat/completions" not in served


def test_ground_truth_measure_stops_at_its_time_budget_and_resumes(gt, fake, tmp_path, capsys):
    """A GPU sitting is 10 minutes a call: `measure --time-budget` starts no launch after the
    budget (at least one per sitting), and the next sitting goes on where it stopped."""
    db = tmp_path / "gt.db"
    argv = ["measure", "--space", str(fake()), "--db", str(db), "--logs", str(tmp_path / "logs"), "--launches", "1",
            "--no-accuracy", "--hardware", "h200", "--time-budget", "0.001"]
    gt.main(argv)
    assert "stopped: time budget" in capsys.readouterr().out
    assert len(Store(db).trials("fake-dummy-launch1")) == 1
    gt.main(argv)
    assert [t.status for t in Store(db).trials("fake-dummy-launch1")] == ["ok", "ok"]


def test_ground_truth_measure_stops_when_the_gpu_is_held(gt, fake, tmp_path, monkeypatch, capsys):
    """On the tenth session's H100 an EngineCore left by the sitting before held 73 GiB: each launch
    failed at start with vLLM's "Free memory on device ... less than desired GPU memory utilization",
    the table went on to the next candidate, and the failures were learned as knob values. Now the
    first such launch stops the sitting with vLLM's line and the fix, non-zero, nothing learned, the
    launch kept to run again."""
    db = tmp_path / "gt.db"
    argv = ["measure", "--space", str(fake()), "--db", str(db), "--logs", str(tmp_path / "logs"), "--launches", "1",
            "--no-accuracy", "--hardware", "h200"]
    monkeypatch.setenv("FAKE_VLLM_FREE_GIB", "5.78")
    with pytest.raises(SystemExit) as stop:
        gt.main(argv)
    assert stop.value.code == 3
    out = capsys.readouterr().out
    assert "stopped: trial 0 failed for a cause in the environment, not a knob (gpu_memory_in_use)" in out and "Free memory on device cuda:0 (5.78/" in out and "nvidia-smi" in out
    store = Store(db)
    assert [t.status for t in store.trials("fake-dummy-launch1")] == ["environment"]
    assert list(store.db["failures"].rows) == []
    monkeypatch.delenv("FAKE_VLLM_FREE_GIB")
    gt.main(argv)  # the GPU freed: the same command goes on, the held launch run again
    assert [t.status for t in store.trials("fake-dummy-launch1")][-2:] == ["ok", "ok"]


def test_ground_truth_gates_every_candidate_it_measures(gt, fake, tmp_path):
    """The table needs every accuracy trial's needle and qeval, so the ground truth must not skip
    the gates of candidates slower than the incumbent, as a study does (vLLM's default)."""
    from argparse import Namespace

    from autotune.models import GatePolicy

    args = Namespace(space=str(fake()), model=None, db=tmp_path / "gt.db", hardware="h200", logs=tmp_path / "logs")
    assert gt.plan_for(args, "fake-dummy-accuracy", True, []).ctx.gates is GatePolicy.EVERY_TRIAL
    assert gt.plan_for(args, "fake-dummy-launch1", False, []).ctx.gates is GatePolicy.NO_ACCURACY


def test_ground_truth_export_names_the_measuring_machine_not_the_exporting_one(gt, fake, tmp_path):
    """The H200 table is measured on a lent GPU machine and exported here: its hardware profile and
    machine come from the study's runs.db (the study's --hardware, the hosts it ran on), not from
    the machine that runs `export`."""
    import json

    import sqlite_utils

    db = tmp_path / "gt.db"
    gt.main(["measure", "--space", str(fake()), "--db", str(db), "--logs", str(tmp_path / "logs"),
             "--launches", "1", "--no-accuracy", "--hardware", "h200"])
    # as if measured elsewhere: the host row the GPU machine wrote
    hosts = sqlite_utils.Database(db)["hosts"]
    [host] = list(hosts.rows)
    fingerprint = {"hostname": "gpu-box", "gpu": "1x NVIDIA H200", "compute_capability": "sm_90",
                   "engine": "vllm", "engine_version": "0.26.0"}
    hosts.update(host["key"], {"hostname": "gpu-box", "fingerprint": json.dumps(fingerprint)})
    out = tmp_path / "table.json"
    with pytest.raises(SystemExit, match="pass --space-file"):  # no package names the shape
        gt.main(["export", "--db", str(db), "--out", str(out)])
    gt.main(["export", "--db", str(db), "--out", str(out), "--space-file", str(fake())])
    table = json.loads(out.read_text())
    assert table["space"]["model"]["path"] == str(ROOT / "model_shapes" / "minimax-m2-12l")  # not the cache copy
    assert table["hardware"]["name"] == "h200"
    machine = table["conditions"]["machine"]
    assert "gpu-box" in machine and "1x NVIDIA H200" in machine and "sm_90" in machine


def test_ground_truth_sitting_guesses_the_next_launch_from_its_warm_launches(gt):
    """A fresh machine's first launch pays the cold compile (251 s against 107-140 s after it on
    the H200): after it, the sitting plans with its warm launches, so a 9.2-minute sitting holds a
    third launch instead of stopping at two."""
    assert gt.next_launch_guess_s([]) == 0.0
    assert gt.next_launch_guess_s([251.0]) == 251.0  # nothing warm yet: as long as the first
    assert gt.next_launch_guess_s([251.0, 117.0]) == 117.0
    assert gt.next_launch_guess_s([251.0, 117.0, 140.0]) == 140.0  # the longest warm one
    assert 251 + 117 + gt.next_launch_guess_s([251.0, 117.0]) < 9.2 * 60


def test_a_fresh_machines_first_sitting_plans_with_the_warm_launches_of_earlier_sittings(gt):
    """On 2026-12-02 the first sitting on a fresh H200 stopped after its one cold launch (281 s:
    "a launch takes ~281 s here") although earlier sittings' warm launches (106-150 s) left room
    for a second in the 9.2 minutes. The earlier sittings are in runs.db: each sitting's first
    launch is cold, the rest are warm."""
    from autotune.models import Candidate, TrialResult

    def trial(number: int, at: str, seconds: float) -> TrialResult:
        return TrialResult(study="s-launch1", number=number, candidate=Candidate(engine="vllm", params={"n": number}),
                           status="ok", duration_s=seconds, started_at=at)

    earlier = [trial(0, "2026-12-01T21:08:00+00:00", 281.0), trial(1, "2026-12-01T21:13:00+00:00", 117.0),
               trial(2, "2026-12-01T21:15:00+00:00", 140.0),
               trial(3, "2026-12-01T22:10:00+00:00", 249.0), trial(4, "2026-12-01T22:15:00+00:00", 106.0)]
    warm = gt.warm_launches_s(earlier)
    assert sorted(warm) == [106.0, 117.0, 140.0]  # each sitting's first launch is left out
    assert gt.next_launch_guess_s([281.0], warm) == 140.0  # before: 281, and the sitting stopped
    assert gt.next_launch_guess_s([281.0, 120.0], warm) == 120.0  # this sitting's own warm launches first
    assert gt.next_launch_guess_s([281.0], []) == 281.0


def _launch_records(table: dict) -> list[tuple]:
    return sorted((l["study"], l["trial"], e["key"], l["status"], l["objective"], l["started_at"])
                  for e in table["candidates"] for l in e["launches"])


def test_ground_truth_restore_rebuilds_the_studies_and_measure_goes_on_without_overwriting(gt, fake, tmp_path, capsys):
    """The H200 table's runs.db lived on a lent machine and went with it: `restore` rebuilds the
    studies from the committed table, and `measure` then launches only what the table lacks, numbering
    its trials after the restored ones (Optuna's trials restored too: a fresh Optuna study would number
    the next trial 0 and runs.db would write it over the restored trial 0)."""
    import json

    space = str(fake())
    first = tmp_path / "first.db"
    argv = ["measure", "--space", space, "--db", str(first), "--logs", str(tmp_path / "logs"), "--launches", "2",
            "--no-accuracy", "--hardware", "h200", "--time-budget", "0.001"]
    for _ in range(3):  # one launch a sitting: launch1 of both candidates, launch2 of the baseline only
        gt.main(argv)
    assert [t.status for t in Store(first).trials("fake-dummy-launch2")] == ["ok"]
    table = tmp_path / "table.json"
    gt.main(["export", "--db", str(first), "--out", str(table), "--space-file", space])

    second = tmp_path / "second.db"  # the next sitting's fresh machine: only the table is left
    gt.main(["restore", str(table), "--space", space, "--db", str(second), "--hardware", "h200"])
    again = tmp_path / "again.json"
    gt.main(["export", "--db", str(second), "--out", str(again), "--space-file", space])
    before, after = json.loads(table.read_text()), json.loads(again.read_text())
    assert _launch_records(after) == _launch_records(before)
    assert after["studies"] == before["studies"] and after["hardware"]["name"] == "h200"

    gt.main([*argv[:4], str(second), *argv[5:]])
    launch2 = Store(second).trials("fake-dummy-launch2")
    assert [(t.number, t.status) for t in launch2] == [(0, "ok"), (1, "ok")]
    restored_baseline = next(l for l in _launch_records(before) if l[0] == "fake-dummy-launch2")
    assert (launch2[0].candidate.key(), launch2[0].objective, launch2[0].started_at) == (
        restored_baseline[2], restored_baseline[4], restored_baseline[5])
    assert len(Store(second).trials("fake-dummy-launch1")) == 2  # nothing of launch1 launched again


def test_ground_truth_restore_refuses_a_db_holding_the_studies_or_another_space(gt, fake, tmp_path):
    db = tmp_path / "gt.db"
    space = str(fake())
    gt.main(["measure", "--space", space, "--db", str(db), "--logs", str(tmp_path / "logs"), "--launches", "1",
             "--no-accuracy", "--hardware", "h200"])
    table = tmp_path / "table.json"
    gt.main(["export", "--db", str(db), "--out", str(table), "--space-file", space])
    held = Store(db).trials("fake-dummy-launch1")
    with pytest.raises(SystemExit, match="already holds study 'fake-dummy-launch1'"):
        gt.main(["restore", str(table), "--space", space, "--db", str(db), "--hardware", "h200"])
    assert Store(db).trials("fake-dummy-launch1") == held
    other = tmp_path / "other.yaml"
    other.write_text(Path(space).read_text().replace("decode_max_tokens: 32", "decode_max_tokens: 64"))
    with pytest.raises(SystemExit, match="is not the space .* was measured with: workload.decode_max_tokens"):
        gt.main(["restore", str(table), "--space", str(other), "--db", str(tmp_path / "new.db"), "--hardware", "h200"])


def test_a_table_without_its_studies_hosts_restores_the_host_its_machine_line_names(gt):
    line = ("vm (gpu 1x NVIDIA H200, compute_capability sm_90, driver 580.159.04, cuda 13.0, torch 2.11.0+cu130, "
            "engine vllm, engine_version 0.26.0)")
    host = gt.host_from_machine_line(line, "vllm")
    assert (host.hostname, host.gpu, host.compute_capability, host.driver, host.cuda, host.torch, host.engine_version) == (
        "vm", "1x NVIDIA H200", "sm_90", "580.159.04", "13.0", "2.11.0+cu130", "0.26.0")


def test_a_table_retargeted_to_another_objective_reads_it_from_the_same_launches(gt, fake, tmp_path):
    """The H200 launches measured a wave of 8 streams besides the single-stream objective: `retarget`
    makes the table whose objective is that wave, from the stored measurements of the same launches
    (no launch repeated), and refuses an objective the launches did not measure."""
    import json

    db, table, c4 = tmp_path / "gt.db", tmp_path / "table.json", tmp_path / "c4.json"
    space = str(fake())
    gt.main(["measure", "--space", space, "--db", str(db), "--logs", str(tmp_path / "logs"), "--launches", "1",
             "--no-accuracy", "--hardware", "h200"])
    gt.main(["export", "--db", str(db), "--out", str(table), "--space-file", space])
    gt.main(["retarget", str(table), "--objective", "output_tps_c4", "--out", str(c4)])
    before, after = json.loads(table.read_text()), json.loads(c4.read_text())
    assert after["objective"] == after["space"]["objective"]["metric"] == "output_tps_c4"
    assert "output_tps_c4" in after["conditions"]["retargeted"]
    for old, new in zip(before["candidates"], after["candidates"]):
        for was, now in zip(old["launches"], new["launches"]):
            wave = next(m for m in now["result"]["measurements"] if m["name"] == "output_tps.c4")
            assert now["objective"] == now["result"]["objective"] == round(wave["median"], 4)
            assert now["started_at"] == was["started_at"] and was["objective"] != now["objective"]
    with pytest.raises(SystemExit, match="output_tps_c8 needs 8 in workload.concurrency"):
        gt.main(["retarget", str(table), "--objective", "output_tps_c8", "--out", str(tmp_path / "c8.json")])


def test_a_wave_is_warmed_at_its_size_before_it_is_measured(fake, tmp_path, capsys, monkeypatch):
    """On the H200 (vLLM 0.26.0, 2026-12-06) Triton compiled fused_moe_kernel for a new batch size
    inside the measured 8-stream wave of one trial (vLLM's jit_monitor warned): that trial's c8 read
    x0.62 and its c32 x0.29 of the baseline's. The stand-in stalls 1.5 s at each batch size it has
    not run yet; a wave of 4 times 32 tokens takes ~0.2 s without a stall."""
    monkeypatch.setenv("FAKE_VLLM_JIT_S", "1.5")
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(fake()), "--db", str(db), "--hardware", "h200", "--trials", "1",
            "--confirm-rounds", "0", "--study", "jit"]
    assert main(args) == 0, capsys.readouterr().out
    (trial,) = Store(db).trials("jit")
    wave = trial.measurement("output_tps.c4")
    assert wave is not None and wave.median > 4 * 32 / 1.0, wave  # the wave took under 1 s: no stall in it


def test_ground_truth_repeats_every_nth_candidate_later_in_the_sitting(gt, fake, tmp_path, capsys):
    """Issue 53's table: a second launch of every third candidate (grid order), each some launches
    after its first rather than back to back, so the repeats see the sitting's drift; a resumed
    sitting goes on with the same plan."""
    space = tmp_path / "space-8.yaml"
    space.write_text(fake().read_text().replace(
        "  - {name: quantization, values: [null, fp8], default: null}",
        "  - {name: quantization, values: [null, fp8], default: null}\n"
        "  - {name: kv_cache_dtype, values: [auto, fp8], default: auto}\n"
        "  - {name: max_num_seqs, values: [null, 8], default: null}"))
    db = tmp_path / "gt.db"
    argv = ["measure", "--space", str(space), "--db", str(db), "--logs", str(tmp_path / "logs"), "--launches", "2",
            "--repeat-every", "3", "--repeat-lag", "2", "--no-accuracy", "--hardware", "h200"]
    gt.main([*argv, "--time-budget", "0.001"])  # one launch, then resumed
    gt.main(argv)
    from autotune.space.candidates import enumerate_candidates, load_space

    grid = [c.key() for c in enumerate_candidates(load_space(str(space)))]
    first = {t.candidate.key(): t for t in Store(db).trials("fake-dummy-launch1")}
    second = {t.candidate.key(): t for t in Store(db).trials("fake-dummy-launch2")}
    assert len(grid) == 8 and set(first) == set(grid)
    assert list(second) == [grid[0], grid[3], grid[6]]
    order = sorted([*(("1", k, t.started_at) for k, t in first.items()), *(("2", k, t.started_at) for k, t in second.items())],
                   key=lambda x: x[2])
    position = {(s, k): i for i, (s, k, _) in enumerate(order)}
    for k in second:  # the first launches of the next 2 candidates come first: never back to back
        assert position[("2", k)] - position[("1", k)] >= 2
