"""run_probe_subprocess with real child processes: a result, a crash, a hang."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from autotune.errors import ProbeError
from autotune.models import ProbeResult
from autotune.probe.runner import run_probe_subprocess

PRINTS_RESULT = """
from autotune.models import ProbeResult
from autotune.probe.programs import emit
print("some chatter first")
emit(ProbeResult(feature="probe-own-name", status="works", evidence="42 == 42", params={"k": 1}))
"""

CRASHES = """
import sys
print("llama_init_from_model: quantized V cache requires flash_attn to be enabled", file=sys.stderr)
raise ValueError("Failed to create llama_context")
"""

# the child starts a grandchild in the same group, records both pids, then hangs
HANGS = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
time.sleep(600)
"""


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def alive(pid: int) -> bool:
    """True while the pid exists and is not a zombie (read from /proc, no psutil)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state != "Z"


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def test_result_line_is_parsed_and_feature_params_duration_set() -> None:
    result = run_probe_subprocess(python(PRINTS_RESULT), "feature-from-caller", timeout_s=60, params={"k": 2})
    assert isinstance(result, ProbeResult)
    assert result.status == "works"
    assert result.evidence == "42 == 42"
    assert result.feature == "feature-from-caller"
    assert result.params == {"k": 2}
    assert result.duration_s > 0


def test_probe_params_kept_when_caller_gives_none() -> None:
    result = run_probe_subprocess(python(PRINTS_RESULT), "f", timeout_s=60)
    assert result.params == {"k": 1}


def test_crash_without_result_is_classified_from_stderr() -> None:
    result = run_probe_subprocess(python(CRASHES), "type_v=q4_0", timeout_s=60)
    assert result.status == "fails"
    assert result.signature == "kv_quant_needs_flash_attn"
    assert "quantized V cache requires flash_attn" in result.evidence
    assert "exit code 1" in result.evidence


def test_unknown_crash_keeps_stderr_tail() -> None:
    result = run_probe_subprocess(python("import sys; sys.stderr.write('mystery\\n'); sys.exit(3)"), "f", timeout_s=60)
    assert result.status == "fails"
    assert result.signature == "unclassified_crash"
    assert "exit code 3" in result.evidence and "mystery" in result.evidence


def test_killed_by_signal_is_reported() -> None:
    result = run_probe_subprocess(python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"), "f", timeout_s=60)
    assert result.status == "fails"
    assert "SIGSEGV" in result.evidence


def test_hang_is_killed_with_its_whole_group(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    started = time.monotonic()
    result = run_probe_subprocess(python(HANGS, str(pids_file)), "hang", timeout_s=3)
    elapsed = time.monotonic() - started
    assert result.status == "fails"
    assert result.signature == "probe_timeout"
    assert "timed out after 3 s" in result.evidence
    assert elapsed < 3 + 10, "killed within the timeout plus the kill grace"
    leader, grandchild = map(int, pids_file.read_text().split())
    deadline = time.monotonic() + 5
    while (alive(leader) or alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.1)  # the grandchild is reaped by init once orphaned
    assert not alive(leader) and not alive(grandchild)
    assert group_members(leader) == []


def test_env_reaches_the_probe() -> None:
    code = "import os; from autotune.models import ProbeResult; from autotune.probe.programs import emit; " \
           "emit(ProbeResult(feature='f', status='works', evidence=os.environ['PROBE_X']))"
    result = run_probe_subprocess(python(code), "f", timeout_s=60, env={"PROBE_X": "seen"})
    assert result.evidence == "seen"


def test_unstartable_probe_raises_probe_error() -> None:
    with pytest.raises(ProbeError, match="cannot start probe"):
        run_probe_subprocess(["/nonexistent/probe-binary"], "f", timeout_s=5)


def test_runs_from_any_working_directory(tmp_path: Path) -> None:
    assert os.getcwd() == str(tmp_path)  # conftest puts every test in its own folder
    result = run_probe_subprocess([sys.executable, "-m", "autotune.probe.programs.kernels", "bf16_golden"], "kernel:bf16_golden", 60)
    assert result.feature == "kernel:bf16_golden"
    assert result.status in {"works", "unsupported", "fails"}


def test_kernel_probes_without_a_gpu_are_unsupported_and_quick() -> None:
    from autotune.hardware.device import detect
    from autotune.commands.probe import run_kernel_probes
    from autotune.probe.programs.kernels import KERNEL_PROBES

    if detect().gpus:
        pytest.skip("this host has a CUDA GPU: the kernel probes run for real there")
    started = time.monotonic()
    results = run_kernel_probes(timeout_s=60)
    assert [r.feature for r in results] == [f"kernel:{name}" for name in KERNEL_PROBES]
    for result in results:
        assert result.status == "unsupported", result
        assert "no CUDA GPU" in result.evidence
    assert time.monotonic() - started < 60


def test_unknown_kernel_probe_is_bad_input() -> None:
    from autotune.errors import ConfigError
    from autotune.commands.probe import run_kernel_probes

    with pytest.raises(ConfigError, match="unknown kernel probe"):
        run_kernel_probes(names=["fp16_magic"])
