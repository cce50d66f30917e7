"""Healthy means it generates: what a trial does when a measured request stalls.

An engine can stop generating while its health endpoint still answers 200 (on Sparks: an NCCL
collective that hangs on TP 2). At start-up the launchers wait for a one-token greedy generation
(`LaunchSpec.ready`, launchers/base.py). While measuring, `StallGuard` wraps the client: a request
that fails by its time-out is followed by that same generation check, and when no token comes
back the trial stops with `EngineStalled`, which becomes the failure class `engine_stalled` with
the evidence (the stalled request, the check, the health answer), never a slow or failed
measurement of the config.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from autotune.bench.client import ChatClient, Messages
from autotune.engines.signatures import ENGINE_STALLED, ENGINE_STALLED_MARKER
from autotune.launchers.base import generation_check
from autotune.models import FailureCause, FailureInfo, ReadyRequest, RequestResult

#: the most a generation check after a stalled request waits (a live engine answers one token fast)
CHECK_TIMEOUT_S = 60.0

STALLED_FIX = (
    "the engine stopped generating while its health check answers: on several nodes an NCCL collective "
    "hang (check the NCCL every node loads: `autotune search` refuses the known bad ones), else a wedged "
    "engine; relaunching it is the only way out"
)


class EngineStalled(Exception):
    """A measured request timed out and the engine then did not return one token either."""

    def __init__(self, evidence: list[str]) -> None:
        super().__init__(evidence[0] if evidence else "engine stalled")
        self.evidence = evidence


def health_answer(url: str) -> str:
    """`GET url: <status>` as one evidence line (what the health endpoint says right now)."""
    try:
        with httpx.Client(timeout=5.0) as http:
            return f"GET {url}: {http.get(url).status_code}"
    except httpx.HTTPError as exc:
        return f"GET {url}: {type(exc).__name__}"


class StallGuard:
    """A ChatClient that checks, after every request that timed out, whether the engine still generates."""

    def __init__(self, client: ChatClient, base_url: str, ready: ReadyRequest | None, health_path: str,
                 request_timeout_s: float) -> None:
        self.client = client
        self.base_url = base_url
        self.ready = ready
        self.health_path = health_path
        self.request_timeout_s = request_timeout_s

    async def _checked(self, result: RequestResult) -> RequestResult:
        if not result.timed_out or self.ready is None:
            return result
        timeout_s = min(CHECK_TIMEOUT_S, self.request_timeout_s)
        check = await asyncio.to_thread(generation_check, self.base_url, self.ready, timeout_s)
        if check.generated:
            return result  # the engine generates: this request was only slow, the measurement decides
        health = await asyncio.to_thread(health_answer, self.base_url + self.health_path)
        raise EngineStalled([
            f"a measured request stalled past its {self.request_timeout_s:.0f} s time-out: {result.error}",
            check.evidence(self.ready.path),
            health,
        ])

    async def chat(self, messages: Messages, max_tokens: int, **extra: Any) -> RequestResult:
        return await self._checked(await self.client.chat(messages, max_tokens, **extra))

    async def complete(self, prompt: str, max_tokens: int, **extra: Any) -> RequestResult:
        return await self._checked(await self.client.complete(prompt, max_tokens, **extra))

    async def count_tokens(self, text: str) -> int:
        return await self.client.count_tokens(text)


def stalled_failure(evidence: list[str], log_failure: FailureInfo | None, when: str) -> FailureInfo:
    """The engine_stalled failure: autotune's own evidence first, then what the engine's log shows
    (an NCCL liveness line names the cause and its fix)."""
    shown = [f"{ENGINE_STALLED_MARKER} {when}", *evidence]
    fix = STALLED_FIX
    if log_failure is not None:
        shown += [f"log: {log_failure.failure_class}: {line}" for line in log_failure.evidence[:3]]
        fix = log_failure.fix or fix
    return FailureInfo(
        failure_class=ENGINE_STALLED,
        feature="generation while the health endpoint answers",
        message=f"{ENGINE_STALLED}: {evidence[0]}" if evidence else ENGINE_STALLED,
        evidence=shown,
        fix=fix,
        cause=FailureCause.ENVIRONMENT,  # a hang (NCCL, a wedged engine), not a knob value
    )
