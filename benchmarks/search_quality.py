"""Does the search earn its keep? Replay the study's own code against a measured ground-truth table.

    python benchmarks/search_quality.py benchmarks/data/gt-llamacpp-gemma3-270m-cpu.json [--seeds 100] [--json]

Each replayed study is autotune's own `Tuner` (sampler, planner priors for the first trials,
pruning, learned failures, noise-aware ranking, gates) on a fresh runs.db; only the trial's
measurement is replaced (`Tuner(launch=...)`): a "launch" of a candidate draws one of the table's
stored launches of it (seeded by the replay seed and the candidate, so every strategy draws the
same launch for the same candidate and seed: the comparison is paired), with its numerics class's
measured accuracy. A candidate the table only knows as ruled out by a learned failure replays as
that failure.

Strategies: `autotune` (the default: TPE, the planner's three best-predicted candidates queued
after the baseline), `random` (Optuna RandomSampler), `grid` (grid order: what `vllm bench sweep
serve` launches from a --serve-params file that lists the grid as nested loops over the knobs in the
space's order, the first knob slowest; the sweep runs its list in order and chooses nothing, so at a
budget it has launched the list's first configurations), `planner` (the planner's order alone: every
candidate queued by its predicted objective, ties broken towards fewer changed knobs, no sampler),
`tpe` (TPE without the planner's priors), `gp` (Optuna GPSampler; needs torch), `autotune-plain-prior` (the default as
it was before issue 12: the planner's order by prediction alone), `autotune-1-prior` (one queued
candidate), `autotune-no-threads` (the default before the planner's CPU thread term),
`autotune-gates-at-once` (the default, but a trial faster than the incumbent runs its gates in
its own launch instead of deferring them to a relaunch of the final best: `search --gates-at-once`),
`autotune-gate-all` (the default with every launch taking its accuracy gates: what skipping the
gates of dominated candidates costs or changes; `same pick` says how often it picks what the
default picks, seed for seed), `autotune-median` (the default with the space's
`objective.mad_penalty` at 0: trials ranked by their median objective, not by the median less
the spread of one launch's passes; every replayed launch is scored by the replayed study's own
space, as the engine's launch scores it). Every strategy starts with the baseline
(the Tuner always runs it first) and is judged the same way: the config the study picks (its best
ranked trial), valued at its true value in the table (mean objective over all its launches; a pick
the table rules out counts 0), divided by the grid optimum (the best true value among candidates
whose gates pass). That true value includes the launch the replay drew, which favours whatever
ranks by the drawn launch; `--held-out` values a pick by its other launches only (noisier, not
biased that way; a ratio may then exceed 1). Launches spent: finished trials, failed ones included; pruned ones are not
launches. Autotune's default is compared with each other strategy over the same seeds with a
one-sided paired Wilcoxon signed-rank test (scipy). The summary also says whether the table can
judge any of this: an F test of whether its candidates differ at all beyond their launch noise
(`ground_truth.machine_fit`, launches pooled); where they do not, every pick is as good as the
optimum as far as the table knows, and no strategy can be told from another on it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import optuna
from pydantic import BaseModel, ConfigDict

from autotune.bench.throughput import objective_value
from autotune.engines import get_engine
from autotune.hardware.profiles import resolve_hardware
from autotune.models import Candidate, FailureInfo, GatePolicy, HardwareProfile, HostFingerprint, NeedleReport, QevalReport, SearchSpace, TrialResult
from autotune.verdict.noise import NoiseKey, pooled
from autotune.planner.roofline import estimate, fits_check
from autotune.gates.score import evaluate_gates
from autotune.planner.prior import planner_order
from autotune.space.candidates import Pruner, baseline, enumerate_candidates, needle_check, probes_check
from autotune.space.layout import launchable
from autotune.store import Store
from autotune.study.leases import BoxPool
from autotune.study.parallel import Boxes
from autotune.study.reporter import SilentReporter
from autotune.study.tuner import Tuner
from autotune.trial.context import TrialContext
from autotune.trial.launch import LaunchRequest
from ground_truth import machine_fit

STRATEGIES = ("autotune", "random", "grid", "planner", "tpe", "gp", "autotune-plain-prior", "autotune-1-prior", "autotune-no-threads",
              "autotune-gate-all", "autotune-gates-at-once", "autotune-median", "autotune-no-classes")
BUDGET_FRACTIONS = (0.10, 0.20, 0.25, 0.30)


def with_mad_penalty(space: SearchSpace, penalty: float) -> SearchSpace:
    """`space` ranking its trials by median - penalty x 1.4826 x MAD (objective.mad_penalty)."""
    return space.model_copy(update={"objective": space.objective.model_copy(update={"mad_penalty": penalty})})


class Table:
    """A ground-truth table (benchmarks/ground_truth.py export) and its true values."""

    def __init__(self, data: dict) -> None:
        self.data = data
        self.space = SearchSpace.model_validate(data["space"])
        self.hardware = HardwareProfile.model_validate(data["hardware"]) if data.get("hardware") else resolve_hardware("cpu", None)
        cores = re.search(r"(\d+) CPUs", (data.get("conditions") or {}).get("machine") or "")
        if self.hardware.gpus_per_node == 0 and self.hardware.cpu_cores is None and cores:
            # tables exported before the profile recorded its cores: the machine line names them
            self.hardware = self.hardware.model_copy(update={"cpu_cores": int(cores.group(1))})
        self.entries = {e["key"]: e for e in data["candidates"]}
        self.grid = list(enumerate_candidates(self.space))
        missing = [c.label() for c in self.grid if c.key() not in self.entries or not self._known(self.entries[c.key()])]
        if missing:
            raise ValueError(f"the table does not cover {len(missing)} of {len(self.grid)} candidates, e.g. {missing[0]}")
        self.base_key = baseline(self.space).key()
        self.truth = {c.key(): self._true_value(c) for c in self.grid}
        eligible = [v for v in self.truth.values() if v is not None]
        if not eligible:
            raise ValueError("no candidate of the table ran and passed its gates")
        self.optimum = max(eligible)
        self.noise = pooled([[l["objective"] for l in e["launches"] if l["status"] == "ok" and l["objective"]]
                             for e in self.entries.values()])
        self.tied = self._tied_with_optimum()
        # do the candidates differ at all beyond the launch noise (F test, the launches pooled as the
        # replay pools them)? If not, no strategy's pick can be told from another's on this table
        self.candidates_differ_p = machine_fit(data, gap_min=math.inf).candidates_differ_p

    def _tied_with_optimum(self) -> set[str]:
        """Candidates whose true value the table cannot tell from the optimum's: the gap of their
        mean log objectives is within two standard errors of the table's own launch noise."""
        best = max((k for k, v in self.truth.items() if v is not None), key=lambda k: self.truth[k] or 0.0)
        if self.noise is None:
            return {best}

        def logs(key: str) -> list[float]:
            return [math.log(l["objective"]) for l in self.entries[key]["launches"]]

        top = logs(best)
        tied = set()
        for key, value in self.truth.items():
            if value is None:
                continue
            mine = logs(key)
            se = self.noise.sigma * math.sqrt(1 / len(mine) + 1 / len(top))
            if statistics.fmean(top) - statistics.fmean(mine) <= 2.0 * se:
                tied.add(key)
        return tied

    def set_numerics_class(self, knobs: list[str] | None) -> None:
        """Replay with only `knobs` in the numerics class (autotune.gates.numerics; None: as the table's space
        marks them): the others get `numerics_class: false`, as the shipped space marks threads."""
        if knobs is None:
            return
        unknown = set(knobs) - {k.name for k in self.space.knobs}
        if unknown:
            raise ValueError(f"--numerics-class names {', '.join(sorted(unknown))}, not a knob of the table's space")
        marked = [k.model_copy(update={"numerics_class": k.name in knobs}) for k in self.space.knobs]
        self.space = self.space.model_copy(update={"knobs": marked})

    def fails_accuracy(self, key: str) -> bool:
        """Every launch of the candidate ran, and its accuracy fails a gate: it can never be the answer."""
        launches = self.entries[key]["launches"]
        return bool(launches) and all(l["status"] == "ok" for l in launches) and self.truth.get(key) is None

    def set_mad_penalty(self, penalty: float | None) -> None:
        """Replay every strategy with the space's objective.mad_penalty at `penalty` (None: as measured)."""
        if penalty is not None:
            self.space = with_mad_penalty(self.space, penalty)

    @staticmethod
    def _known(entry: dict) -> bool:
        return bool(entry["launches"]) or any((s.get("reason") or "").startswith("learned:") for s in entry["skipped"])

    def accuracy_of(self, candidate: Candidate) -> tuple[NeedleReport | None, QevalReport | None]:
        record = self.data["accuracy"].get(self.entries[candidate.key()]["numerics_class"])
        if record is None:
            return None, None
        needle = NeedleReport.model_validate(record["needle"]) if record["needle"] else None
        qeval = QevalReport.model_validate(record["qeval"]) if record["qeval"] else None
        return needle, qeval

    def with_accuracy(self, result: TrialResult) -> TrialResult:
        if result.status != "ok":
            return result
        needle, qeval = self.accuracy_of(result.candidate)
        return result.model_copy(update={"needle": needle, "qeval": qeval, "gates": []})

    def _reference(self) -> TrialResult:
        base = next(c for c in self.grid if c.key() == self.base_key)
        ok = next(l for l in self.entries[self.base_key]["launches"] if l["status"] == "ok")
        stored = TrialResult.model_validate(ok["result"]).model_copy(update={"number": 0, "candidate": base})
        return self.with_accuracy(stored)

    def _true_value(self, candidate: Candidate) -> float | None:
        """Mean objective over the candidate's launches, when every launch ran and its gates pass."""
        launches = self.entries[candidate.key()]["launches"]
        if not launches or any(l["status"] != "ok" for l in launches):
            return None
        probe = self.with_accuracy(TrialResult.model_validate(launches[0]["result"]).model_copy(update={"number": 1, "candidate": candidate}))
        reference = self._reference()
        gates = evaluate_gates(probe, reference, self.space.gates, accuracy=True, baseline=reference)
        # a space with no accuracy gate (dummy weights) has nothing to check but its latency gates, if any
        gated = self.space.gates.needle is not None or self.space.gates.qeval is not None
        if (gated and not gates) or not all(g.passed for g in gates):
            return None
        return statistics.fmean(l["objective"] for l in launches)

    def drawn_index(self, seed: int, key: str) -> int:
        """Which stored launch of candidate `key` every launch of it in seed `seed`'s replay draws."""
        return random.Random(f"{seed}:{key}").randrange(len(self.entries[key]["launches"]))

    def held_out_value(self, seed: int, key: str) -> float | None:
        """The candidate's true value from its launches other than the one the replay drew: the pick
        is then not valued by the very launch that made it look best (None: ruled out by the table;
        its true value when it has no other launch)."""
        if self.truth.get(key) is None:
            return None
        launches = self.entries[key]["launches"]
        drawn = self.drawn_index(seed, key)
        others = [l["objective"] for i, l in enumerate(launches) if i != drawn]
        return statistics.fmean(others) if others else self.truth[key]

    def launch(self, seed: int) -> Replayed:
        """The stand-in for the engine's launch (a Launch of autotune/trial/launch.py): one stored
        launch of the candidate, drawn by (seed, candidate)."""
        return Replayed(self, seed)

    def _learned_failure(self, study: str, number: int, candidate: Candidate, entry: dict) -> TrialResult:
        reason = next(s["reason"] for s in entry["skipped"] if (s.get("reason") or "").startswith("learned:"))
        rule = self._rule_for(candidate)
        failure = FailureInfo(
            failure_class=rule["failure_class"] if rule else "startup_crash",
            message=f"replayed from the table: {reason}",
            implicates=sorted(json.loads(rule["knob_values"])) if rule else [],
        )
        return TrialResult(study=study, number=number, candidate=candidate, status="failed", reason=failure.message, failure=failure)

    def _rule_for(self, candidate: Candidate) -> dict | None:
        for rule in self.data.get("learned_failures", []):
            values = json.loads(rule["knob_values"])
            if all(candidate.params.get(k) == v for k, v in values.items()):
                return rule
        return None

    def launched_failure_implicates(self) -> None:
        """Failures the table recorded without implicated knobs were explained by isolation during
        the measurement; the replay gives them the learned rule's knobs, so it never launches."""
        for entry in self.entries.values():
            for launch in entry["launches"]:
                failure = launch["result"].get("failure")
                if launch["status"] == "failed" and failure and not failure.get("implicates"):
                    cand = Candidate.model_validate({"engine": self.space.engine, "params": entry["params"], "env": entry["env"]})
                    rule = self._rule_for(cand)
                    if rule:
                        failure["implicates"] = sorted(json.loads(rule["knob_values"]))


class Replayed:
    """A Launch that replays a table: a launch of a candidate is one of its stored launches, drawn by
    (seed, candidate), scored by the study's own space, with the gates the request runs."""

    def __init__(self, table: Table, seed: int) -> None:
        self.table, self.seed = table, seed

    def __call__(self, request: LaunchRequest) -> TrialResult:
        table, ctx, candidate, number = self.table, request.ctx, request.candidate, request.number
        entry = table.entries[candidate.key()]
        if not entry["launches"]:
            return table._learned_failure(ctx.study, number, candidate, entry)
        drawn = entry["launches"][table.drawn_index(self.seed, candidate.key())]
        stored = TrialResult.model_validate(drawn["result"])
        result = stored.model_copy(update={"study": ctx.study, "number": number, "candidate": candidate, "gates": []})
        if result.status != "ok":
            return result
        if result.objective:  # scored by the study's own space, as the engine's launch scores it
            value, score = objective_value(result.measurements, ctx.space.objective)
            result = result.model_copy(update={"score": result.objective * score / value})  # the table rounds
        result = table.with_accuracy(result)
        gates = request.gates(lambda: (result.objective, result.score))
        return result.model_copy(update=gates.fields(result.needle, result.qeval))

    def stop_all(self) -> None:
        pass


class Replay(BaseModel):
    model_config = ConfigDict(extra="forbid")

    strategy: str
    seed: int
    budget: int
    pick: str | None
    ratio: float
    launches: int
    pruned: int
    tied: bool = False  # the pick cannot be told from the optimum within the table's own launch noise
    dominated: int = 0  # launches whose gates were skipped (score not above the incumbent's: cannot rank first)
    gated: int = 0  # trials whose accuracy gates ran, in their own launch or a gates relaunch (the expensive part)
    relaunches: int = 0  # gates relaunches at the end of the study (deferred gates): launches beyond the budget
    doomed: int = 0  # launches (trials and gates relaunches) of candidates whose accuracy fails: never the answer


def gp_available() -> str | None:
    try:
        import torch  # noqa: F401
    except ImportError:
        return "Optuna's GPSampler needs torch, which this venv does not have"
    return None


def seed_host_noise(table: Table, store: Store, host_key: str) -> None:
    """Give the replay's host the launch-to-launch noise the table measured (every candidate
    launched more than once), as a host autotune has run on before would have in runs.db."""
    for entry in table.entries.values():
        candidate = Candidate.model_validate({"engine": table.space.engine, "params": entry["params"], "env": entry["env"]})
        for i, launch in enumerate(l for l in entry["launches"] if l["status"] == "ok" and l["objective"]):
            store.add_launch_sample(NoiseKey(host=host_key, engine=table.space.engine, metric=table.space.objective.metric),
                                    "ground-truth", candidate, launch["objective"], "table", i)


def replay_one(
    table: Table, strategy: str, seed: int, budget: int, workdir: Path, host_noise: bool = False,
    gates: GatePolicy | None = None, held_out: bool = False, pool: BoxPool | None = None,
) -> Replay:
    space = table.space
    if strategy == "autotune-median":  # the default, ranking by the median objective (no within-launch penalty)
        space = with_mad_penalty(space, 0.0)
    engine = get_engine(space.engine).use_space(space)
    space, rules, layout, _ = launchable(space, engine, table.hardware, 1)
    workdir.mkdir(parents=True, exist_ok=True)
    store = Store(workdir / f"{strategy}-{seed}-{budget}.db")
    store.db.execute("PRAGMA synchronous=OFF")  # a throw-away runs.db: no need to wait for the disk
    host_key = store.save_host(HostFingerprint(hostname="replay", engine=space.engine, engine_version="replay"))
    name = f"replay-{strategy}-{seed}-{budget}"
    store.save_study(name, space, table.hardware.name, 1, host_key, accuracy=True)
    if host_noise:
        seed_host_noise(table, store, host_key)
    # every strategy gates as `autotune search` would on this engine unless told otherwise
    gates = GatePolicy.of(True, False, engine.gates_at_end) if gates is None else gates
    if strategy == "autotune-gate-all":  # the default, but every launch takes its gates
        gates = GatePolicy.EVERY_TRIAL
    if strategy == "autotune-gates-at-once" and gates is GatePolicy.AT_END:  # an incumbent's gates in its own launch
        gates = GatePolicy.AT_ONCE
    ctx = TrialContext(study=name, space=space, model=space.model, engine=engine, logs_dir=workdir, gates=gates)
    pruner = Pruner([rules, layout, needle_check(space, True), probes_check([]), fits_check(space, table.hardware, 1)])

    options: dict = {}
    if strategy in ("autotune", "autotune-median", "autotune-gate-all", "autotune-gates-at-once",
                    "autotune-no-classes"):  # what `autotune search` gives its Tuner
        options |= {"order": planner_order(space, table.hardware, 1),
                    "predict": lambda c: estimate(space, c, table.hardware, 1).predicted()}
        if strategy == "autotune-no-classes":  # the default before issue 28: no numerics class learned or gated early
            options["learn_accuracy_classes"] = False
    elif strategy == "autotune-plain-prior":  # the default before issue 12: planner order without tie bands
        def plain(candidates: list[Candidate]) -> list[Candidate]:
            scored = [(estimate(space, c, table.hardware, 1).decode_tps or 0.0, c) for c in candidates]
            return [c for _, c in sorted(scored, key=lambda x: -x[0])]

        options |= {"order": plain, "predict": lambda c: estimate(space, c, table.hardware, 1).predicted()}
    elif strategy == "autotune-no-threads":  # the default before the planner's CPU thread term
        flat = table.hardware.model_copy(update={"cpu_cores": None})
        options |= {"order": planner_order(space, flat, 1), "predict": lambda c: estimate(space, c, flat, 1).predicted()}
    elif strategy == "autotune-1-prior":  # the default prior cut to its first candidate: more room for TPE
        full = planner_order(space, table.hardware, 1)
        options |= {"order": lambda cs: full(cs)[:1], "predict": lambda c: estimate(space, c, table.hardware, 1).predicted()}
    elif strategy == "tpe":
        pass
    elif strategy == "random":
        options |= {"sampler": optuna.samplers.RandomSampler(seed=seed)}
    elif strategy == "grid":  # `vllm bench sweep serve` over the grid listed as nested loops (the docstring)
        options |= {"first": table.grid, "sampler": optuna.samplers.RandomSampler(seed=seed)}
    elif strategy == "planner":  # the planner's order alone: every candidate queued by its prediction
        order = planner_order(space, table.hardware, 1)
        options |= {"first": order(list(table.grid)), "sampler": optuna.samplers.RandomSampler(seed=seed)}
    elif strategy == "gp":
        options |= {"sampler": optuna.samplers.GPSampler(seed=seed)}
    else:
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    tuner = Tuner(
        ctx, store, pruner, host_key, trials=budget, seed=seed, reporter=SilentReporter(),
        storage=optuna.storages.InMemoryStorage(), launch=table.launch(seed), boxes=Boxes(pool), **options,
    )
    outcome = tuner.run()
    best = outcome.best
    if best is None:
        value = None
    else:
        value = table.held_out_value(seed, best.candidate.key()) if held_out else table.truth.get(best.candidate.key())
    launches = sum(1 for t in outcome.trials if t.status in ("ok", "failed"))
    launched = {t.candidate.key() for t in outcome.trials if t.status in ("ok", "failed")}
    pruned = len({t.candidate.key() for t in outcome.trials if t.status == "skipped"} - launched)  # distinct, never launched
    dominated = sum(1 for t in outcome.trials if t.dominated)
    gated = sum(1 for t in outcome.trials if t.status == "ok" and (t.needle or t.qeval) and t.accuracy_from is None)
    relaunches = sum(1 for t in outcome.trials if t.accuracy_relaunched)
    doomed = sum((1 + t.accuracy_relaunched) for t in outcome.trials
                 if t.status in ("ok", "failed") and table.fails_accuracy(t.candidate.key()))
    store.db.close()
    return Replay(
        strategy=strategy, seed=seed, budget=budget, pick=best.candidate.label() if best else None,
        ratio=(value or 0.0) / table.optimum, launches=launches, pruned=pruned, dominated=dominated, gated=gated,
        relaunches=relaunches, doomed=doomed,
        tied=best is not None and best.candidate.key() in table.tied,
    )


_WORKER_TABLE: Table | None = None


def _init_worker(path: Path, mad_penalty: float | None, numerics_class: list[str] | None = None) -> None:
    global _WORKER_TABLE
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    _WORKER_TABLE = Table(json.loads(Path(path).read_text()))
    _WORKER_TABLE.set_mad_penalty(mad_penalty)
    _WORKER_TABLE.set_numerics_class(numerics_class)
    _WORKER_TABLE.launched_failure_implicates()


def _replay_job(job: tuple[str, int, int, str, bool, bool]) -> Replay:
    strategy, seed, budget, tmp, host_noise, held_out = job
    assert _WORKER_TABLE is not None
    return replay_one(_WORKER_TABLE, strategy, seed, budget, Path(tmp), host_noise, held_out=held_out)


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def wilcoxon_greater(a: list[float], b: list[float]) -> float | None:
    """One-sided paired Wilcoxon p-value that a > b (None: every pair tied)."""
    from scipy.stats import wilcoxon

    if all(x == y for x, y in zip(a, b)):
        return None
    return float(wilcoxon(a, b, alternative="greater", zero_method="wilcox").pvalue)


def summarize(table: Table, runs: list[Replay], strategies: list[str], budgets: list[int]) -> dict:
    rows = []
    for budget in budgets:
        default = sorted((r for r in runs if r.strategy == "autotune" and r.budget == budget), key=lambda r: r.seed)
        for strategy in strategies:
            mine = sorted((r for r in runs if r.strategy == strategy and r.budget == budget), key=lambda r: r.seed)
            if not mine:
                continue
            q1, med, q3 = quartiles([r.ratio for r in mine])
            l1, lmed, l3 = quartiles([float(r.launches) for r in mine])
            p = None
            if strategy != "autotune" and len(default) == len(mine):
                p = wilcoxon_greater([r.ratio for r in default], [r.ratio for r in mine])
            rows.append({
                "budget": budget, "budget_share": budget / len(table.grid), "strategy": strategy,
                "seeds": len(mine), "ratio_median": med, "ratio_q1": q1, "ratio_q3": q3,
                "reached_097": sum(r.ratio >= 0.97 for r in mine) / len(mine),
                "tied_with_optimum": sum(r.tied for r in mine) / len(mine),
                "launches_median": lmed, "launches_q1": l1, "launches_q3": l3,
                "pruned_median": statistics.median(r.pruned for r in mine),
                "dominated_mean": statistics.fmean(r.dominated for r in mine),
                "gated_mean": statistics.fmean(r.gated for r in mine),
                "relaunches_mean": statistics.fmean(r.relaunches for r in mine),
                "doomed_mean": statistics.fmean(r.doomed for r in mine),
                "same_pick_as_default": (
                    sum(a.pick == b.pick for a, b in zip(default, mine)) / len(mine)
                    if strategy != "autotune" and len(default) == len(mine) else None
                ),
                "autotune_better_p": p,
            })
    at_goal_budget = [r for r in rows if r["strategy"] == "autotune" and r["budget_share"] <= 0.25 + 1e-9]
    goal = [r for r in at_goal_budget if r["ratio_median"] >= 0.97 and r["launches_median"] <= 0.25 * len(table.grid)]
    beats_random = {r["budget"]: r["autotune_better_p"] for r in rows if r["strategy"] == "random"}
    met = [r for r in goal if (beats_random.get(r["budget"]) or 1.0) < 0.01]
    best_key = max((k for k, v in table.truth.items() if v is not None), key=lambda k: table.truth[k] or 0.0)
    best = next(c for c in table.grid if c.key() == best_key)
    tied_min_ratio = min((table.truth[k] or 0.0) for k in table.tied) / table.optimum
    return {
        "table": table.data.get("space_file") or table.space.name,
        "grid": len(table.grid),
        "eligible": sum(v is not None for v in table.truth.values()),
        "optimum": table.optimum,
        "optimum_config": best.label(),
        "launch_noise": table.noise.describe() if table.noise else None,
        "tied_with_optimum": len(table.tied),
        "tied_min_ratio": tied_min_ratio,
        "baseline_ratio": (table.truth.get(table.base_key) or 0.0) / table.optimum,
        "candidates_differ_p": table.candidates_differ_p,
        "mad_penalty": table.space.objective.mad_penalty,  # as the replayed studies score (strategies may differ)
        "rows": rows,
        "goal": {
            "text": ">= 0.97 of the optimum in median within <= 25 % of the grid's launches, and beats random (Wilcoxon p < 0.01)",
            "met": bool(met),
            "met_at_budgets": [r["budget"] for r in met],
            # False: the table's candidates do not differ beyond their launch noise (p >= 0.05)
            "judgeable": table.candidates_differ_p is None or table.candidates_differ_p < 0.05,
            # False: candidates below 0.97 of the optimum cannot be told from it within the table's
            # launch noise, so a median of 0.97 asks the table for more than it measured
            "resolvable": tied_min_ratio >= 0.97,
            "reached_in_median": bool(goal),
            # how often the default's pick at a budget within 25 % was tied with the optimum (best such budget)
            "tied_at_goal_budget": max((r["tied_with_optimum"] for r in at_goal_budget), default=None),
        },
    }


def render(summary: dict) -> str:
    width = max([9, *(len(r["strategy"]) for r in summary["rows"])])
    lines = [
        f"table {summary['table']}: {summary['grid']} candidates, {summary['eligible']} eligible; optimum "
        f"{summary['optimum']:.2f} ({summary['optimum_config']}); baseline at {summary['baseline_ratio']:.3f}",
        f"launch noise of the table {summary['launch_noise']}; {summary['tied_with_optimum']} candidates cannot be "
        f"told from the optimum within it (down to {summary['tied_min_ratio']:.3f} of it)",
        "trials ranked by " + (f"median - {summary['mad_penalty']:g} x 1.4826 x MAD of one launch's passes (objective.mad_penalty)"
                               if summary["mad_penalty"] else "their median objective (objective.mad_penalty 0)")
        + ("; autotune-median ranks by the median" if any(r["strategy"] == "autotune-median" for r in summary["rows"]) else ""),
        *(["picks valued by their launches other than the one drawn for them (--held-out)"] if summary.get("held_out") else []),
        f"{'budget':>10} {'strategy':<{width}} {'ratio median [q1, q3]':<24} {'>=0.97':>6} {'tied':>5} {'launches [q1, q3]':<18} "
        f"{'gated':>5} {'relaunch':>8} {'doomed':>6} {'same pick':>9} {'p(autotune>)':>12}",
    ]
    for r in summary["rows"]:
        p, same = r["autotune_better_p"], r["same_pick_as_default"]
        lines.append(
            f"{r['budget']:>3} ({r['budget_share']:>4.0%}) {r['strategy']:<{width}} "
            f"{r['ratio_median']:.3f} [{r['ratio_q1']:.3f}, {r['ratio_q3']:.3f}]     {r['reached_097']:>6.0%} "
            f"{r['tied_with_optimum']:>5.0%} "
            f"{r['launches_median']:>4.0f} [{r['launches_q1']:.0f}, {r['launches_q3']:.0f}]       "
            f"{r['gated_mean']:>5.1f} {r['relaunches_mean']:>8.1f} {r.get('doomed_mean', 0.0):>6.1f} "
            f"{'-' if same is None else f'{same:.0%}':>9} "
            f"{'-' if p is None else f'{p:.2g}':>12}"
        )
    goal = summary["goal"]
    lines.append(f"goal ({goal['text']}): {'met at budgets ' + str(goal['met_at_budgets']) if goal['met'] else 'NOT met'}")
    if not goal["judgeable"]:
        lines.append(f"this table cannot judge the goal: its candidates do not differ beyond their launch noise "
                     f"(F test p = {summary['candidates_differ_p']:.2g}), so no strategy's pick can be told from another's")
    elif not goal["reached_in_median"] and not goal["resolvable"]:
        tied = goal["tied_at_goal_budget"]
        lines.append(
            f"this table does not resolve 0.97 of the optimum: {summary['tied_with_optimum']} candidates down to "
            f"{summary['tied_min_ratio']:.3f} of it cannot be told from the optimum within its launch noise"
            + (f"; within 25 % of the grid the default's pick was tied with the optimum in {tied:.0%} of seeds"
               if tied is not None else "")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", type=Path)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--budgets", default=",".join(str(f) for f in BUDGET_FRACTIONS),
                        help="shares of the grid (0.1) or launch counts (5), comma-separated")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--jobs", type=int, default=1, help="replay in this many processes")
    parser.add_argument("--mad-penalty", type=float, default=None,
                        help="replay with the space's objective.mad_penalty at this value (default: the table's own)")
    parser.add_argument("--held-out", action="store_true",
                        help="value each pick by the mean of its launches other than the one the replay drew for it")
    parser.add_argument("--numerics-class", default=None,
                        help="comma-separated knobs that make the numerics class (default: the table's space's own "
                        "marks); e.g. type_k,type_v,flash_attn as the shipped llama.cpp space marks them")
    parser.add_argument("--host-noise", action="store_true",
                        help="the replayed host knows its launch noise (from the table), so dominated candidates skip their gates")
    args = parser.parse_args(argv)
    try:
        table = Table(json.loads(args.table.read_text()))
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {args.table}: {exc}", file=sys.stderr)
        return 2
    table.launched_failure_implicates()
    table.set_mad_penalty(args.mad_penalty)
    numerics_class = [k for k in args.numerics_class.split(",") if k] if args.numerics_class else None
    try:
        table.set_numerics_class(numerics_class)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    strategies = [s for s in args.strategies.split(",") if s]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        print(f"error: unknown strategy {unknown[0]!r}; known: {', '.join(STRATEGIES)}", file=sys.stderr)
        return 2
    notes = []
    if "gp" in strategies and (why := gp_available()):
        strategies.remove("gp")
        notes.append(f"gp left out: {why}")
    budgets = sorted({max(1, round(float(b) * len(table.grid))) if float(b) < 1 else int(b) for b in args.budgets.split(",")})
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    jobs = [(s, seed, b) for b in budgets for s in strategies for seed in range(args.seeds)]
    memory_fs = "/dev/shm" if Path("/dev/shm").is_dir() else None  # replayed runs.db files are throw-away
    with tempfile.TemporaryDirectory(prefix="autotune-replay-", dir=memory_fs) as tmp:
        if args.jobs > 1:
            with ProcessPoolExecutor(args.jobs, initializer=_init_worker, initargs=(args.table, args.mad_penalty, numerics_class)) as pool:
                runs = list(pool.map(_replay_job, [(*j, tmp, args.host_noise, args.held_out) for j in jobs], chunksize=8))
        else:
            runs = [replay_one(table, s, seed, b, Path(tmp), args.host_noise, held_out=args.held_out) for s, seed, b in jobs]
    summary = summarize(table, runs, strategies, budgets)
    summary["notes"] = notes
    summary["seeds"] = args.seeds
    summary["host_noise"] = args.host_noise
    summary["held_out"] = args.held_out
    print(json.dumps(summary, indent=1) if args.json else render(summary) + "".join(f"\n{n}" for n in notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
