"""One trial: launch the engine for a candidate, wait healthy, measure, check accuracy, stop.

Failures are data: a start that crashes or hangs, or a server that dies mid-measurement, becomes a
TrialResult with status "failed", its failure class and the log lines that show it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from autotune.bench import throughput
from autotune.bench.capacity import SLO_UNMET, SloUnmet
from autotune.bench.client import OpenAIClient
from autotune.bench.energy import EnergyMeter, energy_measurements
from autotune.gates.dominated import DominatedCheck, GatesSkipped
from autotune.engines.base import Engine, acceptance_length
from autotune.errors import AutotuneError, ConfigError, EngineStartError
from autotune.launchers import launcher_class, open_server
from autotune.launchers.watchdog import WatchdogLimits
from autotune.models import (
    AcceptanceSource,
    Checked,
    CapacityReport,
    Candidate,
    Cluster,
    FailureCause,
    FailureInfo,
    GatePolicy,
    LaunchSpec,
    Measurement,
    ModelSpec,
    NcclReading,
    NeedleReport,
    QevalReport,
    ReadyRequest,
    RequestResult,
    SearchSpace,
    TrialEnergy,
    TrialResult,
    utc_now_ms,
)
from autotune.trial.phases import Phase, PhaseClock, Step
from autotune.engines.signatures import ENGINE_STALLED, UNCLASSIFIED
from autotune.trial.liveness import EngineStalled, StallGuard, stalled_failure
from autotune.space.candidates import context_tokens, needle_lengths


class TrialContext(Checked):
    """Everything a trial needs besides the candidate."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    study: str
    space: SearchSpace
    model: ModelSpec
    engine: Engine
    logs_dir: Path
    port: int = 8470
    gates: GatePolicy = GatePolicy.AT_ONCE  # when needle and qeval run (commands/setup.py resolves it)
    watchdog: WatchdogLimits = WatchdogLimits()
    launcher: str = "process"  # a name in autotune.launchers.LAUNCHERS
    cluster: Cluster | None = None
    nccl: list[NcclReading] = []  # what each node loads, read before a multi-node study (launchers/nccl.py)
    #: the planner's KV pool of a candidate in tokens (None: unknown), bounding a capacity search's streams
    kv_pool: Callable[[Candidate], int | None] | None = None

    def render(self, candidate: Candidate) -> LaunchSpec:
        """The launch of `candidate`: the cluster form over several nodes, and on one node too when
        the launcher runs only Ray launches (a one-node Ray cluster: the one-Spark case)."""
        if self.cluster is not None and (len(self.cluster.nodes) > 1 or launcher_class(self.launcher).ray_nodes_only):
            launch = self.engine.render_cluster(candidate, self.model, self.port, self.cluster)
        else:
            launch = self.engine.render(candidate, self.model, self.port)
        if self.launcher == "docker" and self.cluster is not None and self.cluster.image:
            launch = launch.model_copy(update={"image": self.cluster.image})  # what the record says it ran in
        return launch

    def check_launchable(self, candidate: Candidate) -> None:
        """Refuse (ConfigError) a candidate whose launch the launcher cannot run: checked for the
        baseline before runs.db opens, so no study starts that could only crash."""
        launch = self.render(candidate)
        problem = launcher_class(self.launcher).launch_problem(launch)
        if problem:
            raise ConfigError(f"the {self.launcher} launcher cannot run this launch: {problem}")


Events = Callable[[str], None]


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


def from_log(engine: Engine, log_text: str) -> dict[str, Any]:
    """What the engine's log says it selected and resolved, as TrialResult fields."""
    return {"selected": engine.selected(log_text), "resolved": engine.resolved(log_text)}


#: the failures a launch ends with when its log names none, and what each blames
FALLBACK_CAUSES: dict[str, FailureCause] = {
    "startup_timeout": FailureCause.LIMITS,  # the start-up time-out: a slow start, not a broken value
    "serving_failed": FailureCause.LIMITS,  # the engine stayed up and a request failed: load, not a knob value
    "startup_crash": FailureCause.UNEXPLAINED,
    "crash_during_run": FailureCause.UNEXPLAINED,
}


def failure_from_log(engine: Engine, log_text: str, fallback_class: str, message: str) -> FailureInfo:
    found = engine.classify(log_text)
    if found is not None and found.failure_class == UNCLASSIFIED and fallback_class == "serving_failed":
        # a request handler's traceback while the server stays up: not an engine crash to isolate
        root = found.message.removeprefix(f"{UNCLASSIFIED}: ")
        return found.model_copy(update={
            "failure_class": fallback_class, "message": f"{fallback_class}: {root}", "evidence": [message, *found.evidence],
            "cause": FALLBACK_CAUSES[fallback_class],
        })
    if found is not None:
        return found
    last = [line for line in log_text.strip().splitlines() if line.strip()][-5:]
    return FailureInfo(failure_class=fallback_class, message=message, evidence=last, cause=FALLBACK_CAUSES[fallback_class])


def log_cause(engine: Engine, log_text: str) -> FailureInfo | None:
    """The root cause a stalled engine's log names (an NCCL liveness line), if any."""
    found = engine.classify(log_text)
    return None if found is None or found.failure_class in (UNCLASSIFIED, ENGINE_STALLED) else found


def note_in_log(log_path: Path, failure: FailureInfo) -> None:
    """autotune's evidence at the end of the trial's log, so the saved log shows (and
    `autotune probe --classify` names) what stopped the trial."""
    try:
        with log_path.open("a") as log:
            log.write("\n".join(failure.evidence) + "\n")
    except OSError:
        pass


async def _scrape_counters(engine: Engine, base_url: str) -> dict[str, float]:
    if not engine.metrics_path:
        return {}
    try:
        async with httpx.AsyncClient(timeout=10.0) as http:
            response = await http.get(base_url + engine.metrics_path)
            return engine.spec_decode_counters(response.text) if response.status_code == 200 else {}
    except httpx.HTTPError:
        return {}


def acceptance(before: dict[str, float], after: dict[str, float]) -> Measurement | None:
    length = acceptance_length(before, after)
    if length is None:
        return None
    return Measurement.of(
        "spec_acceptance_length",
        "tokens",
        "speculative decoding: 1 + accepted / drafts, from /metrics counter deltas over the decode workloads",
        [length],
    )


class Measured(BaseModel):
    model_config = ConfigDict(extra="forbid")

    measurements: list[Measurement] = []
    needle: NeedleReport | None = None
    qeval: QevalReport | None = None
    skip: GatesSkipped | None = None  # why its gates did not run in this launch
    accuracy_from: int | None = None
    capacity: CapacityReport | None = None
    energy: TrialEnergy | None = None
    acceptance_source: AcceptanceSource | None = None


def visible_gpus(launch: LaunchSpec, candidate: Candidate) -> str | None:
    """The GPUs a launch uses on this host: CUDA_VISIBLE_DEVICES of its first node, else autotune's
    own; without either, the first tensor x pipeline x data parallel ones where the candidate sets
    those (a one-GPU trial on an 8-GPU box counts one GPU, not eight), else every GPU (None)."""
    env = launch.nodes[0].env if launch.nodes else {}
    visible = env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None:
        return visible
    sizes = [candidate.params.get(k) for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")]
    if not any(isinstance(n, int) for n in sizes) or len({n.node for n in launch.nodes}) > 1:
        return None
    ranks = 1
    for n in sizes:
        ranks *= n if isinstance(n, int) and n > 0 else 1
    return ",".join(str(i) for i in range(ranks))


def gpus_by_node(launch: LaunchSpec, candidate: Candidate, launcher: str, cluster: Cluster | None) -> dict[int, str | None]:
    """node -> the GPUs it uses (CUDA_VISIBLE_DEVICES; None: every GPU), for the launch's nodes on
    this host; a node on another host is left out (not read here)."""
    here = launcher_class(launcher).nodes_here(launch, cluster)
    if len({n.node for n in launch.nodes}) <= 1:
        return {node: visible_gpus(launch, candidate) for node in here}
    own = os.environ.get("CUDA_VISIBLE_DEVICES")
    return {node: next((n.env["CUDA_VISIBLE_DEVICES"] for n in launch.nodes
                        if n.node == node and "CUDA_VISIBLE_DEVICES" in n.env), own) for node in here}


async def measure(
    ctx: TrialContext,
    candidate: Candidate,
    base_url: str,
    events: Events,
    clock: PhaseClock | None = None,
    dominated: DominatedCheck | None = None,
    reuse: TrialResult | None = None,
    ready: ReadyRequest | None = None,
    meter: EnergyMeter | None = None,
) -> Measured:
    from autotune.bench import capacity, needle, qeval
    from autotune.trial.requests import CountingClient, RequestProgress
    from autotune.trial.requests import workload_requests

    workload = ctx.space.workload
    out = Measured()
    meter = meter or EnergyMeter(None, "not read: no meter for this measurement", [])
    served = ctx.model.served_name or ctx.model.name
    async with OpenAIClient(
        base_url, served, tokenize_path=ctx.engine.tokenize_path, timeout_s=workload.request_timeout_s
    ) as http_client:
        counted = RequestProgress(events, workload_requests(ctx.space, context_tokens(ctx.space, candidate)))
        guarded = StallGuard(http_client, base_url, ready, ctx.engine.health_path, workload.request_timeout_s)

        def request_done(result: RequestResult) -> None:
            counted.request_done(result)
            meter.request_done(result)

        client = CountingClient(guarded, request_done)
        sender = throughput.requests_for(client, workload)  # accuracy keeps the model's prompt_style

        def open_step(step: Step) -> None:
            if clock is not None:
                clock.enter(step.phase)
            counted.open(step)

        open_step(Step.of(Phase.WARM_UP))
        await throughput.warm_up(sender, workload)
        before = await _scrape_counters(ctx.engine, base_url)
        for set_name in workload.prompt_sets:
            open_step(Step.decode(set_name))
            with meter.window(set_name):
                out.measurements += await throughput.measure_decode(sender, set_name, workload)
        spec = acceptance(before, await _scrape_counters(ctx.engine, base_url))
        if spec:
            out.measurements.append(spec)
            out.acceptance_source = AcceptanceSource.METRICS_COUNTERS
        ctx_tokens = context_tokens(ctx.space, candidate)
        if workload.prefill_tokens:
            open_step(Step.of(Phase.PREFILL))
            with meter.window("prefill"):
                out.measurements += await throughput.measure_prefill(
                    sender, workload, throughput.filler_prompt_builder(sender), ctx_tokens
                )
        if workload.decode_context_tokens:
            open_step(Step.long_decode())
            with meter.window("long_decode"):
                out.measurements += await throughput.measure_long_decode(
                    sender, workload, throughput.filler_prompt_builder(sender), ctx_tokens
                )
        if any(c > 1 for c in workload.concurrency):
            open_step(Step.of(Phase.CONCURRENCY))
            for level in (c for c in workload.concurrency if c > 1):  # one energy window per wave
                await throughput.warm_wave(sender, workload, level)
                with meter.window(f"c{level}"):
                    out.measurements += await throughput.measure_concurrency(
                        sender, workload.model_copy(update={"concurrency": [level]}))
        slo = ctx.space.objective.slo
        if slo is not None:
            open_step(Step.of(Phase.CAPACITY))
            pool = ctx.kv_pool(candidate) if ctx.kv_pool is not None else None
            with meter.window("capacity"):
                fit = await capacity.fit_streams(sender, workload, pool)
                out.capacity = await capacity.search(
                    slo, lambda n: capacity.measure_level(sender, workload, slo, n, progress=events), fit)
            out.measurements += capacity.measurements(out.capacity)
            if out.capacity.capacity == 0:
                raise capacity.SloUnmet(out.capacity)
        out.energy = meter.record()
        out.measurements += energy_measurements(out.energy)
        if dominated is not None and ctx.gates.accuracy:
            objective, score = throughput.objective_value(out.measurements, ctx.space.objective)
            out.skip = dominated(objective, score)
            if out.skip is not None:
                events(f"{out.skip.kind.value}: {out.skip.why}")
        if reuse is not None and ctx.gates.accuracy and out.skip is None:
            out.needle, out.qeval, out.accuracy_from = reuse.needle, reuse.qeval, reuse.number
            events(f"accuracy reused from trial {reuse.number} (differs only in numerics-neutral knobs)")
        if ctx.gates.accuracy and ctx.space.gates.needle and out.skip is None and reuse is None:
            open_step(Step.of(Phase.NEEDLE))
            study_test = ctx.space.gates.needle.model_copy(update={"lengths_tokens": needle_lengths(ctx.space)})
            out.needle = await needle.run_needle(client, study_test, ctx_tokens, style=ctx.model.prompt_style)
        if ctx.gates.accuracy and ctx.space.gates.qeval and out.skip is None and reuse is None:
            open_step(Step.of(Phase.QEVAL))
            cfg = ctx.space.gates.qeval
            out.qeval = await qeval.run_qeval(
                client, cfg, style=ctx.model.prompt_style, concurrency=cfg.concurrency
            )
    if clock is not None:
        clock.stop()
    return out


def run_trial(
    ctx: TrialContext,
    candidate: Candidate,
    number: int,
    events: Events = lambda _: None,
    log_name: str | None = None,
    dominated: DominatedCheck | None = None,
    reuse: TrialResult | None = None,
) -> TrialResult:
    started = utc_now_ms()
    t0 = time.monotonic()
    try:
        launch = ctx.render(candidate)
        problem = launcher_class(ctx.launcher).launch_problem(launch)
        if problem:
            raise ConfigError(f"the {ctx.launcher} launcher cannot run this launch: {problem}")
    except ConfigError as exc:  # this candidate cannot be launched here: the trial fails, not the study
        failure = FailureInfo(failure_class="configuration_error", message=str(exc), cause=FailureCause.LIMITS)
        return TrialResult(study=ctx.study, number=number, candidate=candidate, status="failed",
                           reason=f"configuration_error: {exc}", failure=failure, started_at=started,
                           duration_s=time.monotonic() - t0)
    log_path = ctx.logs_dir / ctx.study / f"{log_name or f'trial-{number:03d}'}.log"
    if log_path.exists():
        log_path.unlink()
    common = dict(
        study=ctx.study,
        number=number,
        candidate=candidate,
        launch=launch,
        nccl=ctx.nccl,
        engine_version=ctx.engine.version(),
        started_at=started,
        log_path=str(log_path),
    )
    server = open_server(
        launch,
        log_path,
        launcher=ctx.launcher,
        cluster=ctx.cluster,
        study=ctx.study,
        trial=str(number),
        startup_timeout_s=ctx.space.workload.startup_timeout_s,
        limits=ctx.watchdog,
    )
    meter = EnergyMeter.open_nodes(gpus_by_node(launch, candidate, ctx.launcher, ctx.cluster),
                                   nodes=len({n.node for n in launch.nodes}) or 1)
    meter.before_launch()  # idle power and the GPUs' state, before the engine starts
    events("starting engine")
    clock = PhaseClock()
    clock.enter(Phase.START)
    try:
        with closing(meter), server:
            clock.stop()
            events(f"engine up after {server.startup_s:.1f} s")
            try:
                measured = asyncio.run(measure(ctx, candidate, server.base_url, events, clock, dominated, reuse,
                                                launch.ready, meter))
            except AutotuneError as exc:  # e.g. a needle test this context cannot hold: the trial fails, not the study
                failure = FailureInfo(failure_class="configuration_error", message=str(exc), cause=FailureCause.LIMITS)
                return TrialResult(
                    status="failed", reason=f"configuration_error: {exc}", failure=failure,
                    duration_s=time.monotonic() - t0, **from_log(ctx.engine, server.log_text()),
                    phase_s=clock.ordered(), energy=meter.record(), **common,
                )
            except EngineStalled as exc:  # health answers, no token comes back: a hang, not a slow config
                log = server.log_text()
                failure = stalled_failure(exc.evidence, log_cause(ctx.engine, log), "while measuring")
                note_in_log(log_path, failure)
                return TrialResult(
                    status="failed", reason=failure.message, failure=failure, duration_s=time.monotonic() - t0,
                    **from_log(ctx.engine, log), phase_s=clock.ordered(), energy=meter.record(), **common,
                )
            except SloUnmet as exc:  # the engine served, and not one level met the SLO: the config cannot serve it
                failure = FailureInfo(failure_class=SLO_UNMET, message=f"{SLO_UNMET}: {exc}", cause=FailureCause.LIMITS)
                return TrialResult(
                    status="failed", reason=failure.message, failure=failure, capacity=exc.report,
                    duration_s=time.monotonic() - t0, **from_log(ctx.engine, server.log_text()),
                    phase_s=clock.ordered(), energy=meter.record(), **common,
                )
            except throughput.MeasurementFailed as exc:
                log = server.log_text()
                alive = server.alive()
                failure = server.memory_failure() or failure_from_log(
                    ctx.engine, log, "serving_failed" if alive else "crash_during_run", str(exc)
                )
                return TrialResult(
                    status="failed",
                    reason=failure.message,
                    failure=failure,
                    duration_s=time.monotonic() - t0,
                    **from_log(ctx.engine, log),
                    phase_s=clock.ordered(),
                    energy=meter.record(),
                    **common,
                )
            log = server.log_text()
            startup = Measurement.of(
                "startup_s", "s", "engine start to healthy, this launch", [server.startup_s or 0.0]
            )
            clock.enter(Phase.TEARDOWN)
        clock.stop()
    except EngineStartError as exc:
        clock.stop()
        fallback = "startup_timeout" if exc.timed_out else "startup_crash"
        failure = server.memory_failure() or failure_from_log(ctx.engine, exc.log_tail, fallback, str(exc))
        if exc.stalled and failure.failure_class in ("startup_timeout", UNCLASSIFIED, "nccl_liveness"):
            failure = stalled_failure([str(exc), *exc.evidence], log_cause(ctx.engine, exc.log_tail), "at start-up")
            note_in_log(log_path, failure)
        elif exc.timed_out and failure.failure_class != "startup_timeout":
            failure = failure.model_copy(update={"message": f"{exc} — log shows: {failure.message}"})
        return TrialResult(
            status="failed",
            reason=failure.message,
            failure=failure,
            duration_s=time.monotonic() - t0,
            **from_log(ctx.engine, exc.log_tail),
            phase_s=clock.ordered(),
            energy=meter.record(),
            **common,
        )
    objective, score = throughput.objective_value(measured.measurements, ctx.space.objective)
    return TrialResult(
        status="ok",
        **from_log(ctx.engine, log),
        start_parts_s=ctx.engine.start_parts(log),
        measurements=[*measured.measurements, startup],
        needle=measured.needle,
        qeval=measured.qeval,
        accuracy_from=measured.accuracy_from,
        acceptance_source=measured.acceptance_source,
        capacity=measured.capacity,
        energy=measured.energy,
        objective=round(objective, 4),
        score=round(score, 4),
        duration_s=time.monotonic() - t0,
        phase_s=clock.ordered(),
        **(measured.skip.fields() if measured.skip else {}),
        **common,
    )
