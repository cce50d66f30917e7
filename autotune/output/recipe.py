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
from pydantic import ValidationError

from autotune import __version__
from autotune.errors import ConfigError
from autotune.yaml_files import first_errors
from autotune.checkpoint.shapes import DUMMY_ACCURACY, dummy_weights
from autotune.output.energy import recipe_lines
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


def ran_version(trial: TrialResult) -> str | None:
    """The engine version the trial ran: the one its log states (a container's own), else the one
    installed where autotune ran."""
    logged = trial.resolved.engine_version if trial.resolved is not None else None
    return logged or trial.engine_version


def recipe_from_trial(
    space: SearchSpace,
    trial: TrialResult,
    baseline: TrialResult | None,
    hardware: str,
    nodes: int,
    db_path: str | None = None,
    verdict: RecipeVerdict | None = None,
    accuracy_on: bool = True,
    trials: list[TrialResult] | None = None,
) -> Recipe:
    """The recipe of a measured trial; `trials` (the study's) give the host's usual GPU clock its
    state is judged against."""
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
        resolved=trial.resolved,
        selected=trial.selected,
        numbers=_numbers(trial),
        acceptance_source=trial.acceptance_source,
        accuracy=DUMMY_ACCURACY if dummy_weights(space) else _accuracy(trial, baseline, accuracy_on),
        baseline=base_numbers,
        verdict=verdict,
        capacity=trial.capacity,
        energy=recipe_lines(trial, trials if trials is not None else [trial]),
        provenance=Provenance(
            study=trial.study,
            trial=trial.number,
            date=trial.started_at,
            host=socket.gethostname(),
            autotune_version=__version__,
            engine_version=ran_version(trial),
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


class _Inline(list[int]):
    """A list the recipe writes on one line (`cudagraph_capture_sizes: [1, 2, 4, ...]`)."""


class _RecipeDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, writing `_Inline` lists on one line."""


_RecipeDumper.add_representer(
    _Inline, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)
)


def to_yaml(recipe: Recipe) -> str:
    data = recipe.model_dump(mode="json")
    if data.get("verdict") is None:  # predicted recipes, and measured ones exported before verdicts existed
        data.pop("verdict", None)
    else:
        if (data["verdict"].get("confirmation") or {}).get("status") == data["verdict"]["status"]:
            del data["verdict"]["confirmation"]["status"]  # the recipe says it once, as verdict.status
        for key in ("vs_baseline", "tied_with", "unchecked_faster"):  # nothing to say: said by nothing
            if not data["verdict"].get(key):
                data["verdict"].pop(key, None)
    if data["launch"].get("ready") is None:  # launches stored before the generation check existed
        data["launch"].pop("ready", None)
    if data.get("acceptance_source") is None:  # no drafting, or trials stored before autotune said it
        data.pop("acceptance_source", None)
    if data.get("resolved") is None:  # predicted recipes, and trials stored before autotune read it
        data.pop("resolved", None)
    elif data["resolved"].get("cudagraph_capture_sizes") is not None:
        data["resolved"]["cudagraph_capture_sizes"] = _Inline(data["resolved"]["cudagraph_capture_sizes"])
    if data.get("capacity") is None:  # only a capacity_at_slo study's recipe has a search to carry
        data.pop("capacity", None)
    if not data.get("energy"):  # predicted recipes, and trials stored before autotune read energy
        data.pop("energy", None)
    if data.get("draft_schedule") is None:  # only a vLLM study that tunes draft_k has one to report
        data.pop("draft_schedule", None)
    data["commands"] = shell_lines(recipe.launch)
    data["port"] = PORT_NOTE
    return yaml.dump(data, Dumper=_RecipeDumper, sort_keys=False, width=100, allow_unicode=True)


def from_yaml(text: str) -> Recipe:
    """A recipe read back from its YAML; one that is not a recipe autotune would write (a launch
    that fakes speculative acceptance, a measured recipe with predictions) is bad input."""
    data = yaml.safe_load(text)
    data.pop("commands", None)
    data.pop("port", None)
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"not a recipe autotune can use: {first_errors(exc)}") from None


def render_recipe(recipe: Recipe, output: Path | None) -> str:
    """The recipe as YAML, also written to `output` when one is given."""
    text = to_yaml(recipe)
    if output is not None:
        try:
            output.write_text(text)
        except OSError as exc:
            raise ConfigError(f"cannot write {output}: {exc.strerror}") from exc
    return text


# ---------------------------------------------------------------------- runnable renderings


def _env_argv(node: NodeLaunch) -> list[str]:
    """`env K=V ... argv`: the node's environment and argv, as one command."""
    env = [f"{k}={v}" for k, v in sorted(node.env.items())]
    return (["env", *env] if env else []) + node.argv


WAIT_FOR_RAY_NODES = (
    "import sys, time, ray; ray.init(); n = int(sys.argv[1])\n"
    'while sum(x["Alive"] for x in ray.nodes()) < n: print("waiting for Ray nodes", flush=True); time.sleep(5)'
)


def shell_script(recipe: Recipe) -> str:
    """The recipe's launch as a POSIX sh script with exactly the YAML's argv and env. Several nodes:
    `sh script NODE` on each box; every entry of a node but its last runs in the background."""
    launch = recipe.launch
    nodes = sorted({n.node for n in launch.nodes})
    lines = [
        "#!/bin/sh",
        f"# {recipe.name}",
        f"# written by autotune {__version__} from the recipe ({recipe.kind}); argv and env are the recipe's own",
        f"# serves on port {launch.port}; ready when GET {launch.health_path} answers",
        "set -eu",
    ]

    def node_lines(node: int, indent: str) -> list[str]:
        entries = [n for n in launch.nodes if n.node == node]
        out = [f"{indent}# node {node}: {', '.join(e.role for e in entries)}"]
        for entry in entries[:-1]:
            out.append(f"{indent}{shlex.join(_env_argv(entry))} &")
        last = entries[-1]
        if last.role == "server" and any(e.role == "head" for e in entries):
            # the server starts once every node's raylet has joined the head
            waiter = NodeLaunch(node=node, role="server", argv=[PORTABLE_PYTHON, "-c", WAIT_FOR_RAY_NODES, str(len(nodes))], env=last.env)
            out.append(f"{indent}{shlex.join(_env_argv(waiter))}")
        out.append(f"{indent}exec {shlex.join(_env_argv(last))}")
        return out

    if len(nodes) == 1:
        lines += node_lines(nodes[0], "")
    else:
        lines += [f'node="${{1:?usage: sh $0 NODE (one of {" ".join(map(str, nodes))}; 0 is the head, start it first)}}"',
                  'case "$node" in']
        for node in nodes:
            lines += [f"  {node})", *node_lines(node, "    "), "    ;;"]
        lines += ['  *) echo "no node $node in this recipe" >&2; exit 2 ;;', "esac"]
    return "\n".join(lines) + "\n"


def model_dir_of(launch: LaunchSpec) -> str | None:
    """The folder holding the model file/dir named by `--model` (or vLLM's `serve MODEL`), if absolute."""
    for node in launch.nodes:
        argv = node.argv
        for i, arg in enumerate(argv[:-1]):
            if arg in ("--model", "serve") and argv[i + 1].startswith("/"):
                path = Path(argv[i + 1])
                return str(path.parent if path.suffix else path)
    return None


def docker_script(recipe: Recipe, commands: list[list[str]], image: str) -> str:
    """`docker run` (and `docker exec` for a server on a Ray head) lines, one per node entry, in order."""
    lines = [
        "#!/bin/sh",
        f"# {recipe.name}",
        f"# written by autotune {__version__}: the recipe's argv and env in image {image}, one container per node entry",
        "set -eu",
    ]
    nodes = len({n.node for n in recipe.launch.nodes})
    for entry, argv in zip(recipe.launch.nodes, commands):
        lines.append(f"# node {entry.node} ({entry.role})")
        if nodes > 1 and "exec" in argv[:3]:
            # a server exec'd in the Ray head starts once every node's raylet has joined
            container = argv.index(PORTABLE_PYTHON) - 1
            wait = [*argv[: argv.index("exec") + 1], argv[container], PORTABLE_PYTHON, "-c", WAIT_FOR_RAY_NODES, str(nodes)]
            lines.append(shlex.join(wait))
        lines.append(shlex.join(argv))
    return "\n".join(lines) + "\n"
