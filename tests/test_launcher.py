"""The process launcher: own process group, health wait, crash and hang handling, cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.errors import EngineStartError
from autotune.launchers.process import ServerProcess
from autotune.launchers.base import free_port
from autotune.launchers.watchdog import Watchdog, WatchdogLimits
from autotune.models import LaunchSpec, NodeLaunch


def launch(argv: list[str], port: int, health: str = "/") -> LaunchSpec:
    return LaunchSpec(engine="test", nodes=[NodeLaunch(argv=argv)], port=port, health_path=health)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); read its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


SERVER_WITH_CHILD = textwrap.dedent(
    """
    import http.server, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[2], "w").write(str(child.pid))
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
    """
)


def test_healthy_server_and_whole_group_stopped(tmp_path):
    port = free_port()
    script = tmp_path / "srv.py"
    script.write_text(SERVER_WITH_CHILD)
    pidfile = tmp_path / "child.pid"
    server = ServerProcess(launch([sys.executable, str(script), str(port), str(pidfile)], port), tmp_path / "log.txt", startup_timeout_s=20)
    with server:
        assert server.alive()
        assert server.startup_s is not None and server.startup_s < 20
        leader = server.proc.pid
        child = int(pidfile.read_text())
        assert os.getpgid(child) == leader  # the grandchild is in the engine's group
    deadline = time.monotonic() + 10
    while (alive(leader) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(leader) and not alive(child)


def test_crash_before_healthy_fails_fast_with_log(tmp_path):
    port = free_port()
    code = "import sys; print('ValueError: No valid attention backend found for cuda', file=sys.stderr); sys.exit(3)"
    server = ServerProcess(launch([sys.executable, "-c", code], port), tmp_path / "log.txt", startup_timeout_s=60)
    t0 = time.monotonic()
    with pytest.raises(EngineStartError) as info:
        with server:
            pass
    assert time.monotonic() - t0 < 15
    assert "exited with code 3" in str(info.value)
    assert "No valid attention backend" in info.value.log_tail
    assert not info.value.timed_out


def test_hang_is_a_timeout_and_is_killed(tmp_path):
    port = free_port()
    server = ServerProcess(launch([sys.executable, "-c", "import time; time.sleep(600)"], port), tmp_path / "log.txt", startup_timeout_s=2)
    with pytest.raises(EngineStartError) as info:
        with server:
            pass
    assert info.value.timed_out
    assert server.proc is None


def test_engine_dies_with_autotune(tmp_path):
    """SIGKILL of the parent takes the engine down too (PR_SET_PDEATHSIG)."""
    port = free_port()
    pidfile = tmp_path / "engine.pid"
    parent = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from autotune.launchers.process import ServerProcess
        from autotune.models import LaunchSpec, NodeLaunch
        spec = LaunchSpec(engine="t", nodes=[NodeLaunch(argv=[sys.executable, "-m", "http.server", "{port}", "--bind", "127.0.0.1"])], port={port}, health_path="/")
        s = ServerProcess(spec, Path(r"{tmp_path / 'log.txt'}"), startup_timeout_s=20)
        s.__enter__()
        Path(r"{pidfile}").write_text(str(s.proc.pid))
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=Path(__file__).resolve().parent.parent)
    deadline = time.monotonic() + 20
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    engine_pid = int(pidfile.read_text())
    assert alive(engine_pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while alive(engine_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(engine_pid)


def test_watchdog_trips_on_low_memory(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100000000 kB\nMemAvailable: 500000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    dog = Watchdog(proc.pid, WatchdogLimits(min_available_gb=1.0, interval_s=0.05), meminfo_path=str(meminfo))
    assert dog.check() == "host MemAvailable 0.5 GB < 1.0 GB floor"
    dog.start()
    proc.wait(timeout=10)
    assert dog.tripped and proc.returncode == -signal.SIGKILL


def test_watchdog_swap_growth(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable: 90000000 kB\nSwapTotal: 8000000 kB\nSwapFree: 8000000 kB\n")
    dog = Watchdog(1, WatchdogLimits(max_swap_growth_gb=2.0), meminfo_path=str(meminfo))
    assert dog.check() is None
    meminfo.write_text("MemAvailable: 90000000 kB\nSwapTotal: 8000000 kB\nSwapFree: 4000000 kB\n")
    assert "swap use grew 4.1 GB" in dog.check()
