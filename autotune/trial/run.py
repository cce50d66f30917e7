"""The Launch that starts the engine (`EngineLaunch`, trial/launch.py's protocol): render the
candidate's launch, start it, measure what the request's context asks (a trial's workload, a
relaunch's objective, a smoke launch's one completion), run the gates it asks for, stop.

Failures are data: a start that crashes or hangs, or a server that dies mid-measurement, becomes a
TrialResult with status "failed", its failure class and the log lines that show it (read the one
way, trial/launch.py), built by one function (`_failed`).
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import AbstractContextManager, closing
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from autotune.bench import throughput
from autotune.bench.capacity import SLO_UNMET, SloUnmet
from autotune.bench.client import OpenAIClient
from autotune.bench.energy import EnergyMeter, energy_measurements
from autotune.engines.base import Engine, acceptance_length
from autotune.errors import AutotuneError, ConfigError
from autotune.launchers import launcher_class, stop_all
from autotune.launchers.base import Launched, LaunchOptions, free_port
from autotune.models import (
    AcceptanceSource,
    CapacityReport,
    Candidate,
    Cluster,
    FailureCause,
    FailureInfo,
    LaunchSpec,
    Measurement,
    NeedleReport,
    QevalReport,
    ReadyRequest,
    RequestResult,
    TrialEnergy,
    TrialResult,
    utc_now_ms,
)
from autotune.space.candidates import context_tokens, needle_lengths
from autotune.trial.launch import (
    GatesToRun, LaunchRequest, Purpose, StartFailed, engine_up, serving_failure, stalled_while_serving,
)
from autotune.trial.liveness import EngineStalled, StallGuard
from autotune.trial.phases import Phase, PhaseClock, Step

#: what a smoke launch asks (one short greedy completion: the engine serves or it does not)
SMOKE_PROMPT = "The capital of France is"


def from_log(engine: Engine, log_text: str) -> dict[str, Any]:
    """What the engine's log says it selected and resolved, as TrialResult fields."""
    return {"selected": engine.selected(log_text), "resolved": engine.resolved(log_text)}


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
    """What one launch measured: its workload's numbers and the gates it ran."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    measurements: list[Measurement] = []
    needle: NeedleReport | None = None
    qeval: QevalReport | None = None
    gates: GatesToRun = GatesToRun()  # what this launch did about its gates (skipped, reused, ran)
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
    request: LaunchRequest,
    base_url: str,
    clock: PhaseClock | None = None,
    ready: ReadyRequest | None = None,
    meter: EnergyMeter | None = None,
) -> Measured:
    """The workload of the request's context against the engine at `base_url`, then the gates the
    request runs (`LaunchRequest.gates`)."""
    from autotune.bench import capacity, needle, qeval
    from autotune.trial.requests import CountingClient, RequestProgress
    from autotune.trial.requests import workload_requests

    ctx, candidate, events = request.ctx, request.candidate, request.events
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
        out.gates = request.gates(lambda: throughput.objective_value(out.measurements, ctx.space.objective))
        if out.gates.skip is not None:
            events(f"{out.gates.skip.kind.value}: {out.gates.skip.why}")
        if out.gates.reuse is not None:
            events(f"accuracy reused from trial {out.gates.reuse.number} (differs only in numerics-neutral knobs)")
        if out.gates.needle:
            open_step(Step.of(Phase.NEEDLE))
            study_test = ctx.space.gates.needle.model_copy(update={"lengths_tokens": needle_lengths(ctx.space)})
            out.needle = await needle.run_needle(client, study_test, ctx_tokens, style=ctx.model.prompt_style)
        if out.gates.qeval:
            open_step(Step.of(Phase.QEVAL))
            cfg = ctx.space.gates.qeval
            out.qeval = await qeval.run_qeval(
                client, cfg, style=ctx.model.prompt_style, concurrency=cfg.concurrency
            )
    if clock is not None:
        clock.stop()
    return out


def _failed(request: LaunchRequest, t0: float, failure: FailureInfo, reason: str | None = None,
            **record: Any) -> TrialResult:
    """The one failed result of a launch: what stopped it (`reason`: its message unless told), with
    what the launch recorded before it stopped."""
    return TrialResult(study=request.ctx.study, number=request.number, candidate=request.candidate, status="failed",
                       reason=reason or failure.message, failure=failure, duration_s=time.monotonic() - t0, **record)


def _configuration_error(request: LaunchRequest, t0: float, exc: AutotuneError, **record: Any) -> TrialResult:
    """A launch its settings rule out (a launcher that cannot run it, a needle its context cannot
    hold): the launch fails, not the study."""
    failure = FailureInfo(failure_class="configuration_error", message=str(exc), cause=FailureCause.LIMITS)
    return _failed(request, t0, failure, reason=f"configuration_error: {exc}", **record)


class EngineLaunch:
    """The Launch (trial/launch.py) that starts the engine: on a free port, through `engine_up`;
    a smoke launch asks one short completion, any other launch measures its context's workload."""

    def __call__(self, request: LaunchRequest) -> TrialResult:
        started = utc_now_ms()
        t0 = time.monotonic()
        ctx = request.ctx
        try:
            launch = ctx.launchable(request.candidate, free_port())
        except ConfigError as exc:  # this candidate cannot be launched here
            return _configuration_error(request, t0, exc, started_at=started)
        record = {"launch": launch, "nccl": ctx.nccl, "engine_version": ctx.engine.version(), "started_at": started,
                  "log_path": str(request.log_path)}
        if request.purpose is Purpose.SMOKE:
            return _smoke(request, launch, t0, record)
        return _measured(request, launch, t0, record)

    def stop_all(self) -> None:
        stop_all()


def _up(request: LaunchRequest, launch: LaunchSpec) -> AbstractContextManager[Launched]:
    """The engine of `request` up (trial/launch.py's engine_up), as its context asks."""
    ctx = request.ctx
    options = LaunchOptions(cluster=ctx.cluster, study=ctx.study, trial=request.tag,
                            startup_timeout_s=ctx.space.workload.startup_timeout_s, limits=ctx.watchdog)
    return engine_up(ctx.engine, launch, request.log_path, ctx.launcher, options)


def _measured(request: LaunchRequest, launch: LaunchSpec, t0: float, record: dict[str, Any]) -> TrialResult:
    """A trial or a relaunch: the workload of the request's context, then its gates."""
    ctx, candidate = request.ctx, request.candidate
    meter = EnergyMeter.open_nodes(gpus_by_node(launch, candidate, ctx.launcher, ctx.cluster),
                                   nodes=len({n.node for n in launch.nodes}) or 1)
    meter.before_launch()  # idle power and the GPUs' state, before the engine starts
    request.events("starting engine")
    clock = PhaseClock()
    clock.enter(Phase.START)
    try:
        with closing(meter), _up(request, launch) as server:
            clock.stop()
            request.events(f"engine up after {server.startup_s:.1f} s")

            def failed(failure: FailureInfo, log: str, **more: Any) -> TrialResult:
                return _failed(request, t0, failure, **from_log(ctx.engine, log), phase_s=clock.ordered(),
                               energy=meter.record(), **more, **record)

            try:
                measured = asyncio.run(measure(request, server.base_url, clock, launch.ready, meter))
            except AutotuneError as exc:  # e.g. a needle test this context cannot hold: the trial fails, not the study
                return _configuration_error(request, t0, exc, **from_log(ctx.engine, server.log_text()),
                                            phase_s=clock.ordered(), energy=meter.record(), **record)
            except EngineStalled as exc:  # health answers, no token comes back: a hang, not a slow config
                log = server.log_text()
                return failed(stalled_while_serving(ctx.engine, log, request.log_path, exc.evidence), log)
            except SloUnmet as exc:  # the engine served, and not one level met the SLO: the config cannot serve it
                failure = FailureInfo(failure_class=SLO_UNMET, message=f"{SLO_UNMET}: {exc}", cause=FailureCause.LIMITS)
                return failed(failure, server.log_text(), capacity=exc.report)
            except throughput.MeasurementFailed as exc:
                log = server.log_text()
                return failed(serving_failure(ctx.engine, server, str(exc), log), log)
            log = server.log_text()
            startup = Measurement.of(
                "startup_s", "s", "engine start to healthy, this launch", [server.startup_s or 0.0]
            )
            clock.enter(Phase.TEARDOWN)
        clock.stop()
    except StartFailed as exc:
        clock.stop()
        return _failed(request, t0, exc.failure, **from_log(ctx.engine, exc.log_tail), phase_s=clock.ordered(),
                       energy=meter.record(), **record)
    objective, score = throughput.objective_value(measured.measurements, ctx.space.objective)
    return TrialResult(
        study=ctx.study,
        number=request.number,
        candidate=candidate,
        status="ok",
        **from_log(ctx.engine, log),
        start_parts_s=ctx.engine.start_parts(log),
        measurements=[*measured.measurements, startup],
        **measured.gates.fields(measured.needle, measured.qeval),
        acceptance_source=measured.acceptance_source,
        capacity=measured.capacity,
        energy=measured.energy,
        objective=round(objective, 4),
        score=round(score, 4),
        duration_s=time.monotonic() - t0,
        phase_s=clock.ordered(),
        **record,
    )


def _smoke(request: LaunchRequest, launch: LaunchSpec, t0: float, record: dict[str, Any]) -> TrialResult:
    """Start, ask one short greedy completion, stop: `ok` when the engine answered with text."""
    ctx = request.ctx
    served = ctx.model.served_name or ctx.model.name
    try:
        with _up(request, launch) as server:
            try:
                with httpx.Client(timeout=ctx.space.workload.request_timeout_s) as http:
                    reply = http.post(server.base_url + "/v1/completions",
                                      json={"model": served, "prompt": SMOKE_PROMPT, "max_tokens": 4, "temperature": 0})
                    reply.raise_for_status()
                    if not reply.json()["choices"][0].get("text"):
                        raise ValueError("empty completion")
            except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
                failure = serving_failure(ctx.engine, server, f"smoke request failed: {exc}", server.log_text())
                return _failed(request, t0, failure, **record)
    except StartFailed as exc:
        return _failed(request, t0, exc.failure, **record)
    return TrialResult(study=ctx.study, number=request.number, candidate=request.candidate, status="ok",
                       duration_s=time.monotonic() - t0, **record)
