"""FAKE, hand-written: an imitation of the Docker Engine HTTP API for tests. Not a Docker engine:
nothing runs.

The docker launcher runs against the real local daemon in CI (tests/test_launcher_docker_daemon.py,
the contract suite, tests/test_docker_study.py); this fake stays for what that daemon, on a host
without GPUs or RDMA, cannot show: the exact GPU device requests and RDMA devices sent, a daemon
that refuses to create a container, two nodes holding different builds of one image. It answers
the endpoints the Docker SDK (docker-py 7) calls, with bodies shaped like the
Docker Engine API v1.45 reference (version, image inspect, container create/inspect/start/logs/
list/kill/remove, exec create/start/inspect), keeps the containers it was asked to make in memory,
and records every request so a test can assert the exact container config that was sent.

What a "container" does is scripted by the test: `on_start(container)` runs when one starts and
`on_exec(exec)` when an exec starts; they write log lines, exit, or start a real local HTTP server
(host networking means a container's port is the host's port).
"""

from __future__ import annotations

import json
import re
import secrets
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

API_VERSION = "1.45"
_VERSIONED = re.compile(r"^/v\d+\.\d+(/.*)$")
STDOUT = 1


def frame(data: bytes, stream: int = STDOUT) -> bytes:
    """One frame of Docker's multiplexed stream: 1 byte stream id, 3 zero bytes, 4 bytes big-endian size."""
    return struct.pack(">BxxxL", stream, len(data)) + data


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


@dataclass
class FakeExec:
    id: str
    container: FakeContainer
    cmd: list[str]
    env: list[str]
    running: bool = False
    exit_code: int | None = None
    output: bytearray = field(default_factory=bytearray)
    changed: threading.Condition = field(default_factory=threading.Condition)
    on_stop: list[Callable[[], None]] = field(default_factory=list)

    def write(self, text: str) -> None:
        with self.changed:
            self.output += text.encode()
            self.changed.notify_all()

    def finish(self, code: int) -> None:
        with self.changed:
            if self.running or self.exit_code is None:
                self.running, self.exit_code = False, code
            self.changed.notify_all()
        hooks, self.on_stop = self.on_stop, []
        for hook in hooks:
            hook()


@dataclass
class FakeContainer:
    id: str
    name: str
    image_id: str
    body: dict[str, Any]
    created: str
    status: str = "created"
    exit_code: int = 0
    pid: int = 0
    log: bytearray = field(default_factory=bytearray)
    execs: list[FakeExec] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        return self.body.get("Labels") or {}

    @property
    def argv(self) -> list[str]:
        return list(self.body.get("Entrypoint") or []) + list(self.body.get("Cmd") or [])

    @property
    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.body.get("Env") or [])

    def write(self, text: str) -> None:
        self.log += text.encode()

    def exit(self, code: int) -> None:
        if self.status == "running":
            self.status, self.exit_code, self.pid = "exited", code, 0
        for ex in self.execs:
            if ex.running:
                ex.finish(137)

    def inspect(self) -> dict[str, Any]:
        body = self.body
        return {
            "Id": self.id,
            "Created": self.created,
            "Path": self.argv[0] if self.argv else "",
            "Args": self.argv[1:],
            "State": {
                "Status": self.status,
                "Running": self.status == "running",
                "Paused": False,
                "Restarting": False,
                "OOMKilled": False,
                "Dead": False,
                "Pid": self.pid,
                "ExitCode": self.exit_code,
                "Error": "",
                "StartedAt": self.created,
                "FinishedAt": "0001-01-01T00:00:00Z",
            },
            "Image": self.image_id,
            "Name": "/" + self.name,
            "RestartCount": 0,
            "Driver": "overlay2",
            "Platform": "linux",
            "HostConfig": body.get("HostConfig") or {},
            "Config": {
                "Hostname": "fake",
                "Tty": bool(body.get("Tty")),
                "Env": body.get("Env") or [],
                "Cmd": body.get("Cmd"),
                "Entrypoint": body.get("Entrypoint"),
                "Image": body.get("Image"),
                "Labels": self.labels,
            },
            "NetworkSettings": {"Networks": {"host": {"NetworkID": "fakehostnet"}}},
            "Mounts": [],
        }

    def summary(self) -> dict[str, Any]:
        return {
            "Id": self.id,
            "Names": ["/" + self.name],
            "Image": self.body.get("Image"),
            "ImageID": self.image_id,
            "Command": " ".join(self.argv),
            "Created": 1_700_000_000,
            "State": self.status,
            "Status": "Up 1 second" if self.status == "running" else f"Exited ({self.exit_code})",
            "Ports": [],
            "Labels": self.labels,
            "HostConfig": {"NetworkMode": (self.body.get("HostConfig") or {}).get("NetworkMode", "default")},
        }


class FakeDockerEngine:
    """A fake daemon on 127.0.0.1:<random port>; `base_url` is what DockerClient takes."""

    def __init__(
        self,
        images: dict[str, str] | None = None,
        on_start: Callable[[FakeContainer], None] | None = None,
        on_exec: Callable[[FakeExec], None] | None = None,
        name: str = "fake",
    ) -> None:
        self.images = dict(images or {})
        self.on_start = on_start or (lambda c: None)
        self.on_exec = on_exec or (lambda e: e.finish(0))
        self.name = name
        self.requests: list[Recorded] = []
        self.containers: dict[str, FakeContainer] = {}
        self.execs: dict[str, FakeExec] = {}
        self.lock = threading.RLock()
        self._pids = iter(range(4000, 10**6))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"fake-docker-{name}", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"tcp://{host}:{port}"

    def __enter__(self) -> FakeDockerEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for container in list(self.containers.values()):
            container.exit(137)
        self._server.shutdown()
        self._server.server_close()

    # -------------------------------------------------------------- what tests read

    def calls(self, method: str, pattern: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and re.fullmatch(pattern, r.path)]

    def created_bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.calls("POST", "/containers/create")]

    # -------------------------------------------------------------- routing

    def _find(self, ref: str) -> FakeContainer | None:
        with self.lock:
            for c in self.containers.values():
                if c.id == ref or c.name == ref or (len(ref) >= 12 and c.id.startswith(ref)):
                    return c
        return None

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any, request) -> None:
        m = _VERSIONED.match(path)
        path = m.group(1) if m else path
        self.requests.append(Recorded(method, path, query, body))
        reply = request.reply
        if method in ("GET", "HEAD") and path == "/_ping":
            return reply(200, "OK", content_type="text/plain")
        if method == "GET" and path == "/version":
            return reply(200, {
                "Platform": {"Name": "Fake Docker Engine (tests)"},
                "Version": "28.2.2", "ApiVersion": API_VERSION, "MinAPIVersion": "1.24",
                "GitCommit": "fake", "GoVersion": "go1.24", "Os": "linux", "Arch": "arm64",
                "KernelVersion": "6.11.0-fake", "BuildTime": "2026-01-01T00:00:00.000000000+00:00",
            })
        if method == "GET" and path.startswith("/images/") and path.endswith("/json"):
            name = unquote(path[len("/images/"):-len("/json")])
            image_id = self.images.get(name)
            if image_id is None:
                return reply(404, {"message": f"No such image: {name}"})
            return reply(200, {"Id": image_id, "RepoTags": [name], "RepoDigests": [], "Os": "linux",
                               "Architecture": "arm64", "Size": 1, "Config": {}})
        if method == "POST" and path == "/containers/create":
            return self._create(query, body, reply)
        if method == "GET" and path == "/containers/json":
            return self._list(query, reply)
        m = re.fullmatch(r"/containers/([^/]+)(/.*)?", path)
        if m:
            container = self._find(unquote(m.group(1)))
            if container is None:
                return reply(404, {"message": f"No such container: {m.group(1)}"})
            return self._container_op(method, m.group(2) or "", container, query, body, request)
        m = re.fullmatch(r"/exec/([^/]+)/(start|json)", path)
        if m:
            ex = self.execs.get(m.group(1))
            if ex is None:
                return reply(404, {"message": f"No such exec instance: {m.group(1)}"})
            if m.group(2) == "json":
                return reply(200, {
                    "ID": ex.id, "Running": ex.running, "ExitCode": ex.exit_code, "Pid": 0,
                    "ContainerID": ex.container.id, "OpenStdin": False, "OpenStdout": True, "OpenStderr": True,
                    "ProcessConfig": {"entrypoint": ex.cmd[0], "arguments": ex.cmd[1:], "tty": False,
                                      "privileged": False, "user": ""},
                })
            return self._exec_start(ex, body or {}, request)
        return reply(404, {"message": f"page not found: {method} {path}"})

    def _create(self, query, body, reply) -> None:
        name = (query.get("name") or [""])[0] or secrets.token_hex(4)
        image_id = self.images.get(body.get("Image", ""))
        if image_id is None:
            return reply(404, {"message": f"No such image: {body.get('Image')}"})
        with self.lock:
            if self._find(name):
                return reply(409, {"message": f'Conflict. The container name "/{name}" is already in use by container '
                                              f'"{self._find(name).id}". You have to remove (or rename) that container '
                                              "to be able to reuse that name."})
            cid = secrets.token_hex(32)
            self.containers[cid] = FakeContainer(
                id=cid, name=name, image_id=image_id, body=body,
                created=time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime()),
            )
        return reply(201, {"Id": cid, "Warnings": []})

    def _list(self, query, reply) -> None:
        show_all = (query.get("all") or ["0"])[0] in ("1", "true", "True")
        filters = json.loads((query.get("filters") or ["{}"])[0])
        wanted = filters.get("label", [])
        if isinstance(wanted, dict):  # the API also accepts {"k=v": true}
            wanted = [k for k, v in wanted.items() if v]
        rows = []
        with self.lock:
            for c in self.containers.values():
                if not show_all and c.status != "running":
                    continue
                if all(_label_matches(c.labels, w) for w in wanted):
                    rows.append(c.summary())
        return reply(200, rows)

    def _container_op(self, method, op, container, query, body, request) -> None:
        reply = request.reply
        if method == "GET" and op == "/json":
            return reply(200, container.inspect())
        if method == "POST" and op == "/start":
            if container.status == "running":
                return reply(304, None)
            container.status, container.pid = "running", next(self._pids)
            self.on_start(container)
            return reply(204, None)
        if method == "POST" and op in ("/kill", "/stop"):
            if container.status != "running":
                return reply(409, {"message": f"Container {container.id} is not running"})
            container.exit(137 if op == "/kill" else 143)
            return reply(204, None)
        if method == "POST" and op == "/wait":
            return reply(200, {"StatusCode": container.exit_code, "Error": None})
        if method == "GET" and op == "/logs":
            data = bytes(container.log)
            tail = (query.get("tail") or ["all"])[0]
            if tail != "all":
                data = b"".join(data.splitlines(keepends=True)[-int(tail):]) if int(tail) > 0 else b""
            payload = b"".join(frame(line) for line in data.splitlines(keepends=True))
            return reply(200, payload, content_type="application/vnd.docker.multiplexed-stream")
        if method == "DELETE" and op == "":
            force = (query.get("force") or ["0"])[0] in ("1", "true", "True")
            if container.status == "running" and not force:
                return reply(409, {"message": f"cannot remove container \"/{container.name}\": container is running: "
                                              "stop the container before removing or force remove"})
            container.exit(137)
            with self.lock:
                self.containers.pop(container.id, None)
            return reply(204, None)
        if method == "POST" and op == "/exec":
            if container.status != "running":
                return reply(409, {"message": f"container {container.id} is not running"})
            ex = FakeExec(id=secrets.token_hex(32), container=container, cmd=list(body.get("Cmd") or []),
                          env=list(body.get("Env") or []))
            self.execs[ex.id] = ex
            container.execs.append(ex)
            return reply(201, {"Id": ex.id})
        return reply(404, {"message": f"page not found: {method} /containers/{{id}}{op}"})

    def _exec_start(self, ex: FakeExec, body: dict, request) -> None:
        """Hijacked connection (101 UPGRADED, then raw multiplexed frames until the exec ends)."""
        if ex.running or ex.exit_code is not None:
            return request.reply(409, {"message": "exec has already been started"})
        ex.running = True
        if body.get("Detach"):
            self.on_exec(ex)
            return request.reply(200, None)
        request.send_response(101, "UPGRADED")
        request.send_header("Content-Type", "application/vnd.docker.multiplexed-stream")
        request.send_header("Connection", "Upgrade")
        request.send_header("Upgrade", "tcp")
        request.end_headers()
        request.wfile.flush()
        # A real daemon answers the upgrade before the process prints; the SDK reads the frames
        # from the raw socket, so they must not arrive in the same read as the headers.
        time.sleep(0.05)
        threading.Thread(target=self.on_exec, args=(ex,), daemon=True).start()
        sent = 0
        try:
            while True:
                with ex.changed:
                    ex.changed.wait_for(lambda: len(ex.output) > sent or not ex.running, timeout=1.0)
                    chunk, finished = bytes(ex.output[sent:]), not ex.running
                if chunk:
                    request.wfile.write(frame(chunk))
                    request.wfile.flush()
                    sent += len(chunk)
                if finished and sent >= len(ex.output):
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        request.close_connection = True

    def _handler(self):
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def reply(self, status: int, body: Any, content_type: str = "application/json") -> None:
                if isinstance(body, bytes):
                    data = body
                elif body is None:
                    data = b""
                elif isinstance(body, str):
                    data = body.encode()
                else:
                    data = json.dumps(body).encode()
                self.send_response(status)
                if data or status not in (204, 304):
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Api-Version", API_VERSION)
                self.end_headers()
                if data:
                    self.wfile.write(data)

            def _dispatch(self, method: str) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw and "json" in (self.headers.get("Content-Type") or "") else None
                engine.handle(method, parts.path, parse_qs(parts.query), body, self)

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_HEAD(self) -> None:
                self._dispatch("HEAD")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def do_DELETE(self) -> None:
                self._dispatch("DELETE")

        return Handler


def _label_matches(labels: dict[str, str], wanted: str) -> bool:
    key, sep, value = wanted.partition("=")
    return key in labels and (not sep or labels[key] == value)
