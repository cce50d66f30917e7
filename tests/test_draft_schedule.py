"""A draft length per batch size (vLLM's num_speculative_tokens_per_batch_size): the schedule's
form, its rendering, its verdict, and the study end to end against the stand-in vLLM
(tests/fakes/vllm_site.py: its speed per K depends on the requests in flight, so the best K at one
stream is not the best at four; it takes the schedule key only as 0.33.0)."""

from __future__ import annotations

import json

import pytest
import yaml
from fakes.vllm_site import small_model_dir, use_fake_vllm

from autotune.cli import main
from autotune.engines import get_engine
from autotune.engines.vllm import option_args, speculative_config
from autotune.errors import ConfigError
from autotune.hardware.device import detect, host_fingerprint
from autotune.models import Candidate, DraftSchedule, ScheduleLevel, ScheduleStatus
from autotune.space.candidates import load_space
from autotune.store import Store
from autotune.verdict.schedule_gain import judge_levels
from autotune.verdict.noise import LaunchNoise, NoiseKey

# ---------------------------------------------------------------------- the schedule's form


def test_a_schedule_reads_from_its_knob_text_and_renders_vllms_inclusive_ranges():
    schedule = DraftSchedule.parse("1:4/4:2/16:0")
    assert schedule.max_k == 4 and schedule.text() == "1:4/4:2/16:0"
    assert schedule.vllm_entries() == [[1, 3, 4], [4, 15, 2], [16, 1 << 16, 0]]
    assert schedule.describe() == "batch 1-3: K=4, batch 4-15: K=2, batch 16+: K=0"


@pytest.mark.parametrize("text", ["2:4/8:2", "1:4/1:2", "1:4/8", "", "1:0/4:0", "a:4"])
def test_a_schedule_that_is_not_thresholds_from_batch_one_is_refused(text):
    with pytest.raises(ValueError, match="draft schedule"):
        DraftSchedule.parse(text)


def test_the_speculative_config_carries_the_schedule_with_its_largest_k():
    config = speculative_config({"spec_method": "ngram", "draft_schedule": "1:4/4:2"})
    assert config is not None and config["num_speculative_tokens"] == 4
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 1 << 16, 2]]
    assert speculative_config({"spec_method": "ngram", "draft_k": 4, "draft_schedule": "1:4/4:2"}) == config
    with pytest.raises(ConfigError, match="draft_k must be its largest K"):
        option_args({"spec_method": "ngram", "draft_k": 2, "draft_schedule": "1:4/4:2"})
    with pytest.raises(ConfigError, match="knob draft_schedule"):
        option_args({"spec_method": "ngram", "draft_schedule": "4:2"})


# ---------------------------------------------------------------------- the verdict


def level(c: int, single: float, schedule: float) -> ScheduleLevel:
    return ScheduleLevel(concurrency=c, metric="m", tps_by_k={4: single}, draft_k=4, single_k_tps=single,
                         schedule_tps=schedule)


NOISE = LaunchNoise(sigma=0.02, df=4, groups=1, launches=5)  # one-launch limit: 2 x 0.02 x sqrt 2 = 5.7 %


@pytest.mark.parametrize(
    ("levels", "noise", "status"),
    [
        ([level(1, 100, 101), level(4, 100, 130)], NOISE, ScheduleStatus.ADOPTED),
        ([level(1, 100, 80), level(4, 100, 130)], NOISE, ScheduleStatus.REJECTED),
        ([level(1, 100, 101), level(4, 100, 103)], NOISE, ScheduleStatus.NO_GAIN),
        ([level(1, 100, 101), level(4, 100, 130)], None, ScheduleStatus.UNCONFIRMED),
    ],
)
def test_the_schedule_is_adopted_only_faster_somewhere_beyond_the_noise_and_slower_nowhere(levels, noise, status):
    judged, got, why = judge_levels(levels, noise)
    assert got is status, why
    if noise is not None:
        assert [x.beyond_noise for x in judged] == [abs(x.schedule_tps / x.single_k_tps - 1) > 0.0566 for x in judged]


# ---------------------------------------------------------------------- end to end on the stand-in

SPACE = """
name: fake-vllm-schedule
engine: vllm
model: {{name: gemma-3-270m, path: {model}, prompt_style: completion, head_dim: 256, n_kv_heads: 1, n_layers: 18,
        params_total_b: 0.27, weight_bits: 16, context_max: 4096}}
fixed: {{max_model_len: 4096, gpu_memory_utilization: 0.5, spec_method: ngram}}
knobs:
  - {{name: draft_k, values: [2, 4], default: 2}}{extra}
workload:
  decode_max_tokens: 48
  prompts_per_set: 1
  prompt_sets: [prose]
  repeats: 2
  prefill_tokens: []
  concurrency: [1, 4]
  startup_timeout_s: 60
gates: {{needle: null, qeval: null}}
"""


def study(tmp_path, monkeypatch, version: str, extra: str = "") -> tuple[list[str], object]:
    use_fake_vllm(tmp_path, monkeypatch, version=version)
    monkeypatch.setenv("FAKE_VLLM_STEP_S", "0.02")  # speeds compared between launches: see the stand-in
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(model=small_model_dir(tmp_path), extra=extra))
    db = tmp_path / "runs.db"
    return ["search", "--space", str(space), "--db", str(db), "--trials", "2", "--confirm-rounds", "0",
            "--noise-relaunches", "2", "--no-accuracy", "--study", "s"], db


def earlier_launch_noise(db, space_path) -> None:
    """Launches of an earlier study on this host that spread by ~5 %: the noise a single launch is
    held to. Without them the verdict rests on the study's own three baseline launches (df 2), which
    can land far inside the stand-in's scheduling jitter, and the schedule's K=4 level (the same
    config as the single K at one stream) then reads as slower beyond the noise by chance."""
    space = load_space(str(space_path))
    host_key = host_fingerprint(detect(), get_engine("vllm")).key()
    store, earlier = Store(db), Candidate(engine="vllm", params={"draft_k": 2})
    for i, value in enumerate([100.0, 106.0, 95.0, 103.0]):
        store.add_launch_sample(NoiseKey(host=host_key, engine="vllm", metric=space.objective.sample_metric),
                                "earlier", earlier, value, "noise", i)


def test_on_0_33_the_study_composes_a_schedule_confirms_it_in_one_launch_and_exports_it(tmp_path, monkeypatch, capsys):
    args, db = study(tmp_path, monkeypatch, "0.33.0")
    earlier_launch_noise(db, tmp_path / "space.yaml")
    assert main(args) == 0, capsys.readouterr().out
    report = Store(db).draft_schedule("s")
    assert report is not None, "no draft schedule stored"
    # the stand-in: K=4 is fastest at one stream, K=2 at four in flight
    assert [(x.concurrency, x.draft_k) for x in report.levels] == [(1, 4), (4, 2)]
    assert report.schedule is not None and report.schedule.text() == "1:4/4:2"
    assert report.single_k in (2, 4) and report.single_k_trial in (0, 1)  # the study's best of the two
    assert all(x.schedule_tps for x in report.levels), "the confirmation launch measured no level"
    assert report.status is ScheduleStatus.ADOPTED, report.why
    assert float(report.why.split("launch noise ±")[1].split("%")[0]) > 2, "the earlier launches were not pooled"
    config = json.loads(report.speculative_config or "{}")
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 1 << 16, 2]]
    assert config["num_speculative_tokens"] == 4

    out = tmp_path / "r.yaml"
    assert main(["export", "--db", str(db), "--study", "s", "-o", str(out)]) == 0
    recipe = yaml.safe_load(out.read_text())
    argv = recipe["launch"]["nodes"][0]["argv"]
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == config
    assert recipe["params"]["draft_schedule"] == "1:4/4:2"
    assert recipe["draft_schedule"]["status"] == "adopted"

    capsys.readouterr()
    assert main(["show", "--db", str(db), "--study", "s"]) == 0
    shown = capsys.readouterr().out
    assert "draft schedule batch 1-3: K=4, batch 4+: K=2 (adopted)" in shown
    html = tmp_path / "r.html"
    assert main(["report", "--db", str(db), "--study", "s", "-o", str(html)]) == 0
    assert "draft schedule batch 1-3: K=4, batch 4+: K=2 (adopted)" in html.read_text()


def test_on_0_26_nothing_changes_and_show_says_why_no_schedule(tmp_path, monkeypatch, capsys):
    args, db = study(tmp_path, monkeypatch, "0.26.0")
    assert main(args) == 0, capsys.readouterr().out
    report = Store(db).draft_schedule("s")
    assert report is not None and report.status is ScheduleStatus.NOT_ACCEPTED and report.schedule is None
    assert not list(tmp_path.rglob("draft-schedule-*")), "a schedule launch ran on a version without the key"
    capsys.readouterr()
    assert main(["show", "--db", str(db), "--study", "s"]) == 0
    assert ("no draft schedule (not accepted): vLLM 0.26.0 does not list num_speculative_tokens_per_batch_size "
            "among its --speculative-config keys") in capsys.readouterr().out
    out = tmp_path / "r.yaml"
    assert main(["export", "--db", str(db), "--study", "s", "-o", str(out)]) == 0
    argv = yaml.safe_load(out.read_text())["launch"]["nodes"][0]["argv"]
    assert "num_speculative_tokens_per_batch_size" not in " ".join(argv)


HAND_WRITTEN = "\n  - {name: draft_schedule, values: [null, '1:4/4:2'], default: null}"


def test_a_hand_written_schedule_for_a_version_without_the_key_is_refused_before_runs_db(tmp_path, monkeypatch, capsys):
    args, db = study(tmp_path, monkeypatch, "0.26.0", extra=HAND_WRITTEN)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert ("draft_schedule=1:4/4:2: vLLM 0.26.0 does not list num_speculative_tokens_per_batch_size among its "
            "--speculative-config keys") in err
    assert not db.exists()


def test_a_hand_written_schedule_runs_on_0_33(tmp_path, monkeypatch, capsys):
    args, db = study(tmp_path, monkeypatch, "0.33.0", extra=HAND_WRITTEN)
    assert main([*args, "--try", "draft_k=4,draft_schedule=1:4/4:2", "--noise-relaunches", "0"]) == 0, capsys.readouterr().out
    tried = [t for t in Store(db).trials("s") if t.candidate.params.get("draft_schedule") == "1:4/4:2"]
    assert tried and tried[0].status == "ok"
    argv = tried[0].launch.server.argv
    assert json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens_per_batch_size"] == [
        [1, 3, 4], [4, 1 << 16, 2]]


def test_the_schedule_launch_runs_no_accuracy_gates(tmp_path):
    """The schedule's one launch measures speed only, whatever the study's gate policy: its context
    is copied with gates off (a copy that named a field the context lacks would keep the gates on)."""
    from types import SimpleNamespace

    from autotune.engines import get_engine
    from autotune.models import DraftSchedule, DraftScheduleReport, FailureInfo, GatePolicy, ScheduleLevel, SearchSpace
    from autotune.study import draft_schedule
    from autotune.trial.context import TrialContext
    from stand_in import StandIn

    space = SearchSpace.model_validate(yaml.safe_load(SPACE.format(model=small_model_dir(tmp_path), extra="")))
    ctx = TrialContext(study="s", space=space, model=space.model, engine=get_engine("vllm"), logs_dir=tmp_path,
                       gates=GatePolicy.AT_ONCE)
    launch = StandIn(fails=lambda request: FailureInfo(failure_class="startup_crash", message="not launched"))
    anchor = SimpleNamespace(candidate=Candidate(engine="vllm", params={"draft_k": 4}), number=0)
    report = DraftScheduleReport(study="s", status=ScheduleStatus.UNCONFIRMED, why="composed",
                                 schedule=DraftSchedule.parse("1:4/4:2"),
                                 levels=[ScheduleLevel(concurrency=c, metric="m", tps_by_k={4: 1.0}, draft_k=4)
                                         for c in (1, 4)])
    draft_schedule.confirm_schedule(launch, ctx, report, anchor, lambda: None)
    assert [r.ctx.gates for r in launch.requests] == [GatePolicy.NO_ACCURACY]
