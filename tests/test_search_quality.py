"""The search-quality replay (issue 12) over a tiny committed table: no engine, seconds.

tests/data/replay-tiny.json is a slice of the measured ground truth
(benchmarks/data/gt-llamacpp-gemma3-270m-cpu.json, `ground_truth.py slice --fix type_k=f16`):
real launches of real candidates, including the real failure of a quantized V cache without
flash attention, so the replay exercises learned failures as the measurement did.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.models import GatePolicy

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "replay-tiny.json"


@pytest.fixture(scope="module")
def table(sq):
    t = sq.Table(json.loads(TINY.read_text()))
    t.launched_failure_implicates()
    return t


def stored_objectives(table, key: str) -> set[float]:
    return {launch["objective"] for launch in table.entries[key]["launches"]}


def test_a_replayed_launch_is_one_of_the_stored_launches_the_same_for_every_strategy(sq, table, tmp_path):
    from autotune.trial.context import TrialContext
    from autotune.trial.launch import LaunchRequest
    from autotune.engines import get_engine

    ctx = TrialContext(study="x", space=table.space, model=table.space.model,
                       engine=get_engine("llamacpp").use_space(table.space), logs_dir=tmp_path)
    for candidate in table.grid:
        entry = table.entries[candidate.key()]
        first = table.launch(seed=7)(LaunchRequest(ctx, candidate, 3))
        again = table.launch(seed=7)(LaunchRequest(ctx, candidate, 5))
        assert (first.status, first.objective) == (again.status, again.objective)  # paired over strategies
        assert first.number == 3 and first.candidate.key() == candidate.key()
        if first.status == "ok":
            assert first.objective in stored_objectives(table, candidate.key())
            if entry["numerics_class"] in table.data["accuracy"]:
                assert first.qeval is not None and first.needle is not None
        else:
            assert first.failure is not None and first.failure.implicates  # learned, never isolated by launching


def test_grid_order_at_full_budget_launches_each_candidate_once_and_learns_the_failure(sq, table, tmp_path):
    budget = len(table.grid)
    run = sq.replay_one(table, "grid", seed=0, budget=budget, workdir=tmp_path)
    launchable = [c for c in table.grid if table.entries[c.key()]["launches"] and
                  all(l["status"] == "ok" for l in table.entries[c.key()]["launches"])]
    # every launchable candidate ran; the V-cache failure ran once and pruned its siblings
    assert run.launches == len(launchable) + 1
    assert run.launches + run.pruned == budget
    assert run.pick is not None and 0.9 <= run.ratio <= 1.0


@pytest.mark.parametrize("strategy", ["autotune", "random", "grid", "tpe", "planner"])
def test_each_strategy_stays_inside_its_budget(sq, table, tmp_path, strategy):
    for seed in range(3):
        run = sq.replay_one(table, strategy, seed=seed, budget=4, workdir=tmp_path)
        assert 1 <= run.launches <= 4
        assert 0.0 <= run.ratio <= 1.0


def test_the_default_queues_the_baseline_then_the_planner_s_picks(sq, table, tmp_path):
    from autotune.store import Store

    sq.replay_one(table, "autotune", seed=1, budget=3, workdir=tmp_path)
    trials = Store(tmp_path / "autotune-1-3.db").trials("replay-autotune-1-3")
    assert trials[0].number == 0 and trials[0].candidate.key() == table.base_key
    assert trials[0].predicted  # the planner's prediction is stored, as in a real study


def test_the_planner_strategy_launches_the_planner_s_order_alone(sq, table, tmp_path):
    """Issue 53's "planner's order alone": after the baseline, every launch is the next candidate by
    the planner's prediction; no sampler chooses."""
    from autotune.planner.prior import planner_order
    from autotune.store import Store

    budget = 5
    sq.replay_one(table, "planner", seed=3, budget=budget, workdir=tmp_path)
    trials = [t for t in Store(tmp_path / f"planner-3-{budget}.db").trials(f"replay-planner-3-{budget}")
              if t.status in ("ok", "failed")]
    order = [c.key() for c in planner_order(table.space, table.hardware, 1)(list(table.grid))
             if c.key() != table.base_key]
    launched = [t.candidate.key() for t in trials]
    assert launched[0] == table.base_key
    assert launched[1:] == [k for k in order if k in launched[1:]][: len(launched) - 1]
    assert launched[1:3] == order[:2]


def test_cli_json_summary_and_wilcoxon(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "search_quality.py"), str(TINY), "--seeds", "6",
         "--budgets", "3,6", "--strategies", "autotune,random", "--json"],
        capture_output=True, text=True, check=True, cwd=ROOT, timeout=600,
    )
    summary = json.loads(out.stdout)
    assert summary["grid"] == len(json.loads(TINY.read_text())["candidates"]) and summary["seeds"] == 6
    rows = {(r["budget"], r["strategy"]): r for r in summary["rows"]}
    assert set(rows) == {(3, "autotune"), (3, "random"), (6, "autotune"), (6, "random")}
    for r in rows.values():
        assert r["ratio_q1"] <= r["ratio_median"] <= r["ratio_q3"] <= 1.0
        assert r["launches_median"] <= r["budget"]
    assert rows[(3, "autotune")]["autotune_better_p"] is None
    p = rows[(3, "random")]["autotune_better_p"]
    assert p is None or 0.0 < p <= 1.0


def test_a_table_that_does_not_cover_its_grid_is_refused(tmp_path):
    data = json.loads(TINY.read_text())
    data["candidates"] = data["candidates"][1:]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search_quality.py"), str(bad)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    grid = len(json.loads(TINY.read_text())["candidates"])
    assert out.stderr.count("\n") == 1 and f"does not cover 1 of {grid} candidates" in out.stderr


def test_candidates_that_cannot_rank_first_skip_their_gates_and_the_pick_stays(sq, table, tmp_path):
    from autotune.store import Store

    budget = len(table.grid)
    every = sq.replay_one(table, "grid", seed=0, budget=budget, workdir=tmp_path / "every", gates=GatePolicy.EVERY_TRIAL)
    fresh = sq.replay_one(table, "grid", seed=0, budget=budget, workdir=tmp_path / "fresh", gates=GatePolicy.AT_ONCE)
    known = sq.replay_one(table, "grid", seed=0, budget=budget, workdir=tmp_path / "noise", host_noise=True,
                          gates=GatePolicy.AT_ONCE)
    ok = [t for t in Store(tmp_path / "every" / f"grid-0-{budget}.db").trials(f"replay-grid-0-{budget}") if t.status == "ok"]
    assert every.dominated == 0 and every.gated == len(ok) > 1
    # a fresh host knows no launch noise, yet a score below the incumbent's can never rank first
    assert fresh.dominated >= 1 and fresh.gated + fresh.dominated == every.gated
    assert fresh.pick == every.pick == known.pick  # what can never be best was never the pick
    assert known.launches == fresh.launches == every.launches
    trials = Store(tmp_path / "fresh" / f"grid-0-{budget}.db").trials(f"replay-grid-0-{budget}")
    skipped = [t for t in trials if t.dominated]
    assert all(t.qeval is None and t.needle is None and t.objective for t in skipped)
    assert trials[0].dominated is None  # the qeval reference always takes the gates
    assert all("launch noise not measured" in t.dominated for t in skipped)
    noisy = [t for t in Store(tmp_path / "noise" / f"grid-0-{budget}.db").trials(f"replay-grid-0-{budget}") if t.dominated]
    assert noisy and all("launch noise" in t.dominated and "not measured" not in t.dominated for t in noisy)


def test_a_numerics_neutral_knob_reuses_the_accuracy_of_a_measured_sibling(sq, table, tmp_path):
    from autotune.store import Store

    knobs = [k.model_copy(update={"numerics_neutral": k.name == "n_threads"}) for k in table.space.knobs]
    neutral = sq.Table(json.loads(TINY.read_text()))
    neutral.space = neutral.space.model_copy(update={"knobs": knobs})
    neutral.launched_failure_implicates()
    budget = len(table.grid)
    # every launch takes its gates here, so each n_threads=1 sibling is a donor
    run = sq.replay_one(neutral, "grid", seed=0, budget=budget, workdir=tmp_path, gates=GatePolicy.EVERY_TRIAL)
    trials = [t for t in Store(tmp_path / f"grid-0-{budget}.db").trials(f"replay-grid-0-{budget}") if t.status == "ok"]
    by_number = {t.number: t for t in trials}
    reused = [t for t in trials if t.accuracy_from is not None]
    assert reused, "n_threads=2 candidates follow their n_threads=1 siblings in grid order"
    for t in reused:
        donor = by_number[t.accuracy_from]
        assert donor.accuracy_from is None and donor.number < t.number
        assert {k: v for k, v in donor.candidate.params.items() if k != "n_threads"} == \
            {k: v for k, v in t.candidate.params.items() if k != "n_threads"}
        assert t.qeval == donor.qeval
    assert all("reused from trial" in g.detail for t in reused for g in t.gates)
    assert trials[0].accuracy_from is None  # the reference measures its own
    every = sq.replay_one(table, "grid", seed=0, budget=budget, workdir=tmp_path / "b", gates=GatePolicy.EVERY_TRIAL)
    assert run.launches == every.launches


H200 = ROOT / "benchmarks" / "data" / "gt-vllm-minimax-h200.json"


def test_a_slice_can_fix_a_knob_at_its_null_value(gt, tmp_path):
    """`--fix quantization=none` keeps the unquantized half (a null value is a value, not 'no match')."""
    sliced = gt.slice_table(json.loads(H200.read_text()), {"quantization": "none", "kv_cache_dtype": "auto"})
    assert len(sliced["candidates"]) == 4
    assert all(c["params"].get("quantization") is None and c["params"]["kv_cache_dtype"] == "auto"
               for c in sliced["candidates"])


def test_a_table_of_a_space_without_gates_ranks_every_launched_candidate(sq, gt, tmp_path):
    """Dummy weights have no accuracy to gate: every candidate that launched is eligible, the
    optimum is the best mean, and a full grid replay picks inside the table's noise of it."""
    data = gt.slice_table(json.loads(H200.read_text()), {"quantization": "none", "kv_cache_dtype": "auto"})
    h200 = sq.Table(data)
    means = {c["key"]: sum(l["objective"] for l in c["launches"]) / len(c["launches"]) for c in data["candidates"]}
    assert h200.optimum == pytest.approx(max(means.values()))
    assert all(v is not None for v in h200.truth.values())
    run = sq.replay_one(h200, "grid", seed=0, budget=len(h200.grid), workdir=tmp_path)
    assert run.launches == len(h200.grid) and run.pick is not None and run.tied


def test_the_summary_says_when_its_table_cannot_rank_its_candidates(sq):
    """The goal compares picks by their true values; on a table whose candidates do not differ beyond
    their launch noise (the H200 table: F test p = 0.68) that comparison measures the table's noise,
    and the summary says so instead of letting 'NOT met' read as the search's fault."""
    data = json.loads(TINY.read_text())
    real = sq.Table(data)
    assert real.candidates_differ_p is not None and real.candidates_differ_p < 0.01
    flat = json.loads(TINY.read_text())  # every candidate moved to the same mean, its own wiggle kept
    for entry in flat["candidates"]:
        ok = [l for l in entry["launches"] if l["status"] == "ok"]
        mean = sum(l["objective"] for l in ok) / len(ok) if ok else 1.0
        for launch in ok:
            for record in (launch, launch["result"]):
                record["objective"] = round(record["objective"] * 30.0 / mean, 4)
    table = sq.Table(flat)
    assert table.candidates_differ_p is not None and table.candidates_differ_p > 0.5
    text = sq.render(sq.summarize(table, [], ["autotune"], []))
    assert "cannot judge the goal" in text and "do not differ beyond their launch noise" in text
    assert "cannot judge" not in sq.render(sq.summarize(real, [], ["autotune"], []))


def test_the_summary_says_when_its_table_cannot_resolve_the_goals_threshold(sq):
    """'NOT met' on a table whose launch noise ties candidates far below 0.97 of the optimum with
    it (the CPU table: 11 down to 0.71) is the table's resolution, not only the search's: the summary
    says how far down the ties go and how often the default's pick was one of them."""
    table = sq.Table(json.loads(TINY.read_text()))
    assert table.candidates_differ_p < 0.01 and len(table.tied) == 5  # judgeable, but coarse
    runs = [sq.Replay(strategy="autotune", seed=seed, budget=4, pick="x", ratio=0.9 if seed < 3 else 0.5,
                      launches=4, pruned=0, tied=seed < 3) for seed in range(4)]
    summary = sq.summarize(table, runs, ["autotune"], [4])
    assert not summary["goal"]["met"]
    text = sq.render(summary)
    assert "does not resolve 0.97 of the optimum" in text
    assert "5 candidates down to 0.767 of it" in text and "tied with the optimum in 75% of seeds" in text
    met = [sq.Replay(strategy="autotune", seed=seed, budget=4, pick="x", ratio=1.0, launches=4, pruned=0, tied=True)
           for seed in range(4)]
    assert "does not resolve" not in sq.render(sq.summarize(table, met, ["autotune"], [4]))


def test_a_replayed_launch_is_scored_as_the_replayed_study_s_space_scores_it(sq, table, tmp_path):
    """The engine's launch scores a launch with its space's objective.mad_penalty; the replay does too, so a
    strategy that ranks by the median (penalty 0) sees score == objective, and the table's own space
    sees the score stored when the launch was measured."""
    from autotune.engines import get_engine
    from autotune.trial.context import TrialContext
    from autotune.trial.launch import LaunchRequest

    assert table.space.objective.mad_penalty == 1.0
    by_median = table.space.model_copy(
        update={"objective": table.space.objective.model_copy(update={"mad_penalty": 0.0})})
    penalised_somewhere = False
    for space in (table.space, by_median):
        ctx = TrialContext(study="x", space=space, model=space.model,
                           engine=get_engine("llamacpp").use_space(space), logs_dir=tmp_path)
        for candidate in table.grid:
            result = table.launch(seed=3)(LaunchRequest(ctx, candidate, 1))
            if result.status != "ok":
                continue
            stored = next(l for l in table.entries[candidate.key()]["launches"] if l["objective"] == result.objective)
            if space is by_median:
                assert result.score == pytest.approx(result.objective)
            else:
                assert result.score == pytest.approx(stored["score"], abs=1e-3)  # the table keeps 4 decimals
                penalised_somewhere |= result.score < result.objective
    assert penalised_somewhere


def test_the_median_ranking_strategy_replays(sq, table, tmp_path):
    from autotune.store import Store

    run = sq.replay_one(table, "autotune-median", seed=2, budget=4, workdir=tmp_path)
    assert 1 <= run.launches <= 4 and 0.0 <= run.ratio <= 1.0
    space = Store(tmp_path / "autotune-median-2-4.db").study_space("replay-autotune-median-2-4")
    assert space.objective.mad_penalty == 0.0


def test_cli_replays_with_another_mad_penalty(tmp_path):
    def summary(*extra: str) -> dict:
        out = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "search_quality.py"), str(TINY), "--seeds", "2",
             "--budgets", "16", "--strategies", "grid", "--json", *extra],
            capture_output=True, text=True, check=True, cwd=ROOT, timeout=600,
        )
        return json.loads(out.stdout)

    assert summary()["mad_penalty"] == 1.0  # the table's space, as measured
    assert summary("--mad-penalty", "0", "--jobs", "2")["mad_penalty"] == 0.0


def test_held_out_values_a_pick_by_the_launches_it_was_not_drawn_from(sq, table, tmp_path):
    two = [c for c in table.grid if table.truth[c.key()] is not None and len(table.entries[c.key()]["launches"]) == 2]
    assert two
    for candidate in two:
        key = candidate.key()
        launches = [l["objective"] for l in table.entries[key]["launches"]]
        for seed in range(4):
            drawn = table.drawn_index(seed, key)
            assert table.held_out_value(seed, key) == launches[1 - drawn]
    run = sq.replay_one(table, "grid", seed=0, budget=len(table.grid), workdir=tmp_path / "a", held_out=True)
    same = sq.replay_one(table, "grid", seed=0, budget=len(table.grid), workdir=tmp_path / "b")
    pick = next(c for c in table.grid if c.label() == run.pick)
    assert run.pick == same.pick  # the same study: only the valuation differs
    assert run.ratio == pytest.approx(table.held_out_value(0, pick.key()) / table.optimum)
    assert same.ratio == pytest.approx(table.truth[pick.key()] / table.optimum)
