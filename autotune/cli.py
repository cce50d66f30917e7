"""The `autotune` command: parse, call one library function, print. Errors map to exit codes:
2 bad input, 3 environment or engine missing, 4 study owned by another process, 1 unexpected, 130
interrupted (README "Exit codes").
"""

from __future__ import annotations

import json
import os
import signal
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from autotune import __version__
from autotune.output import plan_text, progress, terminal
from autotune.errors import AutotuneError, ConfigError
from autotune.models import GpuHolder, SpaceObjective

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    help="Find the fastest accurate way to serve an LLM on given hardware.",
)
space_app = typer.Typer(no_args_is_help=True, help="Write search spaces (autotune space new).")
app.add_typer(space_app, name="space")
console = Console(soft_wrap=True)
errors = Console(stderr=True, soft_wrap=True)

DbOption = Annotated[Path, typer.Option("--db", help="runs.db path (created on first use)")]
SpaceOption = Annotated[
    str, typer.Option("--space", "-s", help="search space: a name in search_spaces/ or a YAML path")
]
ChosenSpaceOption = Annotated[
    Optional[str],
    typer.Option(
        "--space",
        "-s",
        help="search space: a name in search_spaces/ or a YAML path (default: the one shipped space made for "
        "--hardware/--nodes; with neither, llamacpp-gemma3-270m)",
    ),
]
StudyOption = Annotated[Optional[str], typer.Option("--study", help="study name (default: the newest study)")]
HardwareOption = Annotated[
    Optional[str], typer.Option("--hardware", help="hardware profile (spark, h200, ..., cpu) or auto")
]
NodesOption = Annotated[Optional[int], typer.Option("--nodes", min=1, help="number of boxes (Spark: one GPU each)")]
DEFAULT_DB = Path("runs.db")
_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


def duration_s(text: str, bare_unit: str, *, zero_ok: bool = False) -> float:
    """Seconds from a duration: "90m", "130s", "1.5h"; a bare number is in `bare_unit` (each time
    option's historic unit, so that scripts written before stay right). Zero is refused unless
    `zero_ok` (probe --budget 0: launch nothing, list what waits)."""
    raw = text.strip().lower()
    unit = raw[-1] if raw and raw[-1] in _UNITS_S else bare_unit
    number = raw[:-1] if raw and raw[-1] in _UNITS_S else raw
    try:
        value = float(number) * _UNITS_S[unit]
    except ValueError:
        raise ConfigError(f"{text!r} is not a duration: write it like 90m, 130s or 1.5h") from None
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"{text!r}: a duration must be above zero" if not zero_ok else f"{text!r}: a duration cannot be negative")
    return value


class Gates(str, Enum):
    """When a study runs its accuracy gates (needle, qeval): `--gates`, one option for one decision."""

    EVERY_TRIAL = "every-trial"
    AT_ONCE = "at-once"
    AT_END = "at-end"
    OFF = "off"


def _version(value: bool) -> None:
    if value:
        console.print(f"autotune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version")] = False,
) -> None:
    """Find the fastest accurate way to serve an LLM on given hardware."""


@app.command(short_help="Tune a search space: baseline, then pruned Optuna trials.")
def search(
    space: ChosenSpaceOption = None,
    model: Annotated[
        Optional[str], typer.Option("--model", rich_help_panel="What to tune", help="model file/dir, overrides the space's")
    ] = None,
    db: DbOption = DEFAULT_DB,
    study: Annotated[
        Optional[str],
        typer.Option("--study", rich_help_panel="What to tune", help="study name (default: <space>-<hardware>-x<nodes>)"),
    ] = None,
    trials: Annotated[
        int,
        typer.Option("--trials", "-n", rich_help_panel="What to tune", min=1,
                     help="engine launches in this study, baseline included"),
    ] = 10,
    hardware: HardwareOption = None,
    nodes: NodesOption = None,
    no_accuracy: Annotated[
        bool, typer.Option("--no-accuracy", rich_help_panel="Accuracy", help="throughput only: skip needle and qeval")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", rich_help_panel="Output",
                           help="print the launches a new study starts with (baseline, --try, the planner's first) "
                           "and what pruning drops; launch nothing")
    ] = False,
    all_candidates: Annotated[
        bool, typer.Option("--all-candidates", rich_help_panel="Output",
                           help="with --dry-run: every surviving candidate's launch")
    ] = False,
    logs: Annotated[
        Path, typer.Option("--logs", rich_help_panel="Output", help="folder for engine logs")
    ] = Path("autotune-logs"),
    seed: Annotated[int, typer.Option("--seed", rich_help_panel="What to tune", help="sampler seed")] = 0,
    tries: Annotated[
        Optional[list[str]],
        typer.Option("--try", rich_help_panel="What to tune", metavar="KNOB=VALUE[,...]",
                     help="a candidate to run right after the baseline (repeatable)"),
    ] = None,
    cluster: Annotated[
        Optional[Path], typer.Option("--cluster", rich_help_panel="Several boxes",
                                     help="YAML describing the boxes (Docker daemons, IPs, NICs)")
    ] = None,
    launcher: Annotated[
        Optional[str], typer.Option("--launcher", rich_help_panel="Several boxes",
                                    help="process, ray or docker (default: the space's)")
    ] = None,
    parallel: Annotated[
        Optional[int],
        typer.Option(
            "--parallel", rich_help_panel="Several boxes", min=1,
            help="trials in flight at once, each on the boxes its layout needs, leased through Ray so that no two "
            "share a box (default: as many as the boxes allow; 1 when every trial needs every box)",
        ),
    ] = None,
    boxes: Annotated[
        Optional[int],
        typer.Option(
            "--boxes", rich_help_panel="Several boxes", min=1,
            help="without --cluster: this many boxes on this host for trials side by side (each engine on this "
            "host at its own port; a CPU test bed); with --cluster the file's nodes are the boxes",
        ),
    ] = None,
    confirm_rounds: Annotated[
        int,
        typer.Option(
            "--confirm-rounds", rich_help_panel="Confirmation", min=0,
            help="re-launch best and baseline alternately this many rounds in all for the study (0: off; a verdict "
            "needs 2 or more); rounds of earlier sittings count, a resume runs only the missing ones",
        ),
    ] = 2,
    noise_relaunches: Annotated[
        int,
        typer.Option(
            "--noise-relaunches", rich_help_panel="Confirmation", min=0,
            help="relaunch the baseline until it has this many more launches than its trial, the confirmation's "
            "rounds counted, to measure the launch-to-launch noise (stored per host, engine and objective)",
        ),
    ] = 1,
    qeval_reference: Annotated[
        Optional[int],
        typer.Option(
            "--qeval-reference", rich_help_panel="Accuracy", min=0,
            help="trial whose qeval answers are the reference (default: trial 0, the baseline); "
            "use it when the baseline has no qeval result",
        ),
    ] = None,
    time_budget: Annotated[
        Optional[str],
        typer.Option(
            "--time-budget", metavar="DURATION", rich_help_panel="Time",
            help="wall time, like 90m, 1.5h or 600s (a bare number: minutes): no trial (or confirmation round) "
            "starts unless a typical one still fits (a round priced by what a relaunch repeats, not a whole trial)",
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", rich_help_panel="Output", help="if another autotune process runs this study, wait for it to finish")
    ] = False,
    gates: Annotated[
        Optional[Gates],
        typer.Option(
            "--gates", case_sensitive=False, rich_help_panel="Accuracy",
            help="when needle and qeval run: every-trial (also trials whose score cannot rank first); at-once (a "
            "trial that may rank first, in its own launch; the rest are dominated and skip them); at-end (a "
            "trial faster than the incumbent defers them to a relaunch of the best by score, walking down the "
            "ranking if they fail); off (throughput only, as --no-accuracy). Default: at-end for llama.cpp (a "
            "relaunch takes seconds), at-once for vLLM (a launch takes minutes)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Tune a search space: baseline first, then Optuna trials, pruned before launching.

    One process owns a study at a time: a second one on the same study is refused (exit 4) unless
    --wait. With several boxes, trials run side by side (--parallel), each on boxes of its own."""
    from autotune.commands import search as search_command
    from autotune.commands import setup

    if no_accuracy and gates not in (None, Gates.OFF):
        raise ConfigError(f"--no-accuracy runs no gates, --gates {gates.value} runs them: give one of the two")
    budget_s = None if time_budget is None else duration_s(time_budget, "m")
    plan = setup.prepare(
        space_name=_chosen_space(space, hardware, nodes),
        model_path=model,
        db_path=db,
        study=study,
        hardware=hardware,
        nodes=nodes,
        accuracy=not no_accuracy and gates is not Gates.OFF,
        logs_dir=logs,
        dry_run=dry_run,
        tries=tries,
        cluster_file=cluster,
        launcher=launcher,
        boxes=boxes,
        parallel=parallel,
        every_trial=gates is Gates.EVERY_TRIAL,
        gates_at_end=None if gates in (None, Gates.EVERY_TRIAL, Gates.OFF) else gates is Gates.AT_END,
    )
    for line in plan.choices.notes() if plan.choices else []:
        errors.print(f"note: {line}", markup=False, highlight=False)
    if dry_run:
        rows, first = setup.dry_run_rows(plan)
        plan_text.print_dry_run(console, plan, rows, first, every=all_candidates)
        return
    _note_holders(setup.others_on_gpus(plan.engine, cluster))
    if plan.ctx.nccl:
        from autotune.launchers.nccl import summary

        console.print(f"NCCL each node loads: {summary(plan.ctx.nccl)}", markup=False, highlight=False)
    reporter = progress.RichReporter(console, log_dir=logs / plan.study, objective=plan.space.objective)
    try:
        outcome = search_command.run(
            plan,
            trials=trials,
            seed=seed,
            confirm_rounds=confirm_rounds,
            noise_relaunches=noise_relaunches,
            qeval_reference=qeval_reference,
            time_budget_s=budget_s,
            reporter=reporter,
            wait_s=float("inf") if wait else None,
            on_wait=lambda owner: errors.print(f"waiting: study {plan.study!r} is in use by {owner.describe()}"),
            on_owned=lambda: reporter.study_planned(
                search_command.forecast(plan, trials, confirm_rounds, noise_relaunches)
            ),
        )
    finally:
        reporter.close()
    terminal.print_outcome(console, plan, outcome)
    problem = search_command.no_answer(outcome)
    if problem is not None:
        raise problem


@app.command(short_help="Print the trials of a study (the newest by default).")
def show(
    db: DbOption = DEFAULT_DB,
    study: StudyOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Print the trials of a study from runs.db (the newest study by default)."""
    from autotune.commands import show as show_command

    seen = show_command.view(db, study)
    if as_json:
        console.print_json(json.dumps([t.model_dump(mode="json") for t in seen.outcome.trials]))
        return
    terminal.print_trials(console, seen.outcome)
    terminal.print_phases(console, seen.outcome)
    for attempt in seen.attempts:
        console.print(attempt.describe(), markup=False, highlight=False)
    terminal.print_learned(console, seen.learned)
    terminal.print_isolations(console, seen.isolations)
    terminal.print_best(console, seen.outcome)


@app.command(short_help="Write a trial as a recipe: YAML, shell script or docker.")
def export(
    db: DbOption = DEFAULT_DB,
    study: StudyOption = None,
    trial: Annotated[Optional[int], typer.Option("--trial", help="trial number (default: the best)")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="write the recipe here")] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="yaml (the recipe), shell (a runnable sh script) or docker (`docker run` lines per node); "
            "all carry the same argv and env",
        ),
    ] = "yaml",
    image: Annotated[
        Optional[str], typer.Option("--image", help="with --format docker: the engine's container image")
    ] = None,
    cluster: Annotated[
        Optional[Path], typer.Option("--cluster", help="with --format docker: the boxes (their Docker daemons, image)")
    ] = None,
    predicted: Annotated[
        bool, typer.Option("--predicted", help="no study: the best-predicted candidate of --space, marked predicted")
    ] = False,
    space: Annotated[
        Optional[str],
        typer.Option("--space", "-s", help="with --predicted: the space to plan (default: the one made for --hardware/--nodes)"),
    ] = None,
    hardware: HardwareOption = None,
    nodes: NodesOption = None,
) -> None:
    """Write the winning (or a chosen) trial as a recipe: YAML, a shell script or docker lines."""
    from autotune.commands import export as export_command
    from autotune.commands import plan as plan_command
    from autotune.commands.setup import open_store
    from autotune.output import launch_formats
    from autotune.output.recipe import from_yaml

    if fmt not in launch_formats.FORMATS:
        raise ConfigError(f"unknown --format {fmt!r}; use one of {', '.join(launch_formats.FORMATS)}")
    yaml_output = output if fmt == "yaml" else None
    if predicted:
        if space is None and hardware is None and nodes is None:
            raise ConfigError("--predicted needs --space, or --hardware/--nodes to pick a shipped space; it reads no study")
        text = plan_command.predicted_recipe(_chosen_space(space, hardware, nodes), hardware, nodes, None, yaml_output, db)
    else:
        exported = export_command.export_recipe(open_store(db, must_exist=True), study, trial, yaml_output)
        text = exported.text
        for warning in exported.warnings:
            errors.print(f"warning: {warning}", markup=False, highlight=False)
    if fmt != "yaml":
        text = launch_formats.render(from_yaml(text), fmt, image=image, cluster_file=cluster)
        if output is not None:
            try:
                output.write_text(text)
                output.chmod(0o755)
            except OSError as exc:
                raise ConfigError(f"cannot write {output}: {exc.strerror}") from exc
    if output is None:
        console.print(text, markup=False, highlight=False)
    else:
        console.print(f"{'recipe' if fmt == 'yaml' else fmt + ' script'} written to {output}")


@app.command(name="report", short_help="Write a study as one self-contained HTML report.")
def report_html(
    db: DbOption = DEFAULT_DB,
    study: StudyOption = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="the HTML file to write")] = Path("report.html"),
) -> None:
    """Write a study as one self-contained HTML report (plots, trials, probes, recipe; no network needed)."""
    from autotune.commands import show as show_command
    from autotune.commands.setup import open_store
    from autotune.output import html as html_report

    store = open_store(db, must_exist=True)
    name = show_command.pick_study(store, study)
    written = html_report.write_report(store, name, output)
    console.print(f"report of study {name} written to {written} ({written.stat().st_size / 1e6:.1f} MB)")


@app.command(short_help="Detect this host and what actually runs on it.")
def probe(
    db: DbOption = DEFAULT_DB,
    space: ChosenSpaceOption = None,
    hardware: HardwareOption = None,
    nodes: NodesOption = None,
    model: Annotated[Optional[str], typer.Option("--model", help="model file/dir for engine probes")] = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="probe again even if runs.db has results")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    classify: Annotated[Optional[Path], typer.Option("--classify", help="classify an engine log file; probe nothing")] = None,
    skip_engine: Annotated[bool, typer.Option("--no-engine", help="device and kernels only")] = False,
    timeout: Annotated[
        str, typer.Option("--timeout", metavar="DURATION", help="per probe, like 300s or 5m (a bare number: seconds)")
    ] = "300s",
    budget: Annotated[
        str,
        typer.Option("--budget", metavar="DURATION",
                     help="after this long no new engine launch starts, like 8m or 480s (a bare number: seconds); "
                     "the next probe launches what is left; 0 launches nothing and lists what waits"),
    ] = "8m",
) -> None:
    """Detect what this host is and what actually runs on it; store the evidence in runs.db.

    The space whose engine and knob values are probed is the one `search` would run: --space, or the
    shipped space made for --hardware/--nodes. The probes run on this host."""
    from autotune.commands import probe as probing

    timeout_s, budget_s = duration_s(timeout, "s"), duration_s(budget, "s", zero_ok=True)
    if classify is not None:
        found = probing.classify_log(classify)
        if as_json:
            console.print_json(json.dumps(found.model_dump(mode="json") if found else None))
        else:
            terminal.print_classification(console, classify, found)
        return
    result = probing.probe(
        db_path=db,
        space_name=_chosen_space(space, hardware, nodes),
        model_path=model,
        refresh=refresh,
        engine_probes=not skip_engine,
        timeout_s=timeout_s,
        budget_s=budget_s,
        on_holders=_note_holders,
    )
    if as_json:
        console.print_json(result.model_dump_json())
    else:
        terminal.print_probe(console, result)


@app.command(short_help="Predict memory and speed per candidate; start nothing.")
def plan(
    db: DbOption = DEFAULT_DB,
    space: ChosenSpaceOption = None,
    hardware: HardwareOption = None,
    nodes: NodesOption = None,
    model: Annotated[Optional[str], typer.Option("--model", help="model dir with config.json (overrides the space)")] = None,
    cluster: Annotated[
        Optional[Path], typer.Option("--cluster", help="YAML describing the boxes: the launch is shown for them")
    ] = None,
    top: Annotated[
        int, typer.Option("--top", min=0, help="table rows: the N fastest-predicted kept and the first N dropped (0: all; --json holds all)")
    ] = plan_text.PLAN_TOP,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Memory fit and predicted speed per candidate, then the best one's launch; starts nothing.

    The launch is the best-predicted candidate's exact commands and environment per node
    (placeholder hosts without --cluster). Planning for this host's own hardware, candidates its
    stored probes (runs.db) show failing are dropped with the reason."""
    from autotune.commands import plan as plan_command

    report_ = plan_command.plan_space(_chosen_space(space, hardware, nodes), hardware, nodes, model, db, cluster)
    if as_json:
        console.print_json(report_.model_dump_json())
    else:
        plan_text.print_plan(console, report_, top)


@space_app.command("new")
def space_new(
    model: Annotated[str, typer.Option("--model", help="model directory holding config.json, or a config.json file")],
    hardware: Annotated[str, typer.Option("--hardware", help="hardware profile the space is for (spark, h200, ...) or auto")] = "spark",
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="number of boxes (Spark: one GPU each)")] = 1,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="write the YAML here (never over a file)")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="space name (default: <model dir>-<hardware><nodes>)")] = None,
    objective: Annotated[SpaceObjective, typer.Option("--objective", help="what the space maximises: decode (one stream's tok/s), capacity (concurrent streams within --ttft-ms and --itl-ms), energy (output tokens per GPU joule of --energy-workload) or speed-energy (tok/s^(1-w) x tok/J^w of --energy-workload, w = --energy-weight); the energy ones need the GPUs' energy where the space runs (only a warning where this host has none)")] = SpaceObjective.DECODE,
    ttft_ms: Annotated[Optional[float], typer.Option("--ttft-ms", help="capacity: time to first token, at most (ms)")] = None,
    itl_ms: Annotated[Optional[float], typer.Option("--itl-ms", help="capacity: inter-token latency, at most (ms)")] = None,
    e2e_ms: Annotated[Optional[float], typer.Option("--e2e-ms", help="capacity: request to last token, at most (ms)")] = None,
    attainment: Annotated[Optional[float], typer.Option("--attainment", help="capacity: share of requests that must meet the limits (default 0.95)")] = None,
    energy_workload: Annotated[Optional[str], typer.Option("--energy-workload", help="energy, speed-energy: the workload measured, prose, structured or cN (a wave of N streams; added to the workload) (default prose)")] = None,
    energy_weight: Annotated[Optional[float], typer.Option("--energy-weight", help="speed-energy: the tok/J term's weight w, above 0 and below 1; tok/s gets 1 - w (default 0.5)")] = None,
    layout: Annotated[Optional[str], typer.Option("--layout", help="TPxPP: tensor x pipeline parallel size (e.g. 2x2 for 4 boxes whose TP 4 cannot split the KV heads, 1x1 for one GPU of a multi-GPU profile); default TP over every GPU")] = None,
) -> None:
    """Write a search space for your own model from its config.json.

    It holds the architecture facts, the knobs that apply to it, the checkpoint's quantization, the
    memory fit on the hardware and (Spark) seed-recipe fixed settings, and is validated as `search`
    loads a space. Downloads nothing: the config must be on disk."""
    from autotune.commands.space_new import new_space, objective_of, write_space

    made = new_space(model, hardware, nodes, name,
                     objective_of(objective, ttft_ms, itl_ms, e2e_ms, attainment, energy_workload, energy_weight),
                     layout)
    write_space(made, output)
    for warning in made.warnings:
        errors.print(warning, markup=False, highlight=False)
    if output is None:
        console.print(made.text, markup=False, highlight=False, end="")
        errors.print(made.summary, markup=False, highlight=False)
        errors.print(made.hardware, markup=False, highlight=False)
    else:
        console.print(f"{made.summary}; written to {output}", markup=False, highlight=False)
        console.print(made.hardware, markup=False, highlight=False)
        console.print(
            f"next: autotune plan --space {output} --hardware {made.space.hardware} --nodes {nodes}",
            markup=False, highlight=False,
        )


def _note_holders(held: list[GpuHolder]) -> None:
    """One note line before the first launch when other processes hold the GPUs it will use."""
    line = terminal.holders_note(held)
    if line is not None:
        errors.print(f"note: {line}", markup=False, highlight=False)


def _chosen_space(space: str | None, hardware: str | None, nodes: int | None) -> str:
    """The space named, or the one picked for --hardware/--nodes, saying which on stderr."""
    from autotune.space.choice import choose_space

    choice = choose_space(space, hardware, nodes)
    if choice.note:
        errors.print(choice.note, markup=False, highlight=False)
    return choice.name


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


INTERRUPTED = 130


def _stop_engines() -> None:
    from autotune.launchers import stop_all

    stop_all()


def _interrupted() -> int:
    _stop_engines()
    errors.print("interrupted: engine processes stopped; the study resumes when you run the same command")
    return INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns known errors into one line and an exit code. A Ctrl-C
    that lands while autotune is already stopping engines (a second one, or one delivered late)
    still ends in 130 with every engine stopped, never in a traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            _stop_engines()
        finally:
            signal.signal(signal.SIGINT, previous)
        return INTERRUPTED


def _main(argv: list[str] | None) -> int:
    stop_all = _stop_engines
    signal.signal(signal.SIGTERM, _sigterm)
    debug = os.environ.get("AUTOTUNE_DEBUG") == "1"
    try:
        rc = app(args=argv, standalone_mode=False)  # typer turns Ctrl-C into a return of 130
        if rc == INTERRUPTED:
            return _interrupted()
        return rc if isinstance(rc, int) else 0
    except (KeyboardInterrupt, typer.Abort):
        return _interrupted()
    except AutotuneError as exc:
        stop_all()
        if debug:
            raise
        errors.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.TyperException as exc:  # usage errors: bad option, missing value, out of range
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        return getattr(exc, "exit_code", 2)
    except Exception as exc:
        stop_all()
        if debug or "pytest" in sys.modules:
            raise
        errors.print(
            f"unexpected error: {type(exc).__name__}: {exc} (set AUTOTUNE_DEBUG=1 for the traceback)",
            markup=False,
            soft_wrap=True,
        )
        return 1
    finally:
        stop_all()


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["app", "main", "ConfigError"]
