"""Run one probe in its own process group with a timeout; get one ProbeResult back.

A GPU fault poisons the CUDA context of the process that hit it, and a wedged kernel can hang
forever, so every probe runs in a fresh process. The probe prints its ProbeResult as one JSON line
(the last line on stdout, see `autotune.probe.programs.emit`). When it dies without one, its stderr is classified with the
signature table; when it outlives the timeout, the whole process group is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from autotune.errors import ProbeError
from autotune.models import ProbeResult, Scalar
from autotune.engines.signatures import PROBE_TIMEOUT_MARKER, UNCLASSIFIED, classify

_TAIL_LINES = 20
_KILL_GRACE_S = 2.0
#: the folder that holds autotune/: on PYTHONPATH and the working directory of probe programs
#: (autotune/probe/programs/), so that they run from a checkout that is not installed
PROBES_HOME = Path(__file__).resolve().parents[2]


def python_module_argv(module: str, *args: str) -> list[str]:
    """argv that runs `python -m module args...` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def probe_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus `env`, with the repo root on PYTHONPATH so that
    `python -m autotune.probe.programs...` works from any directory."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PROBES_HOME), full_env.get("PYTHONPATH", "")) if p
    )
    return full_env


def probe_names(module: str, timeout_s: float = 60.0) -> list[str]:
    """The probes a probe program offers (`python -m MODULE --list` prints them as JSON)."""
    try:
        out = subprocess.run(python_module_argv(module, "--list"), capture_output=True, text=True,
                             env=probe_env(), cwd=PROBES_HOME, stdin=subprocess.DEVNULL, timeout=timeout_s)
        names = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise ProbeError(f"cannot list the probes of {module}: {exc}") from exc
    return [str(name) for name in names]


def run_probe_subprocess(
    argv: list[str],
    feature: str,
    timeout_s: float,
    env: dict[str, str] | None = None,
    params: dict[str, Scalar] | None = None,
) -> ProbeResult:
    """Run `argv` as a probe and return what it found, as data.

    :param argv: the command (a list, never a shell string).
    :param feature: the feature name the result is filed under; it overrides the probe's own.
    :param timeout_s: wall-clock limit; past it the process group is killed (signature `probe_timeout`).
    :param env: extra environment on top of this process's; the repo root is put on PYTHONPATH
        so `python -m autotune.probe.programs...` works from any directory.
    :param params: knob values the result is about; when None the probe's own params are kept.
    :raises ProbeError: only when the probe cannot be started at all.
    """
    full_env = probe_env(env)
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=full_env,
            start_new_session=True,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise ProbeError(f"cannot start probe {argv[0]!r}: {exc.strerror or exc}") from exc

    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stdout, stderr = _kill_group(proc)
        tail = _tail(stderr, 5)
        evidence = f"{PROBE_TIMEOUT_MARKER} {timeout_s:g} s; process group killed"
        return ProbeResult(
            feature=feature,
            status="fails",
            evidence=evidence + (f"\nstderr tail:\n{tail}" if tail else ""),
            signature="probe_timeout",
            params=params or {},
            duration_s=round(time.perf_counter() - started, 3),
        )
    finally:
        # a probe's stray children (same group) must not outlive it
        _signal_group(proc.pid, signal.SIGKILL)
    duration = round(time.perf_counter() - started, 3)

    reported = _last_result(stdout)
    if reported is not None:
        update: dict[str, object] = {"feature": feature, "duration_s": duration}
        if params is not None:
            update["params"] = params
        if reported.status == "fails" and reported.signature is None:
            info = classify(reported.evidence + "\n" + stderr)
            update["signature"] = info.failure_class if info else UNCLASSIFIED
        return reported.model_copy(update=update)

    info = classify(stderr + "\n" + stdout)
    how = _exit_text(proc.returncode)
    if info is not None:
        evidence = "\n".join([info.message, *info.evidence, f"({how})"])
        signature = info.failure_class
    else:
        evidence = f"{how}, no result line; stderr tail:\n{_tail(stderr or stdout, _TAIL_LINES)}"
        signature = UNCLASSIFIED
    return ProbeResult(
        feature=feature,
        status="fails",
        evidence=evidence,
        signature=signature,
        params=params or {},
        duration_s=duration,
    )


def _kill_group(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM the group, then SIGKILL after a short grace; return what it printed."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        return proc.communicate(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
    try:
        return proc.communicate(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        # a process that left the group still holds the pipes: give up on its output
        proc.kill()
        proc.wait()
        return "", ""


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _last_result(stdout: str) -> ProbeResult | None:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line:
            continue
        if not line.startswith("{"):
            return None
        try:
            return ProbeResult.model_validate(json.loads(line))
        except ValueError:
            return None
    return None


def _exit_text(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _tail(text: str, n: int) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-n:])
