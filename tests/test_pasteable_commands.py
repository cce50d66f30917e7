"""Logged and exported commands paste safely into a shell; recipes do not keep a trial's random port."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from autotune.errors import EngineStartError
from autotune.launchers.base import free_port
from autotune.launchers.process import ServerProcess
from autotune.models import Candidate, LaunchSpec, NodeLaunch, SearchSpace, TrialResult
from autotune.output.recipe import from_yaml, recipe_from_trial, shell_lines, to_yaml

RECIPE_PORT = 8000  # what recipes state instead of the trial's port

HOSTILE = ["$(touch pwned)", "a b", "it's", "`touch pwned2`", "; touch pwned3"]


def test_engine_log_first_line_pastes_as_the_same_argv(tmp_path):
    argv = [sys.executable, "-c", "import sys; print(sys.argv[1:])", *HOSTILE]
    launch = LaunchSpec(engine="x", port=free_port(), nodes=[NodeLaunch(argv=argv, env={"MY_VAR": "x y"})])
    server = ServerProcess(launch, tmp_path / "engine.log", startup_timeout_s=20)
    with pytest.raises(EngineStartError, match="exited"):
        with server:
            pass
    first = (tmp_path / "engine.log").read_text().splitlines()[0]
    assert first.startswith("$ ")
    line = first[2:]
    assert shlex.split(line) == ["MY_VAR=x y", *argv]
    pasted = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert pasted.returncode == 0, pasted.stderr
    assert pasted.stdout.strip() == repr(HOSTILE)
    assert not list(tmp_path.glob("pwned*"))  # nothing in the values ran


def trial_with_port(port: int) -> tuple[SearchSpace, TrialResult]:
    space = SearchSpace.model_validate(
        {"name": "t", "engine": "llamacpp", "model": {"name": "m", "path": "/models/m.gguf"},
         "knobs": [{"name": "n_threads", "values": [1, 2], "default": 1}]}
    )
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", "/models/m.gguf", "--host", "127.0.0.1",
            "--port", str(port), "--chat_format", "$(touch pwned)"]
    launch = LaunchSpec(engine="llamacpp", port=port, nodes=[NodeLaunch(argv=argv)])
    trial = TrialResult(study="s", number=1, candidate=Candidate(engine="llamacpp", params={"n_threads": 2}),
                        status="ok", launch=launch, objective=1.0, score=1.0, engine_version="0.3")
    return space, trial


def test_recipe_states_a_default_port_instead_of_the_trials_random_one():
    space, trial = trial_with_port(38325)
    recipe = recipe_from_trial(space, trial, None, "cpu", 1)
    argv = recipe.launch.nodes[0].argv
    assert argv[argv.index("--port") + 1] == str(RECIPE_PORT) and recipe.launch.port == RECIPE_PORT
    text = to_yaml(recipe)
    assert "38325" not in text
    assert f"port {RECIPE_PORT} (a stated default, not the port the trial used)" in text
    assert from_yaml(text) == recipe
    [line] = shell_lines(recipe.launch)
    assert "'$(touch pwned)'" in line and f"--port {RECIPE_PORT}" in line
