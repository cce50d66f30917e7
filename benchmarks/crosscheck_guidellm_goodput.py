"""Cross-check autotune's capacity_at_slo against GuideLLM's own `goodput` profile on one server.

    python benchmarks/crosscheck_guidellm_goodput.py --space benchmarks/spaces/llamacpp-gemma3-270m-capacity.yaml \
        --guidellm /path/to/venv/bin/guidellm --out DIR [--rounds 1]

Starts the space's engine with its baseline (engine defaults), warms it up, then runs, interleaved
over `--rounds` (autotune, GuideLLM, autotune, ...), autotune's capacity search
(autotune/bench/capacity.py, the space's objective.slo) and `guidellm run --profile goodput` with
the same SLO (ttft_ms; itl_ms as GuideLLM's tpot_ms objective, which it compares with its
inter-token latency; e2e_ms as e2el_ms), the same target attainment, initial and max streams and
probe budget, and each level judged from its steady state: GuideLLM runs each level for
`--guidellm-seconds` (its `max_duration` constraint) with the first and last `--guidellm-transient`
share of that time left out (its warm-up and cool-down), so neither the burst that fills a level
nor the requests cancelled at its end decide it; autotune judges the requests sent after every
stream's first (docs/metrics.md), with `max_requests` = `min_requests` (an unresolved level is not
measured on, as GuideLLM does not). The same prompts (the workload's, as a JSON-lines file) and the same max_tokens, on the chat endpoint,
greedy with the same seed. GuideLLM is installed apart (PyPI guidellm 0.8.x, a venv of its own: it
pulls torch); `--guidellm` is its executable. Writes crosscheck_goodput.json: every level each tool
probed (streams, attainment, its interval, determined requests, pass / fail / unresolved, output
tok/s), each tool's capacity, and the launch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import urllib.request
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autotune.bench import capacity  # noqa: E402
from autotune.bench.client import OpenAIClient  # noqa: E402
from autotune.bench.throughput import decode_args, requests_for, warm_up  # noqa: E402
from autotune.engines import get_engine  # noqa: E402
from autotune.launchers.base import free_port  # noqa: E402
from autotune.launchers.process import ServerProcess  # noqa: E402
from autotune.checkpoint.files import resolve_model  # noqa: E402
from autotune.models import SearchSpace, Slo  # noqa: E402
from autotune.space.candidates import baseline, load_space  # noqa: E402
from server_metrics import RUNNING, Sampler, window  # noqa: E402

SEED = 1234  # autotune's client sends it with every request; GuideLLM is given the same in its body


def say(line: str) -> None:
    print(line, flush=True)


async def ours(base_url: str, served: str, tokenize_path: str, space: SearchSpace, slo: Slo,
               sampler: Sampler | None) -> dict[str, Any]:
    work = space.workload
    windows: list[tuple[float, float]] = []  # each level's wall-clock span, for the server's view of it

    async def measure(client: Any, n: int) -> Any:
        t0 = time.time()
        # every judged request awaited, a failing level's too: GuideLLM judges each level on all of them
        level = await capacity.measure_level(client, work, slo, n, progress=say, settle_early=False)
        windows.append((t0, time.time()))
        if sampler is not None:
            say(f"  server during {n} streams: {server_line(window(sampler.polls, *windows[-1]))}")
        return level

    async with OpenAIClient(base_url, served, tokenize_path=tokenize_path, timeout_s=work.request_timeout_s,
                            seed=SEED) as http:
        client = requests_for(http, work)
        await warm_up(client, work)
        started = time.monotonic()
        # each level printed as it is judged: a run cut by its time limit still shows what it measured
        report = await capacity.search(slo, lambda n: measure(client, n))
    levels = [lv.model_dump(mode="json") for lv in report.levels]
    for level, span in zip(levels, windows):
        level["window"] = list(span)
        level["server"] = window(sampler.polls, *span) if sampler is not None else {}
    return {"seconds": round(time.monotonic() - started, 1), "capacity": report.capacity, "stop": report.stop.value,
            "levels": levels}


def server_line(seen: dict[str, Any]) -> str:
    if not seen:
        return "no /metrics polls inside the level"
    waiting = f" (+{seen['waiting_mean']} waiting)" if "waiting_mean" in seen else ""
    return (f"{seen['running_mean']} requests running{waiting} on average, {seen['generated_tps']} tok/s generated, "
            f"{seen['requests']} first tokens, {_pct(seen['ttft_le_1s'])} within 1 s (mean {seen['ttft_mean_ms']} ms), "
            f"mean ITL {seen['itl_mean_ms']} ms")


def client_server_line(client: dict[str, Any], server: dict[str, Any]) -> str:
    """A client's count of requests in flight and mean TTFT beside the server's: the difference is what
    never reached the engine (or reached it late), whether it waited in the client or the HTTP front."""
    waiting = server.get("waiting_mean", 0.0)  # a window polled before the referee read the queue has none
    held = server["running_mean"] + waiting
    return (f"client: {client['in_flight_mean']} in flight, mean TTFT {client['ttft_mean_ms']} ms; "
            f"server: {server['running_mean']} running + {waiting} waiting, "
            f"mean TTFT from arrival {server['ttft_mean_ms']} ms: {client['in_flight_mean'] - held:.1f} requests and "
            f"{client['ttft_mean_ms'] - server['ttft_mean_ms']:.1f} ms a request outside the engine")


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.1%}"


def scenario(base_url: str, served: str, space: SearchSpace, slo: Slo, data: Path, out: Path, seconds: float,
             transient: float) -> dict[str, Any]:
    objectives = {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.itl_ms}
    if slo.e2e_ms is not None:
        objectives["e2el_ms"] = slo.e2e_ms
    # GuideLLM's chat requests carry the limit as max_completion_tokens, which llama-cpp-python's
    # server does not read (it would decode to the context's end): max_tokens goes in the body too
    body = {"temperature": 0.0, "seed": SEED, "max_tokens": space.workload.decode_max_tokens,
            **decode_args(space.workload)}
    return {
        "backend": {"kind": "openai_http", "target": base_url, "model": served,
                    "request_format": "/v1/chat/completions", "max_tokens": space.workload.decode_max_tokens,
                    "timeout": space.workload.request_timeout_s, "extras": {"body": body},
                    # its check asks routes llama-cpp-python's server does not serve; autotune's warm-up ran first
                    "validate_backend": False},
        "profile": {"kind": "goodput", "target_attainment": slo.attainment, "initial_streams": slo.initial_streams,
                    "max_streams": slo.max_streams, "max_probes": slo.max_probes, "tolerance": 0.1,
                    "confidence": 0.95,
                    "warmup": {"percent": transient, "mode": "duration"},
                    "cooldown": {"percent": transient, "mode": "duration"}},
        "constraints": [{"kind": "max_duration", "seconds": seconds}],
        "data": [{"kind": "json_file", "path": str(data)}],
        "metrics": {"kind": "generative", "slo": objectives},
        "outputs": [{"kind": "json", "path": str(out / "guidellm.json")}],
    }


def guidellm(executable: str, spec: dict[str, Any], out: Path, round_: int, sampler: Sampler | None) -> dict[str, Any]:
    path = out / f"guidellm-scenario-{round_}.json"
    path.write_text(json.dumps({"spec": spec}, indent=2))
    started = time.monotonic()
    done = subprocess.run([executable, "run", "--scenario", str(path), "--disable-progress"],
                          capture_output=True, text=True, timeout=3600)
    seconds = round(time.monotonic() - started, 1)
    (out / f"guidellm-{round_}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"guidellm run failed ({done.returncode}); see {out / f'guidellm-{round_}.log'}")
    result = json.loads((out / "guidellm.json").read_text())
    (out / f"guidellm-{round_}.json").write_text(json.dumps(result))
    found = levels_of(result, spec["profile"]["target_attainment"])
    for level, bench in zip(found["levels"], result["benchmarks"]):
        level["window"] = [bench["start_time"], bench["end_time"]]
        level["server"] = window(sampler.polls, bench["start_time"], bench["end_time"]) if sampler is not None else {}
        if sampler is not None:
            say(f"  server during GuideLLM's {level['streams']} streams: {server_line(level['server'])}")
            if level["server"].get("ttft_mean_ms") is not None:
                say(f"    {client_server_line(level, level['server'])}")
    return {"seconds": seconds, **found}


def levels_of(result: dict[str, Any], target: float) -> dict[str, Any]:
    """Each benchmark GuideLLM ran (one per probed level) as autotune's level fields."""
    levels = []
    for bench in result["benchmarks"]:
        strategy = bench["config"]["strategy"]
        metrics = bench["metrics"]
        determined = metrics["slo_determined_requests"]
        attainment = metrics["slo_attainment"]
        low, high = capacity.wilson_interval(round(attainment * determined), determined) if determined else (0.0, 1.0)
        verdict = capacity.judge(low, high, target) if determined else None
        levels.append({
            "streams": strategy["streams"], "attainment": round(attainment, 4), "interval": [round(low, 4), round(high, 4)],
            "determined": determined, "verdict": verdict.value if verdict else None,
            "guidellm_passed": attainment >= target,  # GuideLLM decides on the point estimate
            "output_tps": metrics["output_tokens_per_second"]["successful"]["mean"],
            "p99_ttft_ms": metrics["time_to_first_token_ms"]["successful"]["percentiles"]["p99"],
            "p99_itl_ms": metrics["inter_token_latency_ms"]["successful"]["percentiles"]["p99"],
            # its own view, beside the server's: the requests it counted in flight, and its mean TTFT
            "in_flight_mean": round(metrics["request_concurrency"]["successful"]["mean"], 1),
            "ttft_mean_ms": round(metrics["time_to_first_token_ms"]["successful"]["mean"], 1),
            "completed": metrics["request_totals"]["successful"], "errored": metrics["request_totals"]["errored"],
            "cancelled": metrics["request_totals"]["incomplete"],
        })
    passing = [lv["streams"] for lv in levels if lv["guidellm_passed"]]
    return {"capacity": max(passing, default=0), "levels": levels}


@contextlib.contextmanager
def referee(base_url: str) -> Iterator[Sampler | None]:
    """The server's own /metrics, polled for the whole run; None (and a line saying so) where the
    server serves none (llama.cpp) or prometheus_client, which vLLM brings, is not installed."""
    try:
        with urllib.request.urlopen(f"{base_url}/metrics", timeout=5) as reply:
            if RUNNING not in reply.read().decode():
                raise OSError("no vLLM request metrics")
    except (OSError, ValueError) as exc:
        say(f"no server-side view: {base_url}/metrics: {exc}")
        yield None
        return
    with Sampler(base_url) as sampler:
        yield sampler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", required=True, help="a space whose objective is capacity_at_slo")
    parser.add_argument("--guidellm", help="the guidellm executable (its own venv); without it, autotune's side only")
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default=None, help="model path (default: the space's)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--initial-streams", type=int, help="autotune's first level (default: the space's slo)")
    parser.add_argument("--guidellm-seconds", type=float, default=20.0, help="GuideLLM's run per level (s)")
    parser.add_argument("--guidellm-transient", type=float, default=0.1,
                        help="the share of each GuideLLM level at its start and at its end left out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    space = load_space(args.space)
    slo = space.objective.slo
    if slo is None:
        raise SystemExit(f"{args.space}: objective.metric is {space.objective.metric}, not capacity_at_slo")
    # GuideLLM judges every level at its fixed count: autotune's side likewise, without measuring an
    # unresolved level on (slo.max_requests), so that both tools apply one definition
    slo = slo.model_copy(update={"max_requests": slo.min_requests})
    if args.initial_streams is not None:
        slo = slo.model_copy(update={"initial_streams": args.initial_streams})
    model = resolve_model(space.model, args.model)
    engine = get_engine(space.engine).use_space(space)  # llama.cpp: requests queue, not interrupt each other
    launch = engine.render(baseline(space), model, free_port())
    served = model.served_name or model.name
    data = out / "goodput_prompts.jsonl"
    # GuideLLM reads its data once per level: enough rows for a level of max_streams over its seconds.
    # Rows are whole chat messages with string content: from a `prompt` column GuideLLM sends content
    # as a list of parts ([{"type": "text", ...}]), which llama-cpp-python 0.3.36's gemma chat format
    # renders as an empty turn (7 prompt tokens instead of ~36: measured 2026-12-03)
    prompts = capacity.workload_prompts(space.workload)
    rows = max(2 * (slo.min_requests + slo.max_streams), 40 * slo.max_streams)
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": prompts[i % len(prompts)]}]}) + "\n"
                            for i in range(rows)))
    rounds: list[dict[str, Any]] = []
    with ServerProcess(launch, out / "crosscheck_server.log", startup_timeout_s=space.workload.startup_timeout_s) as server, \
            referee(server.base_url) as sampler:
        def write() -> None:  # after each tool's side: a run cut by its time limit keeps what it measured
            report = {"space": space.name, "slo": slo.model_dump(mode="json"),
                      "workload": space.workload.model_dump(mode="json"), "launch": launch.server.argv,
                      "engine_version": engine.version(), "rounds": rounds}
            (out / "crosscheck_goodput.json").write_text(json.dumps(report, indent=2))

        for i in range(args.rounds):
            mine = asyncio.run(ours(server.base_url, served, engine.tokenize_path, space, slo, sampler))
            print(f"round {i + 1}: autotune {mine['capacity']} streams", flush=True)
            rounds.append({"autotune": mine})
            write()
            if args.guidellm is None:
                continue
            theirs = guidellm(args.guidellm, scenario(server.base_url + "/v1", served, space, slo, data, out,
                                                args.guidellm_seconds, args.guidellm_transient), out, i + 1,
                              sampler)
            print(f"round {i + 1}: guidellm {theirs['capacity']} streams", flush=True)
            rounds[-1]["guidellm"] = theirs
            write()
    print(json.dumps({f"round {i + 1}": {k: v["capacity"] for k, v in r.items()} for i, r in enumerate(rounds)}))


if __name__ == "__main__":
    main()
