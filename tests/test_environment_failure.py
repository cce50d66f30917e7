"""A study whose every start dies for a cause no knob explains names it, exits 3, and a resume once
it is fixed starts clean: the real llama.cpp engine with Gemma 3 270M, made to die at start with
SIGSEGV by a sitecustomize on PYTHONPATH for the first sitting (as a native build faulted on an
Intel host with AMX, issue 47), healthy for the second."""

from __future__ import annotations

import uuid

import pytest

from autotune.cli import main
from autotune.engines.llamacpp import cpu_fault_fix
from autotune.models import FailureInfo
from autotune.store import Store
from gemma_space import GEMMA_ON_LLAMACPP, SHORT_WORKLOAD
from procs import engine_pids

SPACE = "name: env-test\n" + GEMMA_ON_LLAMACPP + """fixed: {{chat_format: gemma, seed: 1234, n_ctx: 1024}}
knobs:
  - {{name: n_threads, values: [1, 2], default: 1}}
  - {{name: n_batch, values: [512, 256], default: 512}}
""" + SHORT_WORKLOAD

#: kills the llama.cpp server with SIGSEGV as it starts, and no other Python process
SEGFAULT_AT_START = (
    "import os, signal, sys\n"
    "if 'llama_cpp.server' in sys.orig_argv:\n"
    "    os.kill(os.getpid(), signal.SIGSEGV)\n"
)


@pytest.mark.engine
def test_every_start_dying_exits_3_with_its_fix_and_the_resume_starts_clean(tmp_path, gemma_gguf, capsys,
                                                                             monkeypatch):
    alias = f"env-{uuid.uuid4().hex[:8]}"
    space = tmp_path / "env.yaml"
    space.write_text(SPACE.format(alias=alias, model=gemma_gguf))
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(space), "--db", str(db), "--study", "env", "--trials", "3", "--no-accuracy",
            "--confirm-rounds", "0", "--noise-relaunches", "0"]
    crash = tmp_path / "crash"
    crash.mkdir()
    (crash / "sitecustomize.py").write_text(SEGFAULT_AT_START)
    monkeypatch.setenv("PYTHONPATH", str(crash))
    assert main(args) == 3
    captured = capsys.readouterr()
    assert "no answer: every candidate failed the same way" in captured.err
    assert "exited with code -11" in captured.err and "scripts/install_llama_cpp.sh" in captured.err
    first = Store(db).trials("env")
    assert [t.status for t in first] == ["environment", "environment"] and first[0].number == 0
    assert not engine_pids(alias)

    monkeypatch.delenv("PYTHONPATH")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "retrying 2 candidate(s), the baseline first" in out
    trials = Store(db).trials("env")
    ok = [t for t in trials if t.status == "ok"]
    assert len(ok) == 3  # three launches measured in the second sitting: the dead starts did not count
    assert ok[0].candidate.params["n_threads"] == 1 and ok[0].candidate.params["n_batch"] == 512  # baseline first
    assert not engine_pids(alias)


def test_a_cpu_fault_names_the_portable_build_and_says_why_on_an_amx_host():
    crash = FailureInfo(failure_class="startup_crash",
                        message="engine exited with code -11 before the engine became healthy")
    native = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1"
    portable = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1"
    amx = frozenset({"avx2", "amx_tile", "amx_int8", "amx_bf16"})
    fix = cpu_fault_fix(crash, amx, native)
    assert fix is not None and "AMX kernels" in fix and "amx_bf16, amx_int8, amx_tile" in fix
    assert "bash scripts/install_llama_cpp.sh" in fix
    other = cpu_fault_fix(crash, frozenset({"avx2"}), portable)
    assert other is not None and "AMX" not in other and "bash scripts/install_llama_cpp.sh" in other
    illegal = FailureInfo(failure_class="unclassified_crash", message="unclassified_crash: Illegal instruction")
    assert cpu_fault_fix(illegal, frozenset(), "") is not None
    oom = FailureInfo(failure_class="oom", message="engine exited with code 1 before the engine became healthy")
    assert cpu_fault_fix(oom, amx, native) is None  # not a fault: nothing said about the build
