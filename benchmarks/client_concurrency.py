"""What the measuring client adds at N concurrent streams: autotune's client (aiohttp) against the
same reading done through httpx (the client before 2026-12-06), both against one SSE server whose
timing is known (the stand-in of benchmarks/client_ttft_overhead.py, a separate process).

    python benchmarks/client_concurrency.py [--streams 1 16 32 64 128] [--rounds 3] [--max-tokens 128]
                                            [--ttft-ms 0] [--itl-ms 7]

Per arm and level: N requests sent at once, each streaming --max-tokens chunks --itl-ms apart after
--ttft-ms. Reported: median client TTFT and the server's own (request body in -> first chunk
flushed; perf_counter is CLOCK_MONOTONIC on Linux, so comparable across processes), their
difference (what the client adds), median client ITL against the server's, chunks read per second,
and the client's CPU time per chunk (getrusage). One event loop reads all N streams, as a wave or a
capacity level does: where its CPU per chunk times the chunk rate nears one core, the client
measures itself. The two arms alternate by round; medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autotune.bench.client import OpenAIClient  # noqa: E402
from client_ttft_overhead import timing_server  # noqa: E402

PROMPT = [{"role": "user", "content": "Write two sentences about a harbour at dawn."}]


async def autotune_arm(base_url: str, streams: int, max_tokens: int) -> list[tuple[float, float, int]]:
    async with OpenAIClient(base_url, "m", seed=None) as client:
        await asyncio.gather(*(client.chat(PROMPT, max_tokens=2) for _ in range(streams)))  # N open connections
        results = await asyncio.gather(*(client.chat(PROMPT, max_tokens=max_tokens) for _ in range(streams)))
    return [(r.ttft_ms or 0.0, r.tpot_ms or 0.0, r.n_chunks) for r in results if r.ok]


async def httpx_arm(base_url: str, streams: int, max_tokens: int) -> list[tuple[float, float, int]]:
    """The reading loop of autotune's client before 2026-12-06: httpx, aiter_lines, one json.loads per event."""
    async def one(http: httpx.AsyncClient, n: int) -> tuple[float, float, int]:
        t_send = time.perf_counter()
        first = last = 0.0
        chunks = 0
        body = {"model": "m", "messages": PROMPT, "max_tokens": n, "stream": True}
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                event = json.loads(line[5:])
                for choice in event.get("choices") or []:
                    if (choice.get("delta") or {}).get("content"):
                        now = time.perf_counter()
                        first = first or now
                        last = now
                        chunks += 1
        return 1000 * (first - t_send), 1000 * (last - first) / max(chunks - 1, 1), chunks

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as http:
        await asyncio.gather(*(one(http, 2) for _ in range(streams)))
        return list(await asyncio.gather(*(one(http, max_tokens) for _ in range(streams))))


ARMS = {"autotune (aiohttp)": autotune_arm, "httpx (before 2026-12-06)": httpx_arm}


def measure(arm, base_url: str, streams: int, max_tokens: int) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    rows = asyncio.run(arm(base_url, streams, max_tokens))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    stats = [s for s in httpx.get(f"{base_url}/stats").json()[-streams:] if s["n"] == max_tokens]
    chunks = sum(c for _, _, c in rows)
    return {
        "ok": len(rows),
        "ttft_ms": statistics.median(t for t, _, _ in rows),
        "server_ttft_ms": statistics.median(1000 * (s["t_first"] - s["t_in"]) for s in stats),
        "itl_ms": statistics.median(i for _, i, _ in rows),
        "server_itl_ms": statistics.median(1000 * (s["t_last"] - s["t_first"]) / (s["n"] - 1) for s in stats),
        "chunks_per_s": chunks / wall,
        # warm-up requests included in the CPU time, their chunks too (2 per stream)
        "client_cpu_us_per_chunk": 1e6 * cpu / (chunks + 2 * streams),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 16, 32, 64, 128])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="server delay before the first chunk")
    parser.add_argument("--itl-ms", type=float, default=7.0, help="server delay between chunks")
    parser.add_argument("--out", help="write the report as JSON here too")
    args = parser.parse_args()
    with timing_server(args.ttft_ms, args.itl_ms) as base_url:
        runs: dict[str, dict[int, list[dict[str, float]]]] = {a: {n: [] for n in args.streams} for a in ARMS}
        for r in range(args.rounds):
            for n in args.streams:
                order = list(ARMS.items()) if r % 2 == 0 else list(reversed(ARMS.items()))
                for name, arm in order:
                    runs[name][n].append(measure(arm, base_url, n, args.max_tokens))
    table = {name: {n: {k: round(statistics.median(x[k] for x in rs), 2) for k in rs[0]} for n, rs in by.items()}
             for name, by in runs.items()}
    print("| client | streams | TTFT ms (server's) | added by the client | ITL ms (server's) | chunks/s | client CPU us/chunk |")
    print("|---|---|---|---|---|---|---|")
    for name, by in table.items():
        for n, m in by.items():
            print(f"| {name} | {n} | {m['ttft_ms']:.1f} ({m['server_ttft_ms']:.1f}) | {m['ttft_ms'] - m['server_ttft_ms']:+.1f} | "
                  f"{m['itl_ms']:.2f} ({m['server_itl_ms']:.2f}) | {m['chunks_per_s']:,.0f} | {m['client_cpu_us_per_chunk']:.0f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"conditions": vars(args), "medians": table, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
