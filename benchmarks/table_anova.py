"""Is a ground-truth table one where a search can earn its keep (issue 53)? Its analysis of variance.

    python benchmarks/table_anova.py benchmarks/data/TABLE.json [--json REPORT.json]

log(objective) = machine + every knob + every pair of knobs over the table's ok launches
(statsmodels; type II sums of squares as nested-model comparisons, so a design where some value pairs
never ran judges each term by the columns it adds), each term's F against the launch noise; the verdict asks for
at least two knobs acting and one interaction at p < 0.01, and names the candidate nearest the
baseline among those the noise cannot tell from the best (one knob off: one decision finds it).
The table is what benchmarks/ground_truth.py exports; its machines are split as `ground_truth.py
machines` splits them.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ground_truth import SITTING_GAP_MIN, by_sitting, ok_launches  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from autotune.models import SearchSpace  # noqa: E402
from autotune.space.candidates import baseline  # noqa: E402

#: the significance level the analysis of variance judges a term at (issue 53: p < 0.01)
ANOVA_ALPHA = 0.01


class AnovaTerm(BaseModel):
    term: str  # a knob, or two joined by ':' (their interaction)
    df: int
    f: float
    p: float


class AnovaReport(BaseModel):
    """Main effects and two-knob interactions of log(objective), each tested against the launch noise."""

    terms: list[AnovaTerm]
    #: knob pairs the design cannot tell from the terms below them (some value pairs never ran): not tested
    aliased: list[str] = []
    pure_error_df: int  # launches less cells (and machines): the repeats' own spread; 0 = none repeated
    error: str  # what each F was judged against
    wanted: bool  # at least two knobs with a main effect and one interaction, at ANOVA_ALPHA
    # the candidate the fewest knobs off the baseline among those the launch noise cannot tell from the
    # best mean log(objective) (a two-sided t interval at 95 %), as its knobs off the baseline
    optimum: str
    optimum_changes: int  # how many knobs it changes from the baseline (1: one decision finds the optimum)
    tied: int  # candidates the noise cannot tell from the best
    verdict: str


def anova(table: dict, gap_min: float = SITTING_GAP_MIN) -> AnovaReport:
    """log(objective) ~ machine + every knob + every pair of knobs (statsmodels), each term's type II
    sum of squares as what it adds to the terms that do not contain it (two nested fits: where some
    value pairs never ran, a term the others already span adds nothing and is listed as aliased,
    untested), each term's F against the pure error: the spread of a candidate's launches on one
    machine (a cell model's residual). Where no candidate was launched twice, against the model's
    own residual (the higher interactions and the noise together), and the report says so. Knobs the
    ok launches hold at one value only drop out; a launch whose objective is 0 or missing is not ok."""
    import warnings

    import pandas as pd
    import statsmodels.formula.api as smf
    from scipy.stats import f as fisher
    from scipy.stats import t as student
    from statsmodels.stats.anova import anova_lm

    space = SearchSpace.model_validate(table["space"])
    params_of = {entry["key"]: entry["params"] for entry in table["candidates"]}
    ok = ok_launches(table)
    machine_of = {at: m for m, group in enumerate(by_sitting(ok, gap_min)) for at, _, _ in group}
    names = [k.name for k in space.knobs if len({str(params_of[key].get(k.name)) for _, key, _ in ok}) > 1]
    column = {name: f"k{i}" for i, name in enumerate(names)}
    frame = pd.DataFrame([{"y": math.log(value), "machine": str(machine_of[at]), "cell": key,
                           **{column[n]: str(params_of[key].get(n)) for n in names}} for at, key, value in ok])
    machines = ["C(machine)"] if frame["machine"].nunique() > 1 else []
    knob_terms = [f"C({column[n]})" for n in names]
    model_terms = knob_terms + [f"{a}:{b}" for a, b in itertools.combinations(knob_terms, 2)]

    @functools.cache  # every pair's fit with it is the whole model: fitted once
    def fit(formula_terms: frozenset[str]):
        with warnings.catch_warnings():  # a rank-deficient design is said in the report
            warnings.simplefilter("ignore")
            return smf.ols("y ~ " + (" + ".join(machines + sorted(formula_terms)) or "1"), data=frame).fit()

    two_way = fit(frozenset(model_terms))
    deficient = two_way.df_model + 1 < len(two_way.params)
    cells = fit(frozenset(["C(cell)"]))
    pure_df = int(round(cells.df_resid))
    if pure_df > 0:
        error_ms, error_df = cells.ssr / cells.df_resid, pure_df
        error = f"the pure error: launches of one candidate on one machine (df {pure_df})"
    else:
        error_ms, error_df = two_way.ssr / two_way.df_resid, int(round(two_way.df_resid))
        error = f"the model's residual (no candidate launched twice: higher interactions and noise, df {error_df})"
    if deficient:
        error += "; the design is rank-deficient (some pairs of knob values never ran together)"
    back = {f"C({c})": n for n, c in column.items()}
    terms, aliased = [], []
    for term in model_terms:
        # type II by nested models: the term added to every term that does not contain it
        parts = set(term.split(":"))
        others = frozenset(t for t in model_terms if t != term and not parts < set(t.split(":")))
        comparison = anova_lm(fit(others), fit(others | {term})).iloc[1]
        name = ":".join(back[part] for part in term.split(":"))
        df = int(round(comparison["df_diff"]))
        if df == 0:  # the term adds no column the others lack
            aliased.append(name)
            continue
        f_value = (comparison["ss_diff"] / df) / error_ms if error_ms > 0 else float("nan")
        terms.append(AnovaTerm(term=name, df=df, f=float(f_value),
                               p=float(fisher.sf(f_value, df, error_df)) if error_df > 0 else float("nan")))
    mains = [t.term for t in terms if ":" not in t.term and t.p < ANOVA_ALPHA]
    pairs = [t.term for t in terms if ":" in t.term and t.p < ANOVA_ALPHA]
    wanted = len(mains) >= 2 and len(pairs) >= 1
    grouped = frame.groupby("cell")["y"]
    means, counts = grouped.mean(), grouped.count()
    top = str(means.idxmax())
    q = float(student.ppf(0.975, error_df)) if error_df > 0 else 0.0
    tied = [str(c) for c in means.index
            if means[top] - means[c] <= q * math.sqrt(error_ms * (1 / counts[top] + 1 / counts[c]))]
    base = params_of.get(table.get("baseline_key", ""), baseline(space).params)

    def off_base(key: str) -> dict:
        return {k.name: params_of[key].get(k.name) for k in space.knobs if params_of[key].get(k.name) != base.get(k.name)}

    changed = min((off_base(c) for c in tied), key=len)
    optimum = " ".join(f"{k}={v}" for k, v in changed.items()) or "the baseline"
    verdict = (f"{len(mains)} knob{'s' if len(mains) != 1 else ''} with a main effect beyond the launch noise "
               f"(p < {ANOVA_ALPHA}){': ' + ', '.join(mains) if mains else ''}; {len(pairs)} interaction"
               f"{'s' if len(pairs) != 1 else ''}{': ' + ', '.join(pairs) if pairs else ''}: "
               + ("the table issue 53 asks for" if wanted else "not the table issue 53 asks for (two knobs and an "
                  "interaction): change it before replaying")
               + f"; {len(tied)} candidate{'s' if len(tied) != 1 else ''} within the noise of the best, the "
               f"nearest to the baseline changes {len(changed)} knob{'s' if len(changed) != 1 else ''} ({optimum})")
    return AnovaReport(terms=terms, aliased=aliased, pure_error_df=pure_df, error=error, wanted=wanted, optimum=optimum,
                       optimum_changes=len(changed), tied=len(tied), verdict=verdict)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table")
    ap.add_argument("--gap-min", type=float, default=SITTING_GAP_MIN, help="a gap longer than this starts another machine")
    ap.add_argument("--json", default=None, help="also write the report here")
    args = ap.parse_args(argv)
    report = anova(json.loads(Path(args.table).read_text()), args.gap_min)
    print(f"log(objective) ~ machine + knobs + pairs of knobs; F against {report.error}")
    for t in sorted(report.terms, key=lambda t: t.p):
        print(f"  {t.term:48s} df {t.df:2d}  F {t.f:9.2f}  p {t.p:.3g}")
    print(report.verdict)
    if args.json:
        Path(args.json).write_text(report.model_dump_json(indent=1) + "\n")


if __name__ == "__main__":
    main()
