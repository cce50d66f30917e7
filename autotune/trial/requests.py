"""A trial's requests: how many each phase of the workload sends, and the counter that reports
`phase: n/total requests` as they finish."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.bench.client import ChatClient, Messages
from autotune.models import RequestResult, SearchSpace

PROMPTS_PER_SET_SHIPPED = 3  # autotune/bench/prompts/*.yaml hold at least this many prompts each


class RequestProgress:
    """Wraps a trial's event callback: a phase event resets the count, each finished request
    reports `phase: n/total requests` (items for needle and qeval)."""

    ITEM_PHASES = ("needle", "qeval")

    def __init__(self, events: Callable[[str], None], expected: dict[str, int]) -> None:
        self.events = events
        self.expected = expected
        self.phase_name = ""
        self.done = 0

    def phase(self, text: str) -> None:
        self.phase_name, self.done = text, 0
        self.events(text)

    def request_done(self, result: RequestResult) -> None:
        if not self.phase_name:
            return
        self.done += 1
        unit = "items" if self.phase_name in self.ITEM_PHASES else "requests"
        total = self.expected.get(self.phase_name)
        count = f"{self.done}/{total}" if total else str(self.done)
        failed = "" if result.ok else " (last one failed)"
        self.events(f"{self.phase_name}: {count} {unit} done{failed}")


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


def workload_requests(space: SearchSpace, context_tokens: int) -> dict[str, int]:
    """Requests one trial sends per phase (phase names as trial.measure reports them)."""
    from autotune.space.candidates import needle_lengths

    work = space.workload
    per_set = work.repeats * min(work.prompts_per_set, PROMPTS_PER_SET_SHIPPED)
    out: dict[str, int] = {"warm-up": work.warmup_requests}
    out.update({f"decode ({name})": per_set for name in work.prompt_sets})
    if work.prefill_tokens:
        fitting = [d for d in work.prefill_tokens if d + 64 <= context_tokens]
        out["cold prefill"] = 3 + work.prefill_repeats * len(fitting)
    if any(c > 1 for c in work.concurrency):
        out["concurrency"] = sum(c for c in work.concurrency if c > 1)
    if space.gates.needle:  # the study's needle test, the same for every candidate
        out["needle"] = len(needle_lengths(space)) * len(set(space.gates.needle.depths))
    if space.gates.qeval:
        out["qeval"] = space.gates.qeval.tasks
    return out
