"""Markdown tables from a runs.db of dummy-weight studies (scripts/gpu/dummy_moe.sh): every ok
trial's measurements, its ratio to the study's baseline, the roofline fraction, and the planner's
decode error (as shipped, and refitted on one shape / tested on the others).

    python3 scripts/gpu/dummy_report.py --db runs.db [--db other-machine.db ...]

Several --db (one per lent machine) are labelled db1, db2, ... in the tables. The refitted step
models use compiled trials without speculation only: an eager trial (no CUDA graphs) and a drafting
one are other regimes (the planner prices them with their own terms); the shipped planner is
scored on every trial. The held-out rows fit on every shape but one and score that one.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.planner import check as pc  # noqa: E402
from autotune.models import SearchSpace  # noqa: E402
from autotune.output.cells import diff_label  # noqa: E402
from autotune.store import Store  # noqa: E402

SHAPES = ROOT / "model_shapes"


def local_space(space: SearchSpace) -> SearchSpace:
    """The stored space with its model path mapped to this checkout's shape directory when the
    generated one (another machine's cache, `<shape>-<digest>`) is not here."""
    path = Path(space.model.path or "")
    if path.exists():
        return space
    local = SHAPES / re.sub(r"-[0-9a-f]{12}$", "", path.name)
    if local.is_dir():
        return space.model_copy(update={"model": space.model.model_copy(update={"path": str(local)})})
    return space


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


METRICS = [
    ("decode_tps.prose", "c1 tok/s", 1),
    ("output_tps.c8", "c8 tok/s", 0),
    ("output_tps.c32", "c32 tok/s", 0),
    ("ctx_decode_tps.16384", "c1 after 16K", 1),
    ("ctx_ttft_ms.16384", "TTFT 16K ms", 0),
    ("prefill_tps.16384", "prefill 16K", 0),
    ("startup_s", "start s", 0),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", type=Path, action="append", required=True, help="runs.db; repeat for several machines")
    parser.add_argument("--hardware", default="h200")
    args = parser.parse_args()
    points: list[pc.Point] = []
    print("| study | # | config vs baseline | " + " | ".join(h for _, h, _ in METRICS) + " | roofline | MAD c1 |")
    print("|" + "---|" * (len(METRICS) + 5))
    for index, db in enumerate(args.db, 1):
        points += _study_rows(Store(db, must_exist=True), f"db{index}:" if len(args.db) > 1 else "", args.hardware)
    _planner_tables(points)
    return 0


def _study_rows(store: Store, tag: str, hardware: str) -> list[pc.Point]:
    points: list[pc.Point] = []
    for study in store.studies():
        space = local_space(SearchSpace.model_validate_json(study["space"]))
        trials = [t for t in store.trials(study["name"]) if t.status == "ok"]
        base = next((t for t in trials if t.number == 0), None)
        for t in trials:
            p = pc.point(space, t, hardware)
            if p is None:
                continue
            p = dataclasses.replace(p, study=tag + p.study)
            points.append(p)
            cells = []
            for name, _, digits in METRICS:
                m = t.measurement(name)
                ref = base.measurement(name) if base and t is not base else None
                cell = fmt(m.median if m else None, digits)
                if m and ref and name != "startup_s":
                    cell += f" ({pct(m.median / ref.median - 1)})"
                cells.append(cell)
            decode = t.measurement("decode_tps.prose")
            mad = f"{decode.mad / decode.median:.1%}" if decode else "-"
            label = diff_label(t.candidate, base.candidate if base else None)
            print(f"| {tag}{study['name']} | {t.number} | {label} | " + " | ".join(cells) + f" | {p.roofline_fraction:.0%} | {mad} |")
    return points


def _planner_tables(points: list[pc.Point]) -> None:
    print()
    print("bytes per token (planner, short prompt) and roofline fraction = measured c1 tok/s x bytes / 4.8 TB/s")
    for p in points:
        print(f"- {p.study} #{p.trial}: {p.bytes_per_token / 1e9:.2f} GB/token, {p.n_layers} layers, "
              f"roofline {p.bandwidth / p.bytes_per_token:.0f} tok/s, measured {p.decode_tps:.1f} "
              f"({p.roofline_fraction:.0%}); KV {p.kv_bytes_per_token / 1e3:.0f} kB per cached token")
    print()
    print("## Planner decode error (predicted / measured - 1, c1)")
    shipped = [(p, p.shipped_decode_tps / p.decode_tps - 1) for p in points if p.shipped_decode_tps]
    current = [(p, p.current_decode_tps / p.decode_tps - 1) for p in points if p.current_decode_tps]
    rows: list[tuple[str, list[tuple[pc.Point, float]]]] = [
        ("shipped, stored with the trial (not fitted on these points)", shipped),
        ("this checkout's planner, h200 profile (not fitted on these points)", current),
    ]
    shapes = sorted({p.shape for p in points})
    plain = [p for p in points if not p.eager and not p.speculative]
    for fitter_name, fitter in (("planner form", pc.fit_planner_form), ("per-layer", pc.fit_per_layer)):
        for shape in shapes:
            rows.append((f"{fitter_name}, fitted on the other shapes, scored on {shape}",
                         pc.held_out(plain, fitter, lambda q, s=shape: q.shape != s)))
        rows.append((f"{fitter_name}, leave one trial out", pc.leave_one_out(plain, fitter)))
    print("| model | held-out points | median abs error | errors |")
    print("|---|---|---|---|")
    for name, res in rows:
        errs = [e for _, e in res]
        detail = ", ".join(f"{p.shape.split('-dummy')[0]}#{p.trial} {e:+.0%}" for p, e in res)
        print(f"| {name} | {len(res)} | {pct(pc.median_abs(errs)).lstrip('+') if errs else '-'} | {detail} |")
    print()
    print("## Planner prefill error (bare roofline x fitted efficiency; fitted on one shape)")
    with_prefill = [p for p in points if p.prefill_tps and p.bare_prefill_tps]
    for shape in shapes:
        train = [p for p in with_prefill if p.shape == shape]
        test = [p for p in with_prefill if p.shape != shape]
        if not train or not test:
            continue
        eff = pc.statistics.median(p.prefill_tps / p.bare_prefill_tps for p in train)
        errs = [eff * p.bare_prefill_tps / p.prefill_tps - 1 for p in test]
        print(f"- efficiency {eff:.3f} fitted on {shape} ({len(train)} points); held-out median abs error "
              f"{pc.median_abs(errs):.0%} on {len(test)} points: " + ", ".join(f"{e:+.0%}" for e in errs))


if __name__ == "__main__":
    sys.exit(main())
