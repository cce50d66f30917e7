"""The search-quality and ground-truth figures of the docs, rendered from benchmarks/data/*.json.

    python benchmarks/figures.py            # rewrite the marked blocks in README.md and docs/
    python benchmarks/figures.py --check    # exit 1 when a block differs from what the data renders
    python benchmarks/figures.py replay [--jobs 2] [--only NAME]   # re-run the replays (minutes)

Two kinds of data. A ground-truth table (`gt-*.json`, from `benchmarks/ground_truth.py export`)
gives its figures directly: candidates, launches, the lent machines' levels, the launch noise, the
F test of whether the candidates differ, each knob's main effect and the optimum. A replay file
(`replay-*.json`, written by `replay` here) holds every replayed study of `REPLAYS` (strategy,
seed, budget, pick, its value by all of its launches and by its held-out launches) with the
SHA-256 of the table it replayed and the commit of the code that replayed it; its tables are
summarized with `benchmarks/search_quality.py`'s own `summarize`. `--check` also fails when a
table changed after its replay file was written, or when the code a replay measures (`MEASURED`:
the study, the planner, the gates, the hardware profiles, the replay itself) changed after the
commit it was replayed with: then run `replay` again.

A block in a page is the text between `<!-- figures:NAME:begin -->` and `<!-- figures:NAME:end -->`;
everything outside the markers is hand-written. tests/test_docs.py runs `--check`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import os
import re
import subprocess
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

#: the replays the docs quote: table file -> budgets (launches) and strategies, 100 seeds each
REPLAYS = {
    "gt-llamacpp-gemma3-270m-cpu": {"budgets": [5, 12], "strategies": ["autotune", "random", "tpe"]},
    "gt-vllm-minimax-h200": {"budgets": [2, 4, 8], "strategies": ["autotune", "random", "grid"]},
    "gt-vllm-minimax-h200-c8": {"budgets": [2, 3, 4, 5, 8], "strategies": ["autotune", "random", "tpe", "grid"]},
}
SEEDS = 100
#: pages that hold figure blocks
PAGES = ("README.md", "docs/search-quality.md", "docs/support.md")
#: hand-written logs of failures a lent H200 can produce: they could be recordings
H200_COULD_RECORD = {
    "oom__vllm_cuda_oom": "a CUDA OOM",
    "startup_timeout__vllm_engine_ready": "a startup time-out",
    "bad_flag__vllm_cacheconfig_literal": "a bad flag",
    "missing_dependency__vllm_flashinfer": "a missing flashinfer",
    "max_model_len_rejected__vllm_above_config": "a max_model_len above the model's config",
}
MARK = re.compile(r"(<!-- figures:([a-z0-9-]+):begin -->\n)(.*?)(<!-- figures:\2:end -->)", re.S)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


# ---------------------------------------------------------------- replays (the expensive part)

_TABLE = None


def _init(path: str) -> None:
    global _TABLE
    import optuna

    import search_quality as sq

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    _TABLE = sq.Table(json.loads(Path(path).read_text()))
    _TABLE.launched_failure_implicates()


def _replay(job: tuple[str, int, int, str]) -> dict:
    """One replayed study, valued both ways: by all the pick's launches and by its held-out ones."""
    import search_quality as sq

    strategy, seed, budget, tmp = job
    assert _TABLE is not None
    run = sq.replay_one(_TABLE, strategy, seed, budget, Path(tmp))
    key = {c.label(): c.key() for c in _TABLE.grid}.get(run.pick) if run.pick else None
    held = _TABLE.held_out_value(seed, key) if key else None
    return run.model_dump() | {"held_out_ratio": (held or 0.0) / _TABLE.optimum}


#: what a replay measures: a change to any of these makes the stored replays stale
MEASURED = ("autotune/study", "autotune/planner", "autotune/gates", "autotune/hardware/hardware_profiles.yaml",
            "benchmarks/search_quality.py")


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)


@cache
def last_change() -> str | None:
    """The last commit that changed what a replay measures; None where git cannot tell (no history
    here, a shallow clone): then only the tables' checksums are checked."""
    if git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        return None
    out = git("log", "-1", "--format=%H", "--", *MEASURED)
    return out.stdout.strip() or None


def is_ancestor(older: str, newer: str) -> bool:
    return git("merge-base", "--is-ancestor", older, newer).returncode == 0


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = git("status", "--porcelain", "--", *MEASURED).stdout.strip()
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def replay(name: str, jobs: int) -> None:
    import tempfile
    import time

    spec = REPLAYS[name]
    table_path = DATA / f"{name}.json"
    work = [(s, seed, b) for b in spec["budgets"] for s in spec["strategies"] for seed in range(SEEDS)]
    started = time.time()
    memory_fs = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="autotune-figures-", dir=memory_fs) as tmp:
        if jobs > 1:
            with ProcessPoolExecutor(jobs, initializer=_init, initargs=(str(table_path),)) as pool:
                runs = list(pool.map(_replay, [(*w, tmp) for w in work], chunksize=8))
        else:
            _init(str(table_path))
            runs = [_replay((*w, tmp)) for w in work]
    record = {
        "table": f"benchmarks/data/{name}.json",
        "table_sha256": sha256(table_path),
        "command": f"python benchmarks/figures.py replay --only {name}",
        "seeds": SEEDS,
        "budgets": spec["budgets"],
        "strategies": spec["strategies"],
        "code": commit(),
        "replayed_at": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "seconds": round(time.time() - started),
        "runs": runs,
    }
    lines = [json.dumps({k: v for k, v in record.items() if k != "runs"}, indent=1)[:-2] + ',\n "runs": [']
    lines.append(",\n".join("  " + json.dumps(r, sort_keys=True) for r in runs))
    lines.append(" ]\n}\n")
    (DATA / f"replay-{name}.json").write_text("\n".join(lines))
    print(f"wrote benchmarks/data/replay-{name}.json: {len(runs)} replayed studies in {record['seconds']} s")


# ---------------------------------------------------------------- summaries of the stored data


@cache
def replayed(name: str) -> "Replayed":
    return Replayed(name)


class Replayed:
    """A replay file read back, summarized by search_quality.summarize both ways."""

    def __init__(self, name: str) -> None:
        import search_quality as sq

        self.name = name
        self.path = DATA / f"replay-{name}.json"
        self.data = json.loads(self.path.read_text())
        self.table = sq.Table(load(name))
        runs = [sq.Replay.model_validate({k: v for k, v in r.items() if k != "held_out_ratio"}) for r in self.data["runs"]]
        held = [r.model_copy(update={"ratio": d["held_out_ratio"]}) for r, d in zip(runs, self.data["runs"])]
        self.runs = runs
        self.all = sq.summarize(self.table, runs, self.data["strategies"], self.data["budgets"])
        self.held = sq.summarize(self.table, held, self.data["strategies"], self.data["budgets"])

    def stale(self) -> str | None:
        again = f"run python benchmarks/figures.py replay --only {self.name}"
        if self.data["table_sha256"] != sha256(DATA / f"{self.name}.json"):
            return f"{self.path.name}: benchmarks/data/{self.name}.json changed since it was replayed; {again}"
        made = self.data["code"].split()[0]
        if "uncommitted" in self.data["code"]:
            return f"{self.path.name}: replayed with uncommitted changes to what it measures ({made}); {again}"
        last = last_change()
        if last is not None and not is_ancestor(last, made):
            return (f"{self.path.name}: replayed with code at {made}, older than the last change to what it measures "
                    f"({last}: {', '.join(MEASURED)}); {again}")
        return None

    def row(self, summary: dict, budget: int, strategy: str) -> dict:
        return next(r for r in summary["rows"] if r["budget"] == budget and r["strategy"] == strategy)

    def picks(self, budget: int, strategy: str = "autotune") -> Counter:
        """How often each pick was made, the picks named by their knob values off the baseline."""
        by_label = {c.label(): c for c in self.table.grid}
        return Counter(off_default(self.table, by_label[r.pick]) if r.pick else "nothing"
                       for r in self.runs if r.budget == budget and r.strategy == strategy)

    def planner_first(self) -> str:
        """The first candidate the default queues after the baseline (the planner's best-predicted)."""
        from autotune.engines import get_engine
        from autotune.commands.setup import launchable, planner_order

        space = self.table.space
        engine = get_engine(space.engine).use_space(space)
        space, *_ = launchable(space, engine, self.table.hardware, 1)
        rest = [c for c in self.table.grid if c.key() != self.table.base_key]
        return off_default(self.table, planner_order(space, self.table.hardware, 1)(rest)[0])


def p_text(p: float | None) -> str:
    return "–" if p is None else f"{p:.2g}"


def ratio_text(r: dict) -> str:
    return f"{r['ratio_median']:.3f} [{r['ratio_q1']:.3f}, {r['ratio_q3']:.3f}]"


def replay_table(rep: Replayed) -> str:
    """Every row of a replay: both valuations side by side, p of the default beating each other strategy."""
    lines = [
        "| launches | strategy | value: median [q1, q3] | ≥ 0.97 | tied | p (default better) "
        "| held out: median [q1, q3] | ≥ 0.97 | p (default better) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for budget in rep.data["budgets"]:
        for strategy in rep.data["strategies"]:
            a, h = rep.row(rep.all, budget, strategy), rep.row(rep.held, budget, strategy)
            name = "autotune (default)" if strategy == "autotune" else strategy
            lines.append(
                f"| {budget} ({a['budget_share']:.0%}) | {name} | {ratio_text(a)} | {a['reached_097']:.0%} | "
                f"{a['tied_with_optimum']:.0%} | {p_text(a['autotune_better_p'])} | {ratio_text(h)} | "
                f"{h['reached_097']:.0%} | {p_text(h['autotune_better_p'])} |"
            )
    return "\n".join(lines)


def replay_conditions(rep: Replayed) -> str:
    d = rep.data
    return (f"Replayed {d['replayed_at']} with the code of commit {d['code']} on {d['machine']}, {d['seeds']} seeds, "
            f"no launch (the table's stored launches are drawn): `{d['command']}`, {d['seconds']} s. "
            f"Table: `{d['table']}`.")


def off_default(table, candidate) -> str:
    """A candidate as its knob values off the baseline's (the rest are the engine's defaults)."""
    base = next(c for c in table.grid if c.key() == table.base_key)
    knobs = [k.name for k in table.space.knobs]
    diff = [f"{k}={candidate.params.get(k)}" for k in knobs if candidate.params.get(k) != base.params.get(k)]
    return " ".join(diff) or "the baseline"


@cache
def gt_facts(name: str) -> dict:
    from ground_truth import knob_effects, machine_fit

    table = load(name)
    fit = machine_fit(table)
    pooled = machine_fit(table, gap_min=float("inf"))
    launches = sum(1 for e in table["candidates"] for l in e["launches"] if l["status"] == "ok" and l.get("objective"))
    import search_quality as sq

    truth = sq.Table(table)
    best = max((k for k, v in truth.truth.items() if v is not None), key=lambda k: truth.truth[k] or 0.0)
    return {
        "table": table, "fit": fit, "pooled": pooled, "launches": launches, "effects": knob_effects(table),
        "candidates": len(table["candidates"]), "optimum": truth.optimum,
        "optimum_label": off_default(truth, next(c for c in truth.grid if c.key() == best)),
        "machine": table["conditions"]["machine"], "objective": table["objective"],
    }


# ---------------------------------------------------------------- the blocks


GT_NAMES = {
    "gt-llamacpp-gemma3-270m-cpu": "CPU, Gemma 3 270M (llama.cpp)",
    "gt-vllm-minimax-h200": "H200, MiniMax-M2 shape, one stream",
    "gt-vllm-minimax-h200-c8": "H200, MiniMax-M2 shape, 8 streams",
}


def block_tables() -> str:
    lines = [
        "| table | objective | candidates | ok launches | lent machines | launch noise within a machine "
        "| candidates differ? F test p (machines fitted / launches pooled) | optimum: mean of its launches (knobs off the baseline) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, title in GT_NAMES.items():
        f = gt_facts(name)
        fit, pooled = f["fit"], f["pooled"]
        noise = f"±{fit.sigma:.1%} (df {fit.df})" if fit.sigma is not None else "–"
        lines.append(
            f"| `{name}.json`: {title} | `{f['objective']}` | {f['candidates']} | {f['launches']} | {len(fit.machines)} | "
            f"{noise} | {p_text(fit.candidates_differ_p)} / {p_text(pooled.candidates_differ_p)} | "
            f"{f['optimum']:.1f} ({f['optimum_label']}) |"
        )
    lines += ["", "| table | launches measured (UTC) | machine | load | objective read |", "|---|---|---|---|---|"]
    for name, title in GT_NAMES.items():
        c = load(name)["conditions"]
        machine = re.sub(r"^vm ", "", c["machine"]).split(", Linux")[0].strip("()")
        if "engine_version" not in machine:
            machine += f", engine {load(name)['space']['engine']}, engine_version {c['engine_version']}"
        lines.append(f"| {title} | {c['first_trial_at'][:16].replace('T', ' ')} to {c['last_trial_at'][:16].replace('T', ' ')} | "
                     f"{machine} | {c['load_average']} | {c.get('retargeted', 'as measured')} |")
    return "\n".join(lines)


def block_effects() -> str:
    lines = ["| table | knob value (against its default) | factor [95 % interval] | p |", "|---|---|---|---|"]
    for name, title in GT_NAMES.items():
        for e in gt_facts(name)["effects"]:
            lines.append(f"| {title} | {e.knob}={e.value} | x{e.factor:.3f} [{e.low:.3f}, {e.high:.3f}] | {e.p:.2g} |")
    return "\n".join(lines)


def block_anova() -> str:
    """Issue 53's check of a table before it is replayed: main effects and two-knob interactions of
    log(objective) against the launch noise (table_anova.py)."""
    from table_anova import ANOVA_ALPHA, anova

    lines = [f"| table | knobs acting beyond the noise (p < {ANOVA_ALPHA}) | interactions (p < {ANOVA_ALPHA}) | F against "
             "| within the noise of the best | nearest of those to the baseline |", "|---|---|---|---|---|---|"]
    for name, title in GT_NAMES.items():
        r = anova(gt_facts(name)["table"])
        mains = ", ".join(f"{t.term} (p {t.p:.2g})" for t in r.terms if ":" not in t.term and t.p < ANOVA_ALPHA)
        pairs = ", ".join(f"{t.term} (p {t.p:.2g})" for t in r.terms if ":" in t.term and t.p < ANOVA_ALPHA)
        untested = f"; aliased, untested: {', '.join(r.aliased)}" if r.aliased else ""
        lines.append(f"| {title} | {mains or 'none'} | {pairs or 'none'} | pure error, df {r.pure_error_df}{untested} "
                     f"| {r.tied} | {r.optimum} ({r.optimum_changes} knob{'s' if r.optimum_changes != 1 else ''}) |")
    return "\n".join(lines)


def goal_line(rep: Replayed) -> str:
    g = rep.all["goal"]
    text = f"Goal ({g['text']}): " + (f"met at {', '.join(map(str, g['met_at_budgets']))} launches." if g["met"] else "not met.")
    if not g["judgeable"]:
        text += (f" This table cannot judge it: its candidates do not differ beyond their launch noise (F test, "
                 f"launches pooled, p = {rep.all['candidates_differ_p']:.2g}), so no strategy's pick can be told from another's.")
    elif not g["reached_in_median"] and not g["resolvable"]:
        text += (f" This table cannot resolve 0.97 of the optimum: {rep.all['tied_with_optimum']} candidates, down to "
                 f"{rep.all['tied_min_ratio']:.3f} of it, cannot be told from it within its launch noise: "
                 f"{rep.all['launch_noise']}.")
    return text


def block_replay(name: str) -> str:
    rep = replayed(name)
    return "\n\n".join([wrap(replay_conditions(rep)), replay_table(rep), wrap(goal_line(rep))])


def c8_pick_sentence(rep: Replayed) -> str:
    picks = rep.picks(2)
    pick, n = picks.most_common(1)[0]
    first = rep.planner_first()
    seeds = rep.data["seeds"]
    same = "the planner's first queued candidate" if pick == first else f"not the planner's first queued candidate ({first})"
    return (f"After 2 launches (the baseline and one more) the default picks `{pick}` in {n} of {seeds} seeds: "
            f"{same}. So its row at 2 launches is one planner decision, not a search, and the p-value measures "
            f"how widely random search spreads, not how reliably the default finds the optimum.")


def block_cpu_pick() -> str:
    """The default's picks at the smallest budget whose stored launches differ by 20 % or more: where
    valuing a pick by the launch that made it look best flatters it."""
    rep = replayed("gt-llamacpp-gemma3-270m-cpu")
    budget = rep.data["budgets"][0]
    by_name = {off_default(rep.table, c): c for c in rep.table.grid}
    wide = []
    for pick, n in rep.picks(budget).most_common():
        launches = [l["objective"] for l in rep.table.entries[by_name[pick].key()]["launches"]] if pick in by_name else []
        if launches and max(launches) >= 1.2 * min(launches):
            wide.append((pick, n, launches))
    seeds = rep.data["seeds"]
    if not wide:
        return wrap(f"At {budget} launches none of the default's picks has stored launches 20 % or more apart.")
    parts = [f"`{pick}` ({n} seeds; {' and '.join(f'{v:.1f}' for v in launches)} tok/s)" for pick, n, launches in wide]
    return wrap(f"At {budget} launches, in {sum(n for _, n, _ in wide)} of {seeds} seeds the default picks a config "
                f"whose stored launches are 20 % or more apart: {', '.join(parts)}. Picked on its high launch, such a "
                f"config is worth its low one when held out.")


def block_c8_caveat() -> str:
    return wrap(c8_pick_sentence(replayed("gt-vllm-minimax-h200-c8")))


def wrap(text: str, bullet: bool = False) -> str:
    """Prose at the docs' line width (100), a bullet's lines indented under its first."""
    import textwrap

    return textwrap.fill(text, 100, subsequent_indent="  " if bullet else "", break_on_hyphens=False,
                         break_long_words=False)


def better(row_default: dict, row_other: dict) -> bool:
    """The default beat the other strategy: a higher median and p < 0.05."""
    p = row_other["autotune_better_p"]
    return row_default["ratio_median"] > row_other["ratio_median"] and p is not None and p < 0.05


def block_readme() -> str:
    cpu, _, c8 = (replayed(n) for n in REPLAYS)
    b = cpu.data["budgets"][0]
    cpu5, cpu5r = cpu.row(cpu.all, b, "autotune"), cpu.row(cpu.all, b, "random")
    cpu5h, cpu5hr = cpu.row(cpu.held, b, "autotune"), cpu.row(cpu.held, b, "random")
    c82, c82r = c8.row(c8.all, 2, "autotune"), c8.row(c8.all, 2, "random")
    pick, n = c8.picks(2).most_common(1)[0]
    c1 = gt_facts("gt-vllm-minimax-h200")
    cpu_goal = cpu.all["goal"]
    bullets = [
        f"CPU table (Gemma 3 270M on llama.cpp, {gt_facts('gt-llamacpp-gemma3-270m-cpu')['candidates']} candidates, "
        f"the 2-core VM): after {b} launches the default's pick is worth {cpu5['ratio_median']:.3f} of the optimum in "
        f"median against random search's {cpu5r['ratio_median']:.3f} (p = {p_text(cpu5r['autotune_better_p'])}). "
        f"Valued by the launches it was not picked on, {cpu5h['ratio_median']:.3f} against "
        f"{cpu5hr['ratio_median']:.3f}: {'still better' if better(cpu5h, cpu5hr) else 'no better'}. The goal (0.97 "
        f"of the optimum within a quarter of the grid's launches) is {'met' if cpu_goal['met'] else 'not met'}"
        + (", and the table's launch noise cannot resolve it." if not cpu_goal["resolvable"] else "."),
        f"H200 table at one stream (MiniMax-M2 shape with dummy weights, vLLM 0.26.0, {c1['candidates']} candidates): "
        f"the candidates do not differ beyond the launch noise (F test p = {p_text(c1['fit'].candidates_differ_p)}), "
        f"so it cannot rank strategies.",
        f"H200 table at 8 streams (the same launches, read at their 8-stream wave; this objective was chosen after "
        f"the one-stream table proved flat): {c82['ratio_median']:.3f} of the optimum after 2 launches against "
        f"random's {c82r['ratio_median']:.3f} (p = {p_text(c82r['autotune_better_p'])}). "
        + (f"That is one planner decision: the default picks `{pick}`, the planner's first queued candidate, in "
           f"{n} of {c8.data['seeds']} seeds, so the p-value measures random search's spread."
           if pick == c8.planner_first() else
           f"The default's most common pick is `{pick}` ({n} of {c8.data['seeds']} seeds)."),
    ]
    return "\n".join(wrap("- " + t, bullet=True) for t in bullets)


def corpus_origin(first_line: str) -> str:
    """Where a tests/logs file came from, by the mark in its first line."""
    if first_line.startswith("# hand-written"):
        return "hand-written"
    if first_line.startswith("# recording:"):
        if "https://github.com/" in first_line:
            return "public issue"
        if "lent NVIDIA H200" in first_line:
            return "H200"
        if "scripts/record_logs.py" in first_line:
            return "this CPU"
    raise SystemExit(f"a tests/logs file is marked neither as a recording nor as hand-written: {first_line[:80]!r}")


def corpus_logs() -> list[Path]:
    """Every log of the failure corpus: tests/logs/ (vLLM 0.26.0 and the rest) and each later
    vLLM version's folder tests/logs/v<version>/."""
    logs = ROOT / "tests" / "logs"
    return sorted(logs.glob("*.log")) + sorted(logs.glob("v*/*.log"))


def block_corpus() -> str:
    logs = corpus_logs()
    first = {str(p.relative_to(ROOT / "tests" / "logs").with_suffix("")): p.read_text().splitlines()[0] for p in logs}
    origin = {stem: corpus_origin(line) for stem, line in first.items()}
    n = Counter(origin.values())

    def versions(where: str, pattern: str) -> str:
        found = sorted({m for stem, line in first.items() if origin[stem] == where for m in re.findall(pattern, line)})
        return ", ".join(found) or "version not recorded"
    could = [what for stem, what in H200_COULD_RECORD.items() if origin.get(stem) == "hand-written"]
    text = (
        f"{len(logs)} logs (`tests/logs/*.log`, `tests/logs/v*/*.log`): {n['H200']} recorded on a lent H200 "
        f"({versions('H200', r'vLLM [0-9][0-9.]*[0-9]')}), "
        f"{n['public issue']} taken from public vLLM issues (the lines the issue posts), {n['this CPU']} recorded "
        f"on the CPU development VM ({versions('this CPU', r'llama-cpp-python [0-9][0-9.]*[0-9]')}), and {n['hand-written']} hand-written "
        f"in vLLM's or torch's log format, each around an exact error string."
    )
    if could:
        text += (f" Not every hand-written one needs other hardware: {', '.join(could[:-1])} and {could[-1]} "
                 f"could be recorded on the H200 and are not yet." if len(could) > 1 else
                 f" {could[0]} could be recorded on the H200 and is not yet.")
    return wrap(text)


BLOCKS = {
    "corpus": block_corpus,
    "gt-tables": block_tables,
    "gt-effects": block_effects,
    "gt-anova": block_anova,
    "replay-cpu": lambda: block_replay("gt-llamacpp-gemma3-270m-cpu"),
    "replay-h200-c1": lambda: block_replay("gt-vllm-minimax-h200"),
    "replay-h200-c8": lambda: block_replay("gt-vllm-minimax-h200-c8"),
    "c8-caveat": block_c8_caveat,
    "cpu-pick": block_cpu_pick,
    "readme-search": block_readme,
}


def render_page(text: str, cache: dict[str, str]) -> str:
    def fill(m: re.Match) -> str:
        name = m.group(2)
        if name not in BLOCKS:
            raise SystemExit(f"unknown figures block {name!r}; known: {', '.join(BLOCKS)}")
        if name not in cache:
            cache[name] = BLOCKS[name]()
        return m.group(1) + cache[name] + "\n" + m.group(4)

    return MARK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", choices=["render", "replay"], default="render")
    parser.add_argument("--check", action="store_true", help="exit 1 when a page's blocks differ from what the data renders")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--only", choices=list(REPLAYS), help="replay one table")
    args = parser.parse_args(argv)
    if args.what == "replay":
        for name in [args.only] if args.only else REPLAYS:
            replay(name, args.jobs)
        return 0
    problems = [why for name in REPLAYS if (why := replayed(name).stale())]
    cache: dict[str, str] = {}
    for page in PAGES:
        path = ROOT / page
        text = path.read_text()
        new = render_page(text, cache)
        if args.check:
            if new != text:
                problems.append(f"{page}: figures differ from benchmarks/data; run python benchmarks/figures.py")
        elif new != text:
            path.write_text(new)
            print(f"rewrote the figures of {page}")
    for why in problems:
        print(why, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
