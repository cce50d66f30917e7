"""What a launch needs besides its candidate (TrialContext), and the narrower workloads of the
launches that measure the objective alone (`objective_only`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ConfigDict

from autotune.engines.base import Engine
from autotune.errors import ConfigError
from autotune.launchers import launcher_class
from autotune.launchers.watchdog import WatchdogLimits
from autotune.models import (
    Candidate,
    Checked,
    Cluster,
    GatePolicy,
    LaunchSpec,
    ModelSpec,
    NcclReading,
    SearchSpace,
)

#: what a launch tells about its progress, one line at a time
Events = Callable[[str], None]


class TrialContext(Checked):
    """Everything a trial needs besides the candidate."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    study: str
    space: SearchSpace
    model: ModelSpec
    engine: Engine
    logs_dir: Path
    port: int = 8470  # the port a launch is shown with (a launch that starts takes a free one: trial/launch.py)
    gates: GatePolicy = GatePolicy.AT_ONCE  # when needle and qeval run (commands/setup.py resolves it)
    watchdog: WatchdogLimits = WatchdogLimits()
    launcher: str = "process"  # a name in autotune.launchers.LAUNCHERS
    cluster: Cluster | None = None
    nccl: list[NcclReading] = []  # what each node loads, read before a multi-node study (launchers/nccl.py)
    #: the planner's KV pool of a candidate in tokens (None: unknown), bounding a capacity search's streams
    kv_pool: Callable[[Candidate], int | None] | None = None

    def render(self, candidate: Candidate, port: int | None = None) -> LaunchSpec:
        """The launch of `candidate` (on `port`, else the context's): the cluster form over several
        nodes, and on one node too when the launcher runs only Ray launches (a one-node Ray cluster:
        the one-Spark case)."""
        port = self.port if port is None else port
        if self.cluster is not None and (len(self.cluster.nodes) > 1 or launcher_class(self.launcher).ray_nodes_only):
            launch = self.engine.render_cluster(candidate, self.model, port, self.cluster)
        else:
            launch = self.engine.render(candidate, self.model, port)
        if self.launcher == "docker" and self.cluster is not None and self.cluster.image:
            launch = launch.model_copy(update={"image": self.cluster.image})  # what the record says it ran in
        return launch

    def launchable(self, candidate: Candidate, port: int | None = None) -> LaunchSpec:
        """`candidate`'s launch, refused (ConfigError) where the launcher cannot run it."""
        launch = self.render(candidate, port)
        problem = launcher_class(self.launcher).launch_problem(launch)
        if problem:
            raise ConfigError(f"the {self.launcher} launcher cannot run this launch: {problem}")
        return launch

    def check_launchable(self, candidate: Candidate) -> None:
        """Refuse (ConfigError) a candidate whose launch the launcher cannot run: checked for the
        baseline before runs.db opens, so no study starts that could only crash."""
        self.launchable(candidate)

    def launch_check(self) -> Callable[[Candidate], str | None]:
        """A pruner check: a candidate whose launch the launcher cannot run is skipped with the
        reason, not launched."""
        def check(candidate: Candidate) -> str | None:
            try:
                self.check_launchable(candidate)
            except ConfigError as exc:
                return f"launch: {exc}"
            return None

        return check


def objective_only(ctx: TrialContext, **workload: object) -> TrialContext:
    """The context of a relaunch that measures the objective alone (decode at one stream on the
    short prompts, and the objective's own waves of N streams where it reads them): no cold
    prefill, no long-context decode, no other concurrency; `workload` sets more."""
    waves = ctx.space.objective.waves
    # capacity_at_slo: the relaunch runs the whole search again, and no decode passes (not the objective)
    decode = {"prompt_sets": []} if ctx.space.objective.capacity else {}
    work = ctx.space.workload.model_copy(
        update={"prefill_tokens": [], "decode_context_tokens": [], "concurrency": [1, *waves],
                **decode, **workload}
    )
    return ctx.model_copy(update={"space": ctx.space.model_copy(update={"workload": work})})
