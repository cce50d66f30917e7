"""The streaming client on scripted SSE streams and a scripted clock: the metric identities."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from autotune.bench.client import OpenAIClient


class Clock:
    """Returns the next scripted time on every call."""

    def __init__(self, times: list[float]) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def sse(*events: dict | str) -> bytes:
    lines = []
    for event in events:
        payload = event if isinstance(event, str) else json.dumps(event)
        lines.append(f"data: {payload}\n\n")
    return "".join(lines).encode()


def chunk(text: str | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    choices = [] if text is None and finish is None else [{"delta": {"content": text} if text else {}, "finish_reason": finish}]
    event: dict = {"choices": choices}
    if usage:
        event["usage"] = usage
    return event


def run(client_coro):
    return asyncio.run(client_coro)


def make_client(body: bytes, clock: Clock, tokens: list[int] | None = None, status: int = 200) -> OpenAIClient:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            return httpx.Response(status, content=body, headers={"content-type": "text/event-stream"})
        if request.url.path == "/extras/tokenize":
            return httpx.Response(200, json={"tokens": tokens or []})
        return httpx.Response(404)

    return OpenAIClient(
        "http://engine", "m", tokenize_path="/extras/tokenize", transport=httpx.MockTransport(handler), clock=clock
    )


def test_usage_count_wins_over_chunk_count():
    # 3 chunks carry 7 tokens (speculative decoding bundles tokens); usage says 7.
    body = sse(
        {"choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]},
        chunk("Hello"),
        chunk(" big"),
        chunk(" world", finish="length"),
        chunk(usage={"prompt_tokens": 11, "completion_tokens": 7}),
        "[DONE]",
    )
    clock = Clock([10.0, 10.5, 10.7, 11.0])  # send, first, second, third chunk
    result = run(make_client(body, clock).chat([{"role": "user", "content": "x"}], max_tokens=8))
    assert result.ok
    assert result.n_out == 7 and result.n_in == 11 and result.n_chunks == 3
    assert result.ttft_ms == pytest.approx(500.0)
    assert result.decode_tps == pytest.approx(6 / 0.5)  # (n_out - 1) / (t_last - t_first)
    assert result.tpot_ms == pytest.approx(1000 * 0.5 / 6)
    assert result.text == "Hello big world"
    assert result.finish_reason == "length"


def test_role_only_chunk_does_not_start_ttft():
    body = sse({"choices": [{"delta": {"role": "assistant"}}]}, chunk("a"), chunk("b"), "[DONE]")
    clock = Clock([0.0, 2.0, 3.0])
    result = run(make_client(body, clock, tokens=[5, 6]).chat([], max_tokens=4))
    assert result.ttft_ms == pytest.approx(2000.0)


def test_without_usage_tokens_come_from_the_tokenizer_not_chunks():
    body = sse(chunk("one two"), chunk(" three"), "[DONE]")
    clock = Clock([0.0, 1.0, 2.0])
    result = run(make_client(body, clock, tokens=[1, 2, 3, 4, 5]).chat([], max_tokens=8))
    assert result.n_out == 5
    assert result.decode_tps == pytest.approx(4.0)


def test_stream_without_text_is_a_failed_request():
    body = sse(chunk(usage={"prompt_tokens": 3, "completion_tokens": 0}), "[DONE]")
    result = run(make_client(body, Clock([0.0])).chat([], max_tokens=4))
    assert not result.ok and "no chunk" in (result.error or "")


def test_http_error_is_recorded_not_raised():
    result = run(make_client(b"bad request", Clock([0.0]), status=400).chat([], max_tokens=4))
    assert not result.ok and result.error.startswith("HTTP 400")


def test_connection_error_is_recorded_not_raised():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    client = OpenAIClient("http://engine", "m", transport=httpx.MockTransport(handler), clock=Clock([0.0]))
    result = run(client.chat([], max_tokens=4))
    assert not result.ok and "ConnectError" in result.error


def test_complete_streams_text_from_the_completions_endpoint():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["path"] = request.url.path
        seen["body"] = json.loads(request.content)
        body = sse({"choices": [{"text": " 42"}]}, {"choices": [{"text": "\n"}]}, chunk(usage={"prompt_tokens": 9, "completion_tokens": 2}), "[DONE]")
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = OpenAIClient("http://engine", "m", transport=httpx.MockTransport(handler), clock=Clock([0.0, 0.1, 0.3]))
    result = run(client.complete("Question: 40 + 2?\nAnswer:", max_tokens=4, stop=["\nQuestion:"]))
    assert seen["path"] == "/v1/completions"
    assert seen["body"]["prompt"].endswith("Answer:") and seen["body"]["stop"] == ["\nQuestion:"]
    assert seen["body"]["temperature"] == 0.0 and seen["body"]["stream"] is True
    assert result.ok and result.text == " 42\n" and result.n_out == 2 and result.n_in == 9


def test_requests_reuse_one_connection_so_ttft_holds_no_connect():
    """A real socket server that counts accepted connections and ends each SSE body with a separate
    write after [DONE]: the client must read to the end, so three requests share one connection."""
    import socket
    import threading

    body_head = sse(chunk("hi"), chunk(usage={"completion_tokens": 1}), "[DONE]")
    accepted: list[int] = []

    def serve(listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            with conn:
                while True:
                    request = b""
                    while b"\r\n\r\n" not in request:
                        data = conn.recv(65536)
                        if not data:
                            break
                        request += data
                    if not data:
                        break
                    head, _, rest = request.partition(b"\r\n\r\n")
                    length = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                    conn.sendall(b"%x\r\n%s\r\n" % (len(body_head), body_head))
                    threading.Event().wait(0.05)  # the end of the body comes later, as over a real network
                    conn.sendall(b"0\r\n\r\n")

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    threading.Thread(target=serve, args=(listener,), daemon=True).start()

    async def three() -> list:
        async with OpenAIClient(f"http://127.0.0.1:{listener.getsockname()[1]}", "m") as client:
            return [await client.chat([{"role": "user", "content": "x"}], max_tokens=1) for _ in range(3)]

    try:
        results = run(three())
    finally:
        listener.close()
    assert all(r.ok and r.n_out == 1 for r in results)
    assert len(accepted) == 1
