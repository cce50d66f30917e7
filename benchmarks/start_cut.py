"""A trial's start with and without a CUDA-graph capture cap (issue 53), the same candidate in turn.

    python benchmarks/start_cut.py --space benchmarks/spaces/vllm-llama3.1-8b-dense.yaml --hardware h100 \
        --db /tmp/autotune/runs.db --logs /tmp/autotune/logs --cap 32 --rounds 1 --out startcut.json

Each round launches the space's baseline twice, in alternating order (round 1: capped then vLLM's
own sizes; round 2 the other way), each launch a one-trial study of its own (`startcut-<arm>-<round>`)
that measures the space's whole workload: `capped` starts vLLM with `--max-cudagraph-capture-size
CAP` (graphs captured only up to CAP, the workload's largest wave), `default` with vLLM's own 51
sizes. A later call with the same --db goes on with the next round (a lent machine's call holds one
round or two). The table printed and written to --out: per launch the start (launch to healthy),
its parts from the engine's log, the capture sizes vLLM resolved, and the numbers of the workload,
so the cut's seconds and whether it moved what a trial measures are read side by side.

Run on an H100 on 2026-12-07 (docs/measurements.md): the cap saved 3-4 s of capture and lowered the
8- and 32-stream output by about 3 % in both rounds (a step that mixes a new prompt with the decodes
holds more tokens than the cap and loses its graph), so autotune's trials do not cap.

`--mode jit` launches the baseline with `--attention-backend FLASHINFER` instead, as a container
would: `coldjit` with FlashInfer's and Triton's kernel caches in new empty folders (a container
without the mounted cache: every start JIT-compiles them), `warmjit` with the folders every launch
of the arm shares (what the docker launcher's mounted cache gives). Each round runs cold then warm;
round 1's cold launch fills the shared folders (and vLLM's own compile cache, shared by both arms as
the docker launcher shares it), so from round 2 on the two arms differ only in the kernels' caches.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.cli import main as autotune  # noqa: E402
from autotune.engines.vllm import VllmEngine  # noqa: E402
from autotune.models import CONTAINER_JIT_CACHE_ENV  # noqa: E402
from autotune.store import Store  # noqa: E402

ARMS = {"cap": ("capped", "default"), "jit": ("coldjit", "warmjit")}
#: where FlashInfer and Triton keep the kernels they JIT-compile: the names the docker launcher sets
JIT_ENV = tuple(CONTAINER_JIT_CACHE_ENV)
#: the workload's numbers shown per launch (the dense 8B space's; a missing one is '-')
NUMBERS = ("decode_tps.prose", "output_tps.c8", "output_tps.c32", "ttft_ms.prose", "prefill_tps.4096")


def order(mode: str, round_no: int) -> tuple[str, ...]:
    """cap: round 1 capped first, round 2 default first, and so on (neither arm always starts on a cold
    host); jit: cold then warm, the cold launch of round 1 filling the folders the warm arm shares."""
    arms = ARMS[mode]
    return arms if mode == "jit" or round_no % 2 else arms[::-1]


def extra_argv(arm: str, args: argparse.Namespace) -> list[str]:
    """What the arm appends to the baseline's server argv (stored with the trial)."""
    if arm == "capped":
        return ["--max-cudagraph-capture-size", str(args.cap)]
    if arm in ARMS["jit"]:
        return ["--attention-backend", "FLASHINFER"]
    return []


def jit_folders(arm: str, round_no: int, logs: str) -> dict[str, str]:
    """The kernel caches of a jit arm's launch: the shared folders, or (cold, after round 1) new empty ones."""
    if arm not in ARMS["jit"]:
        return {}
    base = Path(logs) / "startcut-jit-shared" if arm == "warmjit" or round_no == 1 else Path(tempfile.mkdtemp())
    return {name: str(base / Path(inside).name) for name, inside in CONTAINER_JIT_CACHE_ENV.items()}


def launch(arm: str, round_no: int, args: argparse.Namespace) -> int:
    study = f"startcut-{arm}-{round_no}"
    original = VllmEngine.render
    more = extra_argv(arm, args)

    def rendered(self, candidate, model, port, host="127.0.0.1"):  # type: ignore[no-untyped-def]
        spec = original(self, candidate, model, port, host)
        server = spec.server.model_copy(update={"argv": [*spec.server.argv, *more]})
        return spec.model_copy(update={"nodes": [server]})

    saved = {name: os.environ.get(name) for name in JIT_ENV}
    folders = jit_folders(arm, round_no, args.logs)
    if folders:
        print(f"{study}: " + ", ".join(f"{k}={v}" for k, v in folders.items()), flush=True)
    os.environ.update(folders)  # the engine process inherits them
    VllmEngine.render = rendered  # type: ignore[method-assign]
    try:
        return autotune(["search", "--space", args.space, "--study", study, "--db", args.db, "--logs", args.logs,
                         "--hardware", args.hardware, "--trials", "1", "--confirm-rounds", "0",
                         "--noise-relaunches", "0"])
    finally:
        VllmEngine.render = original  # type: ignore[method-assign]
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def names(store: Store, mode: str | None = None) -> list[str]:
    """The start-cut studies in this db (of one mode's arms), in the order they ran."""
    arms = ARMS[mode] if mode else tuple(a for pair in ARMS.values() for a in pair)
    return [s["name"] for s in store.studies() if s["name"].startswith(tuple(f"startcut-{a}-" for a in arms))]


def rows(db: str) -> list[dict[str, object]]:
    store = Store(db)
    found = []
    for study in names(store):
        for t in store.trials(study):
            numbers = {n: (m.median if (m := t.measurement(n)) else None) for n in NUMBERS}
            sizes = t.resolved.cudagraph_capture_sizes if t.resolved else None
            found.append({"study": study, "status": t.status, "start_s": t.phase_s.get("start"),
                          "trial_s": round(t.duration_s, 1), "parts": t.start_parts_s,
                          "capture_sizes": len(sizes) if sizes is not None else None,
                          "largest_capture": sizes[-1] if sizes else None,
                          "argv_tail": t.launch.server.argv[-2:] if t.launch else None, **numbers})
    return found


def table(found: list[dict[str, object]]) -> str:
    head = ["study", "start", "graphs", "compile", "kernels", "init", "sizes", *NUMBERS, "trial"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in found:
        parts = r["parts"] if isinstance(r["parts"], dict) else {}
        cells = [r["study"], r["start_s"], parts.get("cuda_graphs"), parts.get("compile"), parts.get("kernels"),
                 parts.get("engine_init"),
                 f"{r['capture_sizes']} (..{r['largest_capture']})", *(r[n] for n in NUMBERS), r["trial_s"]]
        lines.append(" | ".join("-" if c is None else f"{c:.1f}" if isinstance(c, float) else str(c) for c in cells))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--space", required=True)
    ap.add_argument("--hardware", default="auto")
    ap.add_argument("--db", required=True)
    ap.add_argument("--logs", required=True)
    ap.add_argument("--mode", choices=tuple(ARMS), default="cap",
                    help="cap: capped vs vLLM's own capture sizes; jit: FLASHINFER with empty vs shared kernel caches")
    ap.add_argument("--cap", type=int, default=32, help="the capped arm's --max-cudagraph-capture-size")
    ap.add_argument("--rounds", type=int, default=1, help="rounds this call runs (each: both arms, one launch each)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    done = names(Store(args.db), args.mode) if Path(args.db).exists() else []
    first = 1 + max((int(s.rsplit("-", 1)[1]) for s in done), default=0)
    worst = 0
    for round_no in range(first, first + args.rounds):
        for arm in order(args.mode, round_no):
            worst = max(worst, launch(arm, round_no, args))
    found = rows(args.db)
    Path(args.out).write_text(json.dumps(found, indent=1))
    print(table(found))
    return worst


if __name__ == "__main__":
    sys.exit(main())
