"""Client-side share of TTFT and decode numbers: autotune's client (aiohttp since 2026-12-06; httpx before) against `vllm bench serve`'s
request function (aiohttp), both against one SSE server whose timing is known.

    python benchmarks/client_ttft_overhead.py [--rounds 5] [--requests 20] [--ttft-ms 12] [--itl-ms 2]

The server (a separate process, standard library asyncio) is a timing stand-in, not an engine: it
answers /v1/chat/completions the way vLLM streams (a role chunk, content chunks, a usage chunk,
[DONE]) after a fixed delay and at a fixed inter-token pace, and records, per request, when the
request body was in and when the first content chunk was flushed (perf_counter, which on Linux is
CLOCK_MONOTONIC and so comparable across processes). Client TTFT minus that server-side TTFT is
the time the client itself adds (building and sending the request, reading and parsing the first
chunk). The two clients alternate by round. Also reported: autotune's single-stream tok/s under both
definitions -- autotune's (tokens / summed request time) and vllm bench serve's (tokens / wall time
of the whole run, gaps between requests included).

Needs vLLM importable for the vllm-bench arm (its client code only; no GPU); without it, only the
autotune arm runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.bench.client import OpenAIClient
from autotune.launchers.base import free_port

SERVER = r"""
import asyncio, json, sys, time

PORT, TTFT, ITL = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
STATS = []


def sse(obj):
    data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def chunk(content=None, role=None):
    delta = {"content": content} if role is None else {"role": role, "content": ""}
    return {"id": "x", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            path = lines[0].split()[1]
            size = next((int(l.split(":")[1]) for l in lines if l.lower().startswith("content-length")), 0)
            body = await reader.readexactly(size) if size else b""
            t_in = time.perf_counter()
            if path == "/stats":
                out = json.dumps(STATS).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(out), out))
                await writer.drain()
                continue
            request = json.loads(body)
            n = request.get("max_completion_tokens") or request.get("max_tokens") or 16
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            await asyncio.sleep(TTFT)
            writer.write(sse(chunk(role="assistant")) + sse(chunk("w0 ")))
            await writer.drain()
            t_first = time.perf_counter()
            for i in range(1, n):
                await asyncio.sleep(ITL)
                writer.write(sse(chunk(f"w{i} ")))
                await writer.drain()
            t_last = time.perf_counter()
            usage = {"id": "x", "object": "chat.completion.chunk", "model": "m", "choices": [],
                     "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": n + 8}}
            writer.write(sse(usage) + sse(b"[DONE]") + b"0\r\n\r\n")
            await writer.drain()
            STATS.append({"t_in": t_in, "t_first": t_first, "t_last": t_last, "n": n})
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", PORT)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""

PROMPT = "Write two sentences about a harbour at dawn."


async def autotune_arm(base_url: str, requests: int, max_tokens: int) -> dict[str, float]:
    async with OpenAIClient(base_url, "m", seed=None) as client:
        await client.chat([{"role": "user", "content": PROMPT}], max_tokens=4)  # warm-up
        t0 = time.perf_counter()
        results = [await client.chat([{"role": "user", "content": PROMPT}], max_tokens=max_tokens) for _ in range(requests)]
        wall = time.perf_counter() - t0
    ok = [r for r in results if r.ok]
    tokens = sum(r.n_out or 0 for r in ok)
    return {
        "ttft_ms": statistics.median(r.ttft_ms for r in ok),
        "tpot_ms": statistics.median(r.tpot_ms for r in ok),
        "tps_request_time": tokens / sum(r.t_last - r.t_send for r in ok),
        "tps_wall": tokens / wall,
    }


async def vllm_arm(base_url: str, requests: int, max_tokens: int) -> dict[str, float]:
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        async_request_openai_chat_completions,
    )

    connector = aiohttp.TCPConnector(limit=1, keepalive_timeout=60, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        def one(n: int) -> RequestFuncInput:
            return RequestFuncInput(prompt=PROMPT, api_url=f"{base_url}/v1/chat/completions", prompt_len=8,
                                    output_len=n, model="m", ignore_eos=True)

        await async_request_openai_chat_completions(one(4), session)  # warm-up, as --num-warmups 1
        t0 = time.perf_counter()
        outs = [await async_request_openai_chat_completions(one(max_tokens), session) for _ in range(requests)]
        wall = time.perf_counter() - t0
    ok = [o for o in outs if o.success]
    tokens = sum(o.output_tokens or 0 for o in ok)
    return {
        "ttft_ms": statistics.median(o.ttft * 1000 for o in ok),
        "tpot_ms": statistics.median((o.latency - o.ttft) / (o.output_tokens - 1) * 1000 for o in ok),
        "tps_request_time": tokens / sum(o.latency for o in ok),
        "tps_wall": tokens / wall,
    }


def have_vllm_client() -> bool:
    try:
        import aiohttp  # noqa: F401
        from vllm.benchmarks.lib.endpoint_request_func import (
            async_request_openai_chat_completions,  # noqa: F401
        )
    except ImportError:
        return False
    return True


@contextmanager
def timing_server(ttft_ms: float, itl_ms: float) -> Iterator[str]:
    """The stand-in SSE server (SERVER) in a process of its own for the block; yields its base URL."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(ttft_ms / 1000), str(itl_ms / 1000)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20, help="requests per arm per round")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--ttft-ms", type=float, default=12.0, help="server delay before the first chunk")
    parser.add_argument("--itl-ms", type=float, default=2.0, help="server delay between chunks")
    parser.add_argument("--out", help="write the report as JSON here too")
    args = parser.parse_args()
    with timing_server(args.ttft_ms, args.itl_ms) as base_url:
        arms = {"autotune": autotune_arm}
        if have_vllm_client():
            arms["vllm_bench_aiohttp"] = vllm_arm
        else:
            print("vLLM's client code is not importable: only the autotune arm runs", file=sys.stderr)
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
        for r in range(args.rounds):
            order = list(arms.items()) if r % 2 == 0 else list(reversed(arms.items()))
            for name, arm in order:
                rounds[name].append(asyncio.run(arm(base_url, args.requests, args.max_tokens)))
        stats = httpx.get(f"{base_url}/stats").json()
    measured = [s for s in stats if s["n"] == args.max_tokens]
    server_ttft = statistics.median((s["t_first"] - s["t_in"]) * 1000 for s in measured)
    server_tpot = statistics.median((s["t_last"] - s["t_first"]) / (s["n"] - 1) * 1000 for s in measured)
    keys = ("ttft_ms", "tpot_ms", "tps_request_time", "tps_wall")
    medians = {name: {k: statistics.median(x[k] for x in rs) for k in keys} for name, rs in rounds.items()}
    report = {
        "conditions": vars(args),
        "server": {"ttft_ms": server_ttft, "tpot_ms": server_tpot},
        "medians": medians,
        "client_added_ttft_ms": {name: m["ttft_ms"] - server_ttft for name, m in medians.items()},
        "rounds": rounds,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
