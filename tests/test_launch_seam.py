"""One launch seam (issue 51): every engine autotune starts is started by trial/launch.py's
`engine_up`, and read by its one failure path. Before, seven places started an engine through four
implementations; the isolation's smoke launch had its own start-up fallback without the trial's
memory and stall handling."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autotune"
SEAM = PACKAGE / "trial" / "launch.py"
#: where engines may be started from: the launchers themselves, and the seam
ALLOWED = (PACKAGE / "launchers", SEAM)


def launcher_classes() -> set[str]:
    from autotune.launchers import LAUNCHERS

    return {target.partition(":")[2] for target in LAUNCHERS.values()}


def engine_starts(path: Path) -> list[str]:
    """Each place in `path` that starts an engine, or could: `open_server`, a launcher class by
    name, or `launcher_class(...).open(...)`."""
    names = {"open_server", *launcher_classes()}
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name) and node.id in names:
            found.append(f"{node.id} (line {node.lineno})")
        elif isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f"{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom):
            found += [f"import of {a.name} (line {node.lineno})" for a in node.names if a.name in names]
        elif (isinstance(node, ast.Attribute) and node.attr == "open" and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Name) and node.value.func.id == "launcher_class"):
            found.append(f"launcher_class(...).open (line {node.lineno})")
    return found


def test_only_the_seam_starts_an_engine():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        if any(path == allowed or allowed in path.parents for allowed in ALLOWED):
            continue
        wrong += [f"{path.relative_to(ROOT)}: {where}" for where in engine_starts(path)]
    assert not wrong, "start engines through autotune/trial/launch.py (engine_up, or a Launch):\n" + "\n".join(wrong)
    assert engine_starts(SEAM), "the seam no longer opens a server: update ALLOWED"


def test_the_check_catches_an_engine_started_elsewhere(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text(
        "from autotune.launchers import open_server, launcher_class\n"
        "from autotune.launchers.process import ServerProcess\n"
        "server = launcher_class('process').open(launch, log, options)\n"
    )
    shown = " ".join(engine_starts(bad))
    assert "open_server" in shown and "ServerProcess" in shown and "launcher_class(...).open" in shown


def test_a_smoke_launch_reads_a_stalled_engine_as_a_trial_does(tmp_path, monkeypatch):
    """An engine whose health answers and which never generates: a trial calls it engine_stalled
    (autotune/trial/liveness.py), an environment failure. The isolation's smoke launch read the same
    start as the log's nccl_liveness line (a start-up time-out where the log names nothing), so
    the reduced candidates of a stalled trial never reproduced its failure."""
    from autotune.launchers import base as launcher_base
    from autotune.trial.launch import LaunchRequest, Purpose
    from autotune.trial.run import EngineLaunch
    from test_engine_stalled import candidate, plan_for

    monkeypatch.setattr(launcher_base, "MIN_GENERATION_S", 2.0)
    plan = plan_for(tmp_path, monkeypatch, startup=15)
    request = LaunchRequest(plan.ctx, candidate(plan, 0), 0, Purpose.SMOKE, log_name="isolate-000-1")
    result = EngineLaunch()(request)
    assert result.status == "failed" and result.failure is not None
    assert result.failure.failure_class == "engine_stalled", result.failure
    assert result.log_path is not None and Path(result.log_path).name == "isolate-000-1.log"


@pytest.mark.parametrize("purpose", ["smoke", "trial", "confirmation"])
def test_a_launch_its_launcher_cannot_run_fails_as_data_whatever_its_purpose(tmp_path, purpose):
    """A candidate whose launch the launcher refuses is a failed launch (configuration_error),
    nothing started, for a smoke launch as for a trial or a relaunch."""
    pytest.importorskip("llama_cpp")
    from autotune.space.candidates import baseline
    from autotune.trial.launch import LaunchRequest, Purpose
    from autotune.trial.run import EngineLaunch
    from stand_in import TINY_LLAMACPP, stand_in_plan

    plan = stand_in_plan(tmp_path, TINY_LLAMACPP, accuracy=False)
    ctx = plan.ctx.model_copy(update={"launcher": "ray"})  # a one-node Ray launch: llama.cpp has no Ray executor
    result = EngineLaunch()(LaunchRequest(ctx, baseline(plan.space), 0, Purpose(purpose)))
    assert result.status == "failed" and result.failure.failure_class == "configuration_error", result
    assert result.launch is None
