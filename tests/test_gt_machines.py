"""A ground truth measured over several lent machines: a launch's value is the candidate's and its
machine's. `ground_truth.py machines` splits the launches into machines by the gaps between them
(a lent machine is given back when idle, the next sitting gets another) and fits both, so a
candidate measured only on a fast machine is not taken for a fast candidate."""

from __future__ import annotations

import math


def _launch(value: float, at: str) -> dict:
    return {"status": "ok", "objective": value, "started_at": at, "study": "s-launch1"}


def _table() -> dict:
    # machine 1 (evening) reads 10 % above machine 2 (night); a and b were launched on both,
    # c only on the fast one: by its plain mean it is the best, by candidate + machine it is not
    def entry(name: str, launches: list[dict]) -> dict:
        return {"key": name, "params": {"k": name}, "launches": launches}

    return {"candidates": [
        entry("a", [_launch(110.0, "2026-12-01T21:00:00+00:00"), _launch(100.0, "2026-12-02T01:00:00+00:00")]),
        entry("b", [_launch(121.0, "2026-12-01T21:03:00+00:00"), _launch(110.0, "2026-12-02T01:03:00+00:00")]),
        entry("c", [_launch(118.8, "2026-12-01T21:06:00+00:00")]),  # plain mean above b's 115.5
    ]}


def test_machines_are_split_by_the_gaps_between_launches(gt):
    fit = gt.machine_fit(_table(), gap_min=15.0)
    assert [len(m.launches) for m in fit.machines] == [3, 2]
    assert math.isclose(fit.machines[1].offset, 100.0 / 110.0, rel_tol=1e-9)  # against the first machine
    values = {c: v for c, v in fit.values.items()}
    assert math.isclose(values["b"] / values["a"], 1.1, rel_tol=1e-9)
    assert math.isclose(values["c"] / values["a"], 1.08, rel_tol=1e-9)
    assert max(values, key=values.get) == "b"  # by plain means c (118.8 against 115.5)
    assert fit.df == 1 and fit.sigma < 1e-9  # five launches, four levels; the made-up launches agree exactly


def test_one_machine_fits_plain_means(gt):
    table = _table()
    for entry in table["candidates"]:
        entry["launches"] = entry["launches"][:1]
    fit = gt.machine_fit(table, gap_min=15.0)
    assert len(fit.machines) == 1 and fit.machines[0].offset == 1.0
    assert {c: round(v, 6) for c, v in fit.values.items()} == {"a": 110.0, "b": 121.0, "c": 118.8}


def test_the_table_on_one_machine_divides_each_launch_by_its_machine(gt):
    table = _table()
    for entry in table["candidates"]:
        for launch in entry["launches"]:
            launch["score"] = launch["objective"] * 0.9
            launch["result"] = {"objective": launch["objective"], "score": launch["score"]}
    one = gt.on_one_machine(table, gt.machine_fit(table, gap_min=15.0))
    a_night = one["candidates"][0]["launches"][1]
    assert a_night["objective"] == 110.0 and a_night["result"]["objective"] == 110.0
    assert a_night["score"] == 99.0 and a_night["result"]["score"] == 99.0
    assert one["candidates"][2]["launches"][0]["objective"] == 118.8  # machine 1's launches stay
    assert "2 machines" in one["conditions"]["machine_adjusted"]
    assert table["candidates"][0]["launches"][1]["objective"] == 100.0  # the input is not changed


def _noisy(spread: float) -> dict:
    """Six candidates, three launches each on one machine: launch-to-launch wiggle of ±2 %, and the
    candidates `spread` apart from one to the next."""
    wiggle = (1.00, 1.02, 0.98)
    return {"candidates": [
        {"key": f"c{i}", "params": {"k": i}, "launches": [
            _launch(100.0 * (1 + spread) ** i * w, f"2026-12-01T21:{10 * i + j:02d}:00+00:00") for j, w in enumerate(wiggle)]}
        for i in range(6)]}


def test_the_fit_says_whether_the_candidates_differ_at_all(gt):
    """The H200 table's question before any search can be judged on it: do its candidates differ
    beyond the launch noise (F test of candidate against machine alone)? Candidates 10 % apart with
    ±2 % noise do; candidates 0.1 % apart with the same noise do not."""
    apart = gt.machine_fit(_noisy(0.10), gap_min=15.0)
    alike = gt.machine_fit(_noisy(0.001), gap_min=15.0)
    assert apart.candidates_differ_p is not None and apart.candidates_differ_p < 1e-6
    assert alike.candidates_differ_p is not None and alike.candidates_differ_p > 0.5
    one_launch_each = gt.machine_fit(_table() | {"candidates": [
        {**e, "launches": e["launches"][:1]} for e in _table()["candidates"]]}, gap_min=15.0)
    assert one_launch_each.candidates_differ_p is None  # no launch noise left to judge by (df 0)


def test_knob_effects_are_fitted_with_the_machines_held(gt):
    """Two knobs on a 2x2 grid, each launched on two machines, the second 10 % slower: knob a's
    value 1 adds 20 %, knob b's changes nothing; the fit finds both, with the machine held."""
    space = {"name": "s", "engine": "llamacpp", "model": {"name": "m", "path": "m.gguf"},
             "knobs": [{"name": "a", "values": [0, 1], "default": 0}, {"name": "b", "values": [0, 1], "default": 0}]}
    wiggle = {(0, 0): 1.01, (0, 1): 0.99, (1, 0): 0.995, (1, 1): 1.005}
    candidates = []
    for i, (a, b) in enumerate(wiggle):
        value = 100.0 * (1.2 if a else 1.0)
        candidates.append({"key": f"c{a}{b}", "params": {"a": a, "b": b}, "launches": [
            _launch(value * wiggle[(a, b)], f"2026-12-01T21:0{i}:00+00:00"),
            _launch(value * 0.9 / wiggle[(a, b)], f"2026-12-02T01:0{i}:00+00:00")]})
    effects = {(e.knob, e.value): e for e in gt.knob_effects({"space": space, "candidates": candidates}, gap_min=15.0)}
    assert set(effects) == {("a", 1), ("b", 1)}
    assert math.isclose(effects[("a", 1)].factor, 1.2, rel_tol=0.01) and effects[("a", 1)].p < 0.01
    assert effects[("a", 1)].low < 1.2 < effects[("a", 1)].high
    assert math.isclose(effects[("b", 1)].factor, 1.0, abs_tol=0.01) and effects[("b", 1)].p > 0.3
