"""Cross-check NVML's energy counter on a GPU host (issue 33): over one window, the counter's joules
against nvidia-smi's power samples (10 Hz) integrated over the same window, per GPU, with what
autotune's own meter (autotune/bench/energy.py) reads beside them.

    python3 scripts/gpu/energy_check.py --seconds 20 [--gpus 0] [-- COMMAND ...]

Without COMMAND the window is idle for --seconds; with it, the window is the command's run (e.g. an
`autotune search`). Prints one JSON object: per GPU, the counter's J, nvidia-smi's integrated J, their
ratio, the sample count; and the meter's reading of the same window. Exit 1 when a counter does not
advance, or NVML cannot be read (COMMAND runs all the same)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time

from autotune.bench.energy import EnergyMeter
from autotune.bench.nvml import Nvml, NvmlUnavailable


def smi_sampler(gpus: list[int], out: list[tuple[float, int, float]], stop: threading.Event) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        ["nvidia-smi", f"--id={','.join(map(str, gpus))}", "--query-gpu=index,power.draw",
         "--format=csv,noheader,nounits", "-lms", "100"], stdout=subprocess.PIPE, text=True)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if stop.is_set():
                break
            try:
                index, watts = (part.strip() for part in line.split(","))
                out.append((time.monotonic(), int(index), float(watts)))
            except ValueError:
                continue

    threading.Thread(target=read, daemon=True).start()
    return proc


def integrate(samples: list[tuple[float, float]]) -> float:
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(samples, samples[1:]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--gpus", default=None, help="CUDA_VISIBLE_DEVICES-style list (default: every GPU)")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args()
    try:
        nvml = Nvml.open(args.gpus)
    except NvmlUnavailable as exc:  # the command still runs: a study is worth its tok/s without the check
        rc = subprocess.run(args.command).returncode if args.command else None
        print(json.dumps({"error": str(exc), "command_rc": rc}))
        return 1
    gpus = list(nvml.handles)
    meter = EnergyMeter.open(args.gpus)
    samples: list[tuple[float, int, float]] = []
    stop = threading.Event()
    proc = smi_sampler(gpus, samples, stop)
    time.sleep(1.0)  # nvidia-smi's first lines
    before = {g: nvml.energy_j(g) for g in gpus}
    t0 = time.monotonic()
    rc = None
    with meter.window("check"):
        if args.command:
            rc = subprocess.run(args.command).returncode
        else:
            time.sleep(args.seconds)
    t1 = time.monotonic()
    after = {g: nvml.energy_j(g) for g in gpus}
    time.sleep(0.3)
    stop.set()
    proc.terminate()
    per_gpu = {}
    advanced = True
    for g in gpus:
        window = [(t, w) for t, i, w in samples if i == g and t0 <= t <= t1]
        smi_j = integrate(window)
        b, a = before[g], after[g]
        counter_j = a - b if a is not None and b is not None else None
        advanced &= bool(counter_j and counter_j > 0)
        per_gpu[g] = {"counter_j": counter_j, "nvidia_smi_j": round(smi_j, 2), "samples": len(window),
                      "counter_over_smi": round(counter_j / smi_j, 4) if counter_j and smi_j else None,
                      "state": nvml.state(g).model_dump(mode="json")}
    record = meter.record()
    print(json.dumps({"seconds": round(t1 - t0, 3), "command_rc": rc, "gpus": per_gpu,
                      "meter": record.model_dump(mode="json")}, indent=1))
    meter.close()
    nvml.close()
    return 0 if advanced else 1


if __name__ == "__main__":
    sys.exit(main())
