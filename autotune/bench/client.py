"""Async OpenAI-compatible streaming client (httpx), timing every request on perf_counter: what its
times and counts mean is defined in docs/metrics.md. A failing request becomes a RequestResult
with ok=False: one bad request never ends a run."""

from __future__ import annotations

import json
import re
import time
from typing import Any, Protocol

import httpx

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
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Any = time.perf_counter,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tokenize_path = tokenize_path
        self.seed = seed
        self._clock = clock
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            transport=transport,
            # no pool limit: a wave or capacity level of N streams keeps N requests in flight; a
            # capped pool would queue the rest inside the client and count that wait as their TTFT
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> OpenAIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def count_tokens(self, text: str) -> int:
        """Token count of `text` by the engine's own tokenizer (vLLM /tokenize, llama.cpp /extras/tokenize)."""
        body = {"model": self.model, "prompt": text, "input": text, "add_special_tokens": False}
        response = await self._http.post(self.tokenize_path, json=body)
        response.raise_for_status()
        data = response.json()
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
        t_first: float | None = None
        t_last: float | None = None
        n_chunks = 0
        pieces: list[str] = []
        usage: dict[str, Any] | None = None
        finish: str | None = None
        try:
            async with self._http.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    detail = (await response.aread()).decode(errors="replace")[:500]
                    return RequestResult(ok=False, error=f"HTTP {response.status_code}: {detail}", t_send=t_send)
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        # read on to the end of the body: leaving early closes the connection, and
                        # every next request would pay a new TCP connect inside its TTFT
                        continue
                    event = json.loads(payload)
                    if event.get("usage"):
                        usage = event["usage"]
                    for choice in event.get("choices") or []:
                        delta = choice.get("delta") or {}
                        text = (
                            delta.get("content")
                            or delta.get("reasoning_content")
                            or delta.get("reasoning")
                            or choice.get("text")
                        )
                        if text:
                            now = self._clock()
                            if t_first is None:
                                t_first = now
                            t_last = now
                            n_chunks += 1
                            pieces.append(text)
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            timed_out = isinstance(exc, httpx.TimeoutException)
            return RequestResult(ok=False, error=f"{type(exc).__name__}: {exc}", t_send=t_send, timed_out=timed_out)
        text = "".join(pieces)
        if t_first is None:
            return RequestResult(ok=False, error="no chunk carried generated text", t_send=t_send, text=text)
        n_in = usage.get("prompt_tokens") if usage else None
        n_out = usage.get("completion_tokens") if usage else None
        if n_out is None:
            try:
                n_out = await self.count_tokens(text)
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                return RequestResult(ok=False, error=f"no token count: {exc}", t_send=t_send, text=text)
        return RequestResult(
            ok=True,
            t_send=t_send,
            t_first=t_first,
            t_last=t_last,
            n_in=n_in,
            n_out=n_out,
            n_chunks=n_chunks,
            text=text,
            finish_reason=finish,
        )
