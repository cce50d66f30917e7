"""Async OpenAI-compatible streaming client (aiohttp), timing every request on perf_counter: what its
times and counts mean is defined in docs/metrics.md. A failing request becomes a RequestResult
with ok=False: one bad request never ends a run.

aiohttp, not httpx: one event loop reads every stream of a wave or capacity level, and httpx's pure
Python HTTP path cost 150-370 us of CPU per streamed chunk against aiohttp's 33-44 us
(benchmarks/client_concurrency.py); at 64 streams of 7 ms tokens the loop fell behind and measured
itself."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any, Protocol

import aiohttp

from autotune.models import RequestResult

Messages = list[dict[str, str]]
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def without_thinking(text: str) -> str:
    """A reasoning model's answer without its <think> block (an unclosed one runs to the end)."""
    return _THINK.sub("", text)


class ChatClient(Protocol):
    """What the measurement code needs from an engine endpoint."""

    async def chat(self, messages: Messages, max_tokens: int, **extra: Any) -> RequestResult: ...

    async def complete(self, prompt: str, max_tokens: int, **extra: Any) -> RequestResult: ...

    async def count_tokens(self, text: str) -> int: ...


class OpenAIClient:
    """Talks to one server: /v1/chat/completions (streamed) plus the engine's tokenize endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        tokenize_path: str = "/tokenize",
        timeout_s: float = 180.0,
        seed: int | None = 1234,
        clock: Any = time.perf_counter,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tokenize_path = tokenize_path
        self.seed = seed
        self._clock = clock
        # timeout_s bounds the wait for each next byte, not the whole stream
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        """The session, opened on first use inside the running event loop (aiohttp binds it there).
        No connection limit: a wave or capacity level of N streams keeps N requests at the server; a
        capped pool would queue the rest inside the client and count that wait as their TTFT."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> OpenAIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def count_tokens(self, text: str) -> int:
        """Token count of `text` by the engine's own tokenizer (vLLM /tokenize, llama.cpp /extras/tokenize)."""
        body = {"model": self.model, "prompt": text, "input": text, "add_special_tokens": False}
        async with self._http().post(self.base_url + self.tokenize_path, json=body) as response:
            response.raise_for_status()
            data = await response.json(content_type=None)
        if "count" in data:
            return int(data["count"])
        return len(data["tokens"])

    def _body(self, max_tokens: int, extra: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.seed is not None:
            body["seed"] = self.seed
        body.update(extra)
        return body

    async def chat(self, messages: Messages, max_tokens: int, **extra: Any) -> RequestResult:
        """A streamed /v1/chat/completions request (the model's chat template applies)."""
        return await self._stream("/v1/chat/completions", {"messages": messages, **self._body(max_tokens, extra)})

    async def complete(self, prompt: str, max_tokens: int, **extra: Any) -> RequestResult:
        """A streamed /v1/completions request: the raw prompt, no chat template (base models)."""
        return await self._stream("/v1/completions", {"prompt": prompt, **self._body(max_tokens, extra)})

    async def _stream(self, path: str, body: dict[str, Any]) -> RequestResult:
        t_send = self._clock()
        reply = _Reply(self._clock)
        try:
            async with self._http().post(self.base_url + path, json=body) as response:
                if response.status != 200:
                    detail = (await response.read()).decode(errors="replace")[:500]
                    return RequestResult(ok=False, error=f"HTTP {response.status}: {detail}", t_send=t_send)
                # read to the end of the body, past [DONE]: leaving early closes the connection, and
                # every next request would pay a new TCP connect inside its TTFT
                buffer = b""
                async for data in response.content.iter_any():
                    *lines, buffer = (buffer + data).split(b"\n")
                    for line in lines:
                        reply.read(line)
                reply.read(buffer)
        except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError) as exc:
            timed_out = isinstance(exc, asyncio.TimeoutError)
            return RequestResult(ok=False, error=f"{type(exc).__name__}: {exc}", t_send=t_send, timed_out=timed_out)
        text = "".join(reply.pieces)
        if reply.t_first is None:
            return RequestResult(ok=False, error="no chunk carried generated text", t_send=t_send, text=text)
        usage = reply.usage
        n_in = usage.get("prompt_tokens") if usage else None
        n_out = usage.get("completion_tokens") if usage else None
        if n_out is None:
            try:
                n_out = await self.count_tokens(text)
            except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, ValueError) as exc:
                return RequestResult(ok=False, error=f"no token count: {exc}", t_send=t_send, text=text)
        return RequestResult(
            ok=True,
            t_send=t_send,
            t_first=reply.t_first,
            t_last=reply.t_last,
            n_in=n_in,
            n_out=n_out,
            n_chunks=reply.n_chunks,
            text=text,
            finish_reason=reply.finish,
        )


class _Reply:
    """What one streamed reply said so far, read an SSE line at a time; a chunk carrying text is
    timed when it is read."""

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.n_chunks = 0
        self.pieces: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.finish: str | None = None

    def read(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return
        event = json.loads(payload)
        if event.get("usage"):
            self.usage = event["usage"]
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or choice.get("text")
            if text:
                now = self._clock()
                if self.t_first is None:
                    self.t_first = now
                self.t_last = now
                self.n_chunks += 1
                self.pieces.append(text)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
