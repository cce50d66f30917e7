"""The stand-in vLLM (tests/fakes/vllm_site.py) takes a wide wave as vLLM's server does: every
connection of 64 streams opened at once is served. With http.server's listen backlog of 5, 179 of
320 such requests failed to connect (46 of 160 at 32 streams), which a capacity or concurrency test
reads as the engine's misses."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import httpx
from fakes.vllm_site import small_model_dir, write_fake_vllm
from procs import processes_mentioning

from autotune.launchers.base import free_port


def wave(url: str, streams: int) -> list[str]:
    """The errors of `streams` streamed completions sent at once (empty: all served)."""

    async def one(client: httpx.AsyncClient) -> str | None:
        try:
            body = {"model": "m", "prompt": "one two", "max_tokens": 8, "stream": True}
            async with client.stream("POST", f"{url}/v1/completions", json=body) as reply:
                reply.raise_for_status()
                async for _ in reply.aiter_bytes():
                    pass
        except httpx.HTTPError as exc:
            return type(exc).__name__
        return None

    async def all_of_them() -> list[str | None]:
        limits = httpx.Limits(max_connections=streams)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            return await asyncio.gather(*(one(client) for _ in range(streams)))

    return [e for e in asyncio.run(all_of_them()) if e]


def test_a_64_stream_wave_is_served_whole(tmp_path):
    site = write_fake_vllm(tmp_path / "site", "0.33.0")
    port = free_port()
    model = small_model_dir(tmp_path)
    server = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model),
         "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(site)}, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "the stand-in did not start"
            time.sleep(0.1)
        errors = [e for _ in range(3) for e in wave(url, 64)]
        assert errors == [], f"{len(errors)} of 192 requests failed: {sorted(set(errors))}"
    finally:
        server.terminate()
        server.wait(timeout=10)
    # as vLLM's API server, a SIGTERM stops its EngineCore too (only a SIGKILL orphans it)
    deadline = time.monotonic() + 10
    while processes_mentioning(f"VLLM::EngineCore {model}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(f"VLLM::EngineCore {model}") == []
