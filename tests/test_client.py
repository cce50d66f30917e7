"""The streaming client on scripted SSE streams (served over a real local socket) and a scripted
clock: the metric identities."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable

import pytest

from autotune.bench.client import OpenAIClient
from fakes.scripted_http import Handler, Reply


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


def run(client: OpenAIClient, call):
    """`call(client)` on a fresh event loop, the client's session closed after it."""

    async def go():
        async with client:
            return await call(client)

    return asyncio.run(go())


def scripted(body: bytes, tokens: list[int] | None = None, status: int = 200) -> Handler:
    def handler(path: str, request: dict) -> Reply:
        if path == "/v1/chat/completions":
            return Reply(status, body)
        if path == "/extras/tokenize":
            return Reply(200, json.dumps({"tokens": tokens or []}).encode(), "application/json")
        return Reply(404)

    return handler


@pytest.fixture
def make_client(serve):
    def make(body: bytes, clock: Clock, tokens: list[int] | None = None, status: int = 200) -> OpenAIClient:
        return OpenAIClient(serve(scripted(body, tokens, status)), "m", tokenize_path="/extras/tokenize", clock=clock)

    return make


def chat(max_tokens: int, messages: list | None = None):
    return lambda client: client.chat(messages or [], max_tokens=max_tokens)


def test_usage_count_wins_over_chunk_count(make_client):
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
    result = run(make_client(body, clock), chat(8, [{"role": "user", "content": "x"}]))
    assert result.ok
    assert result.n_out == 7 and result.n_in == 11 and result.n_chunks == 3
    assert result.ttft_ms == pytest.approx(500.0)
    assert result.decode_tps == pytest.approx(6 / 0.5)  # (n_out - 1) / (t_last - t_first)
    assert result.tpot_ms == pytest.approx(1000 * 0.5 / 6)
    assert result.text == "Hello big world"
    assert result.finish_reason == "length"


def test_role_only_chunk_does_not_start_ttft(make_client):
    body = sse({"choices": [{"delta": {"role": "assistant"}}]}, chunk("a"), chunk("b"), "[DONE]")
    clock = Clock([0.0, 2.0, 3.0])
    result = run(make_client(body, clock, tokens=[5, 6]), chat(4))
    assert result.ttft_ms == pytest.approx(2000.0)


def test_without_usage_tokens_come_from_the_tokenizer_not_chunks(make_client):
    body = sse(chunk("one two"), chunk(" three"), "[DONE]")
    clock = Clock([0.0, 1.0, 2.0])
    result = run(make_client(body, clock, tokens=[1, 2, 3, 4, 5]), chat(8))
    assert result.n_out == 5
    assert result.decode_tps == pytest.approx(4.0)


def test_stream_without_text_is_a_failed_request(make_client):
    body = sse(chunk(usage={"prompt_tokens": 3, "completion_tokens": 0}), "[DONE]")
    result = run(make_client(body, Clock([0.0])), chat(4))
    assert not result.ok and "no chunk" in (result.error or "")


def test_http_error_is_recorded_not_raised(make_client):
    result = run(make_client(b"bad request", Clock([0.0]), status=400), chat(4))
    assert not result.ok and result.error.startswith("HTTP 400")


def test_connection_error_is_recorded_not_raised():
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    result = run(OpenAIClient(f"http://127.0.0.1:{port}", "m", clock=Clock([0.0])), chat(4))
    assert not result.ok and "ConnectorError" in result.error and not result.timed_out


def test_complete_streams_text_from_the_completions_endpoint(serve):
    seen = {}

    def handler(path: str, request: dict) -> Reply:
        seen["path"] = path
        seen["body"] = request
        return Reply(200, sse({"choices": [{"text": " 42"}]}, {"choices": [{"text": "\n"}]},
                              chunk(usage={"prompt_tokens": 9, "completion_tokens": 2}), "[DONE]"))

    client = OpenAIClient(serve(handler), "m", clock=Clock([0.0, 0.1, 0.3]))
    result = run(client, lambda c: c.complete("Question: 40 + 2?\nAnswer:", max_tokens=4, stop=["\nQuestion:"]))
    assert seen["path"] == "/v1/completions"
    assert seen["body"]["prompt"].endswith("Answer:") and seen["body"]["stop"] == ["\nQuestion:"]
    assert seen["body"]["temperature"] == 0.0 and seen["body"]["stream"] is True
    assert result.ok and result.text == " 42\n" and result.n_out == 2 and result.n_in == 9


def test_requests_reuse_one_connection_so_ttft_holds_no_connect():
    """A real socket server that counts accepted connections and ends each SSE body with a separate
    write after [DONE]: the client must read to the end, so three requests share one connection."""
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
        results = asyncio.run(three())
    finally:
        listener.close()
    assert all(r.ok and r.n_out == 1 for r in results)
    assert len(accepted) == 1


def raw_server(reply: Callable[[socket.socket], None]) -> tuple[socket.socket, str]:
    """A socket server that reads one request per connection and hands the socket to `reply`."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(65536)
                reply(conn)

    threading.Thread(target=serve, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_an_event_split_across_reads_is_read_whole():
    """The network cuts a stream anywhere: an SSE line arrives in two pieces, 50 ms apart."""
    import time

    body = sse(chunk("Hello"), chunk(" world", finish="stop"), chunk(usage={"prompt_tokens": 4, "completion_tokens": 2}), "[DONE]")
    cut = body.index(b"world") - 3

    def reply(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body))
        conn.sendall(body[:cut])
        time.sleep(0.05)
        conn.sendall(body[cut:])

    listener, url = raw_server(reply)
    try:
        result = run(OpenAIClient(url, "m", clock=Clock([0.0, 0.1, 0.2])), chat(4))
    finally:
        listener.close()
    assert result.ok and result.text == "Hello world" and result.n_chunks == 2 and result.n_out == 2
    assert result.finish_reason == "stop"


def test_a_stream_that_stops_sending_times_out_as_such():
    """No byte within timeout_s after the first chunk: a failed request marked timed_out (what the
    stall guard reads), not an exception."""
    import time

    def reply(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        head = sse(chunk("Hello"))
        conn.sendall(b"%x\r\n%s\r\n" % (len(head), head))
        time.sleep(2.0)

    listener, url = raw_server(reply)
    try:
        result = run(OpenAIClient(url, "m", timeout_s=0.5, clock=Clock([0.0, 0.1])), chat(4))
    finally:
        listener.close()
    assert not result.ok and result.timed_out, result
