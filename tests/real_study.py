"""One tiny real study per test session: llama.cpp + Gemma 3 270M through `autotune search` in a
subprocess (its stdout piped, as a person's `| tee` would), with accuracy gates and a
confirmation round, after `autotune probe --no-engine` (device and kernel probes). The report, optuna-dashboard, sqlite-utils, show and export tests read it.

A small space (n_threads x type_v: 4 candidates) and a short workload keep it to a few minutes
on 2 CPU cores. type_v=q8_0 without flash attention fails for real, so the study holds a failed
trial and a learned prune as well as trials that ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from gemma_space import GEMMA_ON_LLAMACPP

ROOT = Path(__file__).resolve().parent.parent
STUDY = "views"

SPACE = """
name: views-test
""" + GEMMA_ON_LLAMACPP + """fixed: {{chat_format: gemma, seed: 1234, n_ctx: 2048, flash_attn: false}}
knobs:
  - {{name: n_threads, values: [1, 2], default: 1}}
  - {{name: type_v, values: [f16, q8_0], default: f16}}
workload:
  decode_max_tokens: 24
  prompt_sets: [prose, structured]
  prompts_per_set: 1
  repeats: 2
  warmup_requests: 1
  prefill_tokens: [256]
  prefill_repeats: 1
  startup_timeout_s: 120
gates:
  needle: {{lengths_tokens: [600], depths: [0.5], timeout_s: 120}}
  qeval: {{tasks: 6, timeout_s: 240}}
"""


@dataclass(frozen=True)
class RealStudy:
    db: Path
    study: str
    space: Path
    alias: str
    search_output: str


def run_autotune(args: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess[str]:
    """`python -m autotune ARGS` with stdout piped (no terminal: rich renders 80 columns)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], cwd=cwd, env=env, capture_output=True, text=True, **kwargs
    )


def real_study(tmp_path_factory: pytest.TempPathFactory, gguf: Path) -> RealStudy:
    """Runs the study once per session (the folder under the session's base temp dir is the cache)."""
    root = tmp_path_factory.getbasetemp() / "real-study"
    done = root / "search-output.txt"
    if done.exists():
        alias = (root / "alias").read_text()
        return RealStudy(root / "runs.db", STUDY, root / "space.yaml", alias, done.read_text())
    root.mkdir(parents=True, exist_ok=True)
    alias = f"views-{uuid.uuid4().hex[:8]}"
    (root / "alias").write_text(alias)
    space = root / "space.yaml"
    space.write_text(SPACE.format(alias=alias, model=gguf))
    # the host's device and kernel probes (no engine launches: a few seconds) fill the report's matrix
    probe = run_autotune(["probe", "--space", str(space), "--db", "runs.db", "--no-engine"], root, timeout=300)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    args = ["search", "--space", str(space), "--db", "runs.db", "--study", STUDY, "--trials", "4", "--confirm-rounds", "1"]
    out = run_autotune(args, root, timeout=1200)
    assert out.returncode == 0, out.stdout + out.stderr
    done.write_text(out.stdout)
    return RealStudy(root / "runs.db", STUDY, space, alias, out.stdout)
