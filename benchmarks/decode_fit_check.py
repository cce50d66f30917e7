"""The planner's one-stream decode fit on the H200 and its error on shapes it was not fitted on
(issue 34 item 2), and the batch term on those shapes at 8 and 32 streams (item 3).

The fit (calibrate("h200"), `decode_line` in autotune/hardware/hardware_profiles.yaml): decode
efficiency and the fixed step time together, from the dense 8B shape in bf16 and online fp8 weights
(vLLM 0.33.0). Held out: the 70B-class dense shape (Llama-3.1-70B cut to 40 layers,
`benchmarks/data/dense70-h200.json`, written from the study's `show --json` on the GPU) and Gemma 3
270M under vLLM 0.26.0 (the rows the fixed step came from before).

    python benchmarks/decode_fit_check.py [--measured benchmarks/data/dense70-h200.json]
    python benchmarks/decode_fit_check.py --from-show show-dense70.json --machine "..." --date YYYY-MM-DD
        (writes the --measured file from the GPU study's `autotune show --json`, its ok trials only)
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from autotune.hardware.profiles import calibration_points, get_profile  # noqa: E402
from autotune.models import Candidate, HardwareProfile, ModelSpec, SearchSpace, Workload  # noqa: E402
from autotune.planner.calibration import bare_roofline, calibrate, step_line_pair  # noqa: E402
from autotune.planner.roofline import estimate  # noqa: E402
from batch_term_check import load_space  # noqa: E402

MEASURED = ROOT / "benchmarks" / "data" / "dense70-h200.json"
GEMMA = ModelSpec(name="gemma-3-270m", path="gemma-3-270m-hf", params_total_b=0.268, weight_bits=16, n_layers=18,
                  hidden_size=640, n_heads=4, n_kv_heads=1, head_dim=256, kv_layers=3)


class Row(NamedTuple):
    name: str
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def one_gpu_h200() -> HardwareProfile:
    return get_profile("h200").model_copy(update={"gpus_per_node": 1})


def fit_lines() -> list[str]:
    bare = bare_roofline(get_profile("h200"))
    fitted = calibrate("h200")
    efficiency, fixed = fitted["decode_efficiency"], fitted["step_overhead_ms"]
    lines = [f"fit: decode efficiency {efficiency:.3f} of {bare.mem_bandwidth_gbps:g} GB/s, fixed step {fixed:.3f} ms",
             "| fit point | memory ms at 4.8 TB/s | measured step ms | line ms | residual | share of bare roofline |",
             "|---|---|---|---|---|---|"]
    for point in calibration_points("h200")["decode_line"]:
        memory, step = step_line_pair(point, bare)
        line = memory / efficiency + fixed
        lines.append(f"| {point['name']} | {memory:.3f} | {step:.3f} | {line:.3f} | {line / step - 1:+.1%} | {memory / step:.0%} |")
    return lines


def gemma_rows(hardware: HardwareProfile) -> list[Row]:
    """Gemma 3 270M bf16, CUDA graphs, vLLM 0.26.0 (docs/measurements.md 2026-11-29 and -30): the
    fixed step's old source, now held out (another vLLM version)."""
    space = SearchSpace(name="gemma", engine="vllm", model=GEMMA, fixed={"max_model_len": 4096, "gpu_memory_utilization": 0.5},
                        knobs=[], workload=Workload())
    predicted = estimate(space, Candidate(engine="vllm", params=dict(space.fixed)), hardware, 1).decode_tps or 0.0
    return [Row("Gemma 3 270M, vLLM 0.26.0, 2026-11-29", predicted, 459.8),
            Row("Gemma 3 270M, vLLM 0.26.0, 2026-11-30", predicted, 504.9)]


def measured_rows(path: Path, hardware: HardwareProfile) -> tuple[list[Row], list[Row], dict]:
    """(one-stream rows, wave rows) of the held-out shape's trials, predicted against measured."""
    data = json.loads(path.read_text())
    space = load_space(ROOT / data["space_file"])
    ones, waves = [], []
    for trial in data["trials"]:
        candidate = Candidate(engine="vllm", params={**space.baseline_params(), **trial["params"]})
        est = estimate(space, candidate, hardware, 1)
        label = trial["label"]
        ones.append(Row(f"{label}, c1", est.decode_tps or 0.0, trial["decode_tps"]))
        for level, measured in sorted(trial.get("output_tps", {}).items(), key=lambda kv: int(kv[0])):
            waves.append(Row(f"{label}, c{level}", est.output_tps_at(int(level)) or 0.0, measured))
    return ones, waves, data


def write_from_show(show: Path, out: Path, machine: str, date: str) -> None:
    """The held-out rows from a study's `show --json`: each ok trial's knobs that differ from the
    baseline, its one-stream decode and its waves' output tok/s (medians of the stored samples)."""
    trials = json.loads(show.read_text())
    space_file = "benchmarks/spaces/vllm-llama3.1-70b-40l-dense.yaml"
    space = load_space(ROOT / space_file)
    base = {**space.fixed, **space.baseline_params()}
    rows = []
    for trial in trials:
        if trial["status"] != "ok":
            continue
        medians = {m["name"]: m["median"] for m in trial["measurements"]}
        changed = {k: v for k, v in trial["candidate"]["params"].items() if base.get(k) != v}
        rows.append({
            "number": trial["number"], "label": " ".join(f"{k}={v}" for k, v in changed.items()) or "baseline",
            "params": changed, "decode_tps": round(medians["decode_tps.prose"], 2),
            "output_tps": {name.split(".c")[1]: round(v, 1) for name, v in medians.items() if name.startswith("output_tps.c")},
            "engine_version": trial.get("engine_version"),
        })
    out.write_text(json.dumps({
        "shape": "Llama-3.1-70B cut to 40 of 80 layers (model_shapes/llama3.1-70b-40l), dummy weights",
        "space_file": space_file, "measured": f"{date}, {machine}, scripts/gpu/dense70.sh study, one launch per trial",
        "trials": rows,
    }, indent=1) + "\n")
    print(f"wrote {out}: {len(rows)} trials")


def print_rows(title: str, rows: list[Row]) -> None:
    print(f"\n{title}")
    print("| row | predicted tok/s | measured tok/s | error |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row.name} | {row.predicted:,.1f} | {row.measured:,.1f} | {row.error:+.1%} |")
    if rows:
        errors = sorted(abs(r.error) for r in rows)
        print(f"median |error| {statistics.median(errors):.1%}, largest {errors[-1]:.1%}")


def order_check(rows: list[Row], noise: float) -> str:
    """Every pair whose measured speeds differ by more than `noise`: is the predicted order right?"""
    pairs = [(a, b) for a, b in itertools.combinations(rows, 2) if abs(a.measured / b.measured - 1) > noise]
    wrong = [f"{a.name} / {b.name}" for a, b in pairs if (a.predicted - b.predicted) * (a.measured - b.measured) < 0]
    return f"{len(pairs) - len(wrong)} of {len(pairs)} pairs beyond {noise:.0%} in the right order" + (
        f"; wrong: {', '.join(wrong)}" if wrong else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measured", type=Path, default=MEASURED)
    parser.add_argument("--noise", type=float, default=0.05, help="launch noise: pairs closer than this are not ordered")
    parser.add_argument("--from-show", type=Path, help="a GPU study's `show --json`: write --measured from it")
    parser.add_argument("--machine", default="lent NVIDIA H200")
    parser.add_argument("--date", default="")
    args = parser.parse_args()
    if args.from_show:
        write_from_show(args.from_show, args.measured, args.machine, args.date)
    hardware = one_gpu_h200()
    print("\n".join(fit_lines()))
    print_rows("held out: Gemma 3 270M (another vLLM, 0.26.0)", gemma_rows(hardware))
    if not args.measured.is_file():
        print(f"\n{args.measured} not there: the held-out shape is not measured yet")
        return
    ones, waves, data = measured_rows(args.measured, hardware)
    print(f"\nheld out: {data['shape']} ({data['measured']})")
    print_rows("one stream", ones)
    print(order_check(ones, args.noise))
    print_rows("waves of N streams (the batch term)", waves)
    for level in sorted({r.name.rsplit(", c", 1)[1] for r in waves}, key=int):
        print(f"c{level}: " + order_check([r for r in waves if r.name.endswith(f", c{level}")], args.noise))


if __name__ == "__main__":
    main()
