"""A trial's requests: how many each phase of the workload sends, and the counter that reports
`phase: n/total requests` as they finish."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.bench.client import ChatClient, Messages
from autotune.models import RequestResult, SearchSpace
from autotune.trial.phases import Phase, Step

PROMPTS_PER_SET_SHIPPED = 3  # autotune/bench/prompts/*.yaml hold at least this many prompts each


class RequestProgress:
    """Wraps a trial's event callback: opening a step resets the count, each finished request
    reports `step: n/total requests` (items for needle and qeval), out of `expected[step]`."""

    ITEM_PHASES = (Phase.NEEDLE, Phase.QEVAL)

    def __init__(self, events: Callable[[str], None], expected: dict[Step, int]) -> None:
        self.events = events
        self.expected = expected
        self.step: Step | None = None
        self.done = 0

    def open(self, step: Step) -> None:
        self.step, self.done = step, 0
        self.events(step.label)

    def request_done(self, result: RequestResult) -> None:
        if self.step is None:
            return
        self.done += 1
        unit = "items" if self.step.phase in self.ITEM_PHASES else "requests"
        total = self.expected.get(self.step)
        count = f"{self.done}/{total}" if total else str(self.done)
        failed = "" if result.ok else " (last one failed)"
        self.events(f"{self.step.label}: {count} {unit} done{failed}")


class CountingClient:
    """A ChatClient that tells `on_done` about every finished chat/completion request."""

    def __init__(self, client: ChatClient, on_done: Callable[[RequestResult], None]) -> None:
        self.client = client
        self.on_done = on_done

    async def chat(self, messages: Messages, max_tokens: int, **extra: Any) -> RequestResult:
        result = await self.client.chat(messages, max_tokens, **extra)
        self.on_done(result)
        return result

    async def complete(self, prompt: str, max_tokens: int, **extra: Any) -> RequestResult:
        result = await self.client.complete(prompt, max_tokens, **extra)
        self.on_done(result)
        return result

    async def count_tokens(self, text: str) -> int:
        return await self.client.count_tokens(text)


def workload_requests(space: SearchSpace, context_tokens: int) -> dict[Step, int]:
    """Requests one trial sends per step."""
    from autotune.space.candidates import needle_lengths

    work = space.workload
    per_set = work.repeats * min(work.prompts_per_set, PROMPTS_PER_SET_SHIPPED)
    out: dict[Step, int] = {Step.of(Phase.WARM_UP): work.warmup_requests}
    out.update({Step.decode(name): per_set for name in work.prompt_sets})
    if work.prefill_tokens:
        fitting = [d for d in work.prefill_tokens if d + 64 <= context_tokens]
        out[Step.of(Phase.PREFILL)] = 3 + work.prefill_repeats * len(fitting)
    if any(c > 1 for c in work.concurrency):
        out[Step.of(Phase.CONCURRENCY)] = sum(c for c in work.concurrency if c > 1)
    slo = space.objective.slo
    if slo is not None:  # the most a search sends (doubling or bisecting, each level its count)
        out[Step.of(Phase.CAPACITY)] = slo.max_probes * slo.min_requests
    if space.gates.needle:  # the study's needle test, the same for every candidate
        out[Step.of(Phase.NEEDLE)] = len(needle_lengths(space)) * len(set(space.gates.needle.depths))
    if space.gates.qeval:
        out[Step.of(Phase.QEVAL)] = space.gates.qeval.tasks
    return out
