"""Recipe export: the winning (or a chosen) trial as YAML, and launch commands rendered for people.

A recipe says what really ran: the exact argv/env per node, what the engine reported it selected,
every number with the condition it was measured under, accuracy results, and provenance.
A plan-only recipe is marked `kind: predicted` and holds only predicted numbers.
"""

from __future__ import annotations

import shlex
import socket
import sys
from pathlib import Path

import yaml

from autotune import __version__
from autotune.errors import ConfigError
from autotune.model_shapes import DUMMY_ACCURACY, dummy_weights
from autotune.models import (
    Candidate,
    LaunchSpec,
    NodeLaunch,
    PlanEstimate,
    Provenance,
    Recipe,
    RecipeNumber,
    RecipeVerdict,
    SearchSpace,
    TrialResult,
    utc_now,
)

PORTABLE_PYTHON = "python3"


#: the port a recipe's commands serve on; a trial ran on a random free port, which means nothing later
RECIPE_PORT = 8000
PORT_NOTE = f"the commands serve on port {RECIPE_PORT} (a stated default, not the port the trial used): change --port to move it"


def _with_port(argv: list[str], old: int, new: int) -> list[str]:
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--port" and i + 1 < len(out) and out[i + 1] == str(old):
            out[i + 1] = str(new)
        elif arg == f"--port={old}":
            out[i] = f"--port={new}"
    return out


def portable_launch(launch: LaunchSpec) -> LaunchSpec:
    """The same launch with this machine's interpreter path replaced by `python3` and the trial's
    random port by RECIPE_PORT."""
    nodes = [
        NodeLaunch(
            node=n.node,
            role=n.role,
            argv=_with_port([PORTABLE_PYTHON if a == sys.executable else a for a in n.argv], launch.port, RECIPE_PORT),
            env=n.env,
        )
        for n in launch.nodes
    ]
    return launch.model_copy(update={"nodes": nodes, "port": RECIPE_PORT})


def shell_lines(launch: LaunchSpec) -> list[str]:
    """One copy-pasteable line per node: env assignments then the argv, shell-quoted."""
    lines = []
    for node in launch.nodes:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(node.env.items()))
        cmd = shlex.join(node.argv)
        prefix = f"# node {node.node} ({node.role})\n" if len(launch.nodes) > 1 else ""
        lines.append(prefix + (f"{env} {cmd}" if env else cmd))
    return lines


def _numbers(trial: TrialResult) -> list[RecipeNumber]:
    return [
        RecipeNumber(
            name=m.name,
            value=m.median,
            unit=m.unit,
            condition=m.condition,
            spread=f"MAD {m.mad:g} over {len(m.samples)} samples" if len(m.samples) > 1 else None,
        )
        for m in trial.measurements
    ]


def _accuracy(trial: TrialResult, baseline: TrialResult | None, accuracy_on: bool = True) -> list[str]:
    lines = [] if accuracy_on else ["unchecked: the study ran with --no-accuracy (throughput only)"]
    if trial.needle:
        lines.append(trial.needle.summary())
    if trial.qeval:
        line = trial.qeval.summary()
        if baseline and baseline.qeval and baseline.number != trial.number:
            line += f" (baseline trial {baseline.number}: {baseline.qeval.correct} of {baseline.qeval.total})"
        lines.append(line)
    lines += [f"gate {g.gate}: {g.status.upper() if g.status != 'pass' else 'pass'} ({g.detail})" for g in trial.gates]
    return lines


def recipe_from_trial(
    space: SearchSpace,
    trial: TrialResult,
    baseline: TrialResult | None,
    hardware: str,
    nodes: int,
    db_path: str | None = None,
    verdict: RecipeVerdict | None = None,
    accuracy_on: bool = True,
) -> Recipe:
    if trial.launch is None:
        raise ValueError(f"trial {trial.number} has no launch to export")
    base_numbers = (
        {m.name: m.median for m in baseline.measurements} if baseline and baseline.number != trial.number else {}
    )
    return Recipe(
        name=f"{space.name} / study {trial.study} / trial {trial.number}",
        kind="measured",
        engine=space.engine,
        model=space.model.name,
        params=trial.candidate.params,
        launch=portable_launch(trial.launch),
        selected=trial.selected,
        numbers=_numbers(trial),
        accuracy=DUMMY_ACCURACY if dummy_weights(space) else _accuracy(trial, baseline, accuracy_on),
        baseline=base_numbers,
        verdict=verdict,
        provenance=Provenance(
            study=trial.study,
            trial=trial.number,
            date=trial.started_at,
            host=socket.gethostname(),
            autotune_version=__version__,
            engine_version=trial.engine_version,
            hardware=hardware,
            nodes=nodes,
            db=db_path,
        ),
    )


def recipe_from_plan(
    space: SearchSpace,
    candidate: Candidate,
    estimate: PlanEstimate,
    launch: LaunchSpec,
    hardware: str,
    nodes: int,
) -> Recipe:
    """A recipe for a candidate nobody launched: every number is a prediction and says so."""
    basis = "; ".join(estimate.assumptions[:3]) or "roofline"
    numbers = [
        RecipeNumber(
            name=f"predicted_{name}",
            value=round(value, 2),
            unit=unit,
            condition=f"PREDICTED by the planner, not measured: {what} on {hardware} x{nodes} ({basis})",
        )
        for name, value, unit, what in (
            ("decode_tps", estimate.decode_tps, "tok/s", "single-stream decode"),
            ("prefill_tps", estimate.prefill_tps, "tok/s", "prefill"),
            ("memory_gb_per_gpu", estimate.total_gb, "GB", "memory per GPU"),
        )
        if value is not None
    ]
    return Recipe(
        name=f"{space.name} (predicted, not measured)",
        kind="predicted",
        engine=space.engine,
        model=space.model.name,
        params=candidate.params,
        launch=portable_launch(launch),
        numbers=numbers,
        accuracy=["not measured: a predicted recipe has no accuracy results"]
        + (["node IPs 192.168.100.x are placeholders: put your boxes' addresses"] if nodes > 1 else []),
        provenance=Provenance(
            study="plan",
            trial=None,
            date=utc_now(),
            host=socket.gethostname(),
            autotune_version=__version__,
            engine_version=None,
            hardware=hardware,
            nodes=nodes,
        ),
    )


def to_yaml(recipe: Recipe) -> str:
    data = recipe.model_dump(mode="json")
    if data.get("verdict") is None:  # predicted recipes, and measured ones exported before verdicts existed
        data.pop("verdict", None)
    data["commands"] = shell_lines(recipe.launch)
    data["port"] = PORT_NOTE
    return yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)


def from_yaml(text: str) -> Recipe:
    data = yaml.safe_load(text)
    data.pop("commands", None)
    data.pop("port", None)
    return Recipe.model_validate(data)


def render_recipe(recipe: Recipe, output: Path | None) -> str:
    """The recipe as YAML, also written to `output` when one is given."""
    text = to_yaml(recipe)
    if output is not None:
        try:
            output.write_text(text)
        except OSError as exc:
            raise ConfigError(f"cannot write {output}: {exc.strerror}") from exc
    return text
