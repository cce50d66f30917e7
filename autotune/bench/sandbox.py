"""Run model-written Python against test expressions in a separate, limited interpreter.

The child is `python -I -B` in a fresh temporary directory (its cwd) with a minimal environment.
Before the model's code runs, a prelude in the child
  * sets resource limits (CPU seconds, address space, file size, open files, no core dumps). It
    does this itself rather than in `preexec_fn`, which is unsafe when the parent has threads
    (asyncio executors, httpx); the effect is the same because the prelude runs first;
  * installs an audit hook that refuses network and process creation (imports of socket, ssl,
    ctypes, subprocess, multiprocessing; socket/subprocess/os.system/exec/fork/kill events) and any
    file write, removal or rename outside the temporary directory.
The parent kills the child's process group at the wall-clock limit; a child the CPU limit stops
first is reported as timed out too. This guards against the accidents a small model's code can
cause (loops, memory blow-ups, stray writes); it is not a boundary against deliberately hostile
code.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MEMORY_LIMIT_BYTES = 1 << 30
FILE_SIZE_LIMIT_BYTES = 1 << 20
OPEN_FILES_LIMIT = 64
OUTPUT_TAIL_CHARS = 2000
CPU_LIMIT_EXIT_STATUSES = (-signal.SIGXCPU, -signal.SIGKILL)  # soft limit, then hard limit

_PRELUDE = r"""
import json, os, resource, sys

def _limit(which, value, grace=0):
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
        grace = min(grace, hard - value)
    resource.setrlimit(which, (value, value + grace))

# SIGXCPU at the soft limit, SIGKILL one second later should the code catch SIGXCPU.
_limit(resource.RLIMIT_CPU, __CPU_S__, grace=1)
_limit(resource.RLIMIT_AS, __MEMORY__)
_limit(resource.RLIMIT_FSIZE, __FSIZE__)
_limit(resource.RLIMIT_NOFILE, __NOFILE__)
_limit(resource.RLIMIT_CORE, 0)

_ROOT = os.path.realpath(os.getcwd())
_BLOCKED_MODULES = {"socket", "_socket", "ssl", "_ssl", "ctypes", "_ctypes", "subprocess",
                    "_posixsubprocess", "multiprocessing", "_multiprocessing", "urllib", "http"}
_BLOCKED_EVENTS = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "os.fork", "os.forkpty", "os.kill", "os.killpg", "ctypes.", "shutil.rmtree", "pty.")
_PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                "os.symlink", "os.link", "os.truncate", "os.utime", "os.chdir", "shutil.copyfile",
                "shutil.move", "shutil.copytree", "shutil.chown"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def _inside(path):
    if isinstance(path, int):
        return True
    real = os.path.realpath(os.fsdecode(path))
    return real == _ROOT or real.startswith(_ROOT + os.sep)

def _guard(event, args):
    if event == "import" and args[0].split(".")[0] in _BLOCKED_MODULES:
        raise ImportError("sandbox: import of " + args[0] + " is not allowed")
    if event.startswith(_BLOCKED_EVENTS):
        raise PermissionError("sandbox: " + event + " is not allowed")
    if event == "open":
        path, mode, flags = args
        writing = bool(mode and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
        if writing and path is not None and not _inside(path):
            raise PermissionError("sandbox: writing outside the sandbox directory is not allowed")
    elif event in _PATH_EVENTS:
        for path in args[:2]:
            if isinstance(path, (str, bytes, os.PathLike)) and not _inside(path):
                raise PermissionError("sandbox: " + event + " outside the sandbox directory")

sys.addaudithook(_guard)
"""

_RUNNER = r"""
_namespace = {"__name__": "solution"}
exec(compile(__SOURCE__, "solution.py", "exec"), _namespace)
_passed = 0
_failures = []
for _test in __TESTS__:
    try:
        if eval(_test, _namespace) is True:
            _passed += 1
        else:
            _failures.append(_test)
    except Exception as exc:
        _failures.append(_test + " raised " + type(exc).__name__ + ": " + str(exc)[:200])
print(__NONCE__, json.dumps({"passed": _passed, "failures": _failures[:5]}), flush=True)
"""


@dataclass(frozen=True)
class SandboxResult:
    passed: int
    total: int
    timed_out: bool = False
    error: str = ""
    failures: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total and not self.timed_out


def _script(source: str, tests: list[str], cpu_s: int, nonce: str) -> str:
    prelude = (
        _PRELUDE.replace("__CPU_S__", str(cpu_s))
        .replace("__MEMORY__", str(MEMORY_LIMIT_BYTES))
        .replace("__FSIZE__", str(FILE_SIZE_LIMIT_BYTES))
        .replace("__NOFILE__", str(OPEN_FILES_LIMIT))
    )
    runner = (
        _RUNNER.replace("__SOURCE__", repr(source))
        .replace("__TESTS__", repr(list(tests)))
        .replace("__NONCE__", repr(nonce))
    )
    return prelude + runner


def run_python_tests(source: str, tests: list[str], timeout_s: float = 5.0) -> SandboxResult:
    """Define `source` in a sandboxed interpreter, then evaluate each test expression there.

    A test passes when it evaluates to True. `timeout_s` is the wall-clock limit (the CPU limit is
    the same, rounded up). Returns the counts; never raises for anything the code does.
    """
    nonce = secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="autotune-sandbox-") as tmp:
        work = Path(tmp)
        cpu_s = max(1, math.ceil(timeout_s))
        (work / "main.py").write_text(_script(source, tests, cpu_s, nonce))
        env = {"PATH": os.defpath, "HOME": tmp, "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}
        with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-B", "main.py"],
                cwd=tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            timed_out = False
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)
        stdout = (work / "stdout.txt").read_text(errors="replace")
        stderr = (work / "stderr.txt").read_text(errors="replace")[-OUTPUT_TAIL_CHARS:]
    if timed_out:
        return SandboxResult(0, len(tests), timed_out=True, error=f"killed after {timeout_s:g} s")
    if proc.returncode in CPU_LIMIT_EXIT_STATUSES:  # the kernel's CPU limit struck before the wall clock
        return SandboxResult(0, len(tests), timed_out=True, error=f"CPU limit of {cpu_s} s reached")
    for line in reversed(stdout.splitlines()):
        if line.startswith(nonce + " "):
            report = json.loads(line[len(nonce) + 1 :])
            return SandboxResult(report["passed"], len(tests), failures=tuple(report["failures"]))
    reason = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit status {proc.returncode}"
    return SandboxResult(0, len(tests), error=reason)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # it may exit between poll and kill
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
