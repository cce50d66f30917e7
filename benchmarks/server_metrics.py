"""The server's own view of a load level, read by neither client: vLLM's `/metrics` polled in a
thread while two tools measure the same server (benchmarks/crosscheck_guidellm_goodput.py), then cut
into each level's wall-clock window.

Per window: the requests the engine ran at once (`vllm:num_requests_running`, mean of the polls)
and those its scheduler held waiting (`vllm:num_requests_waiting`),
the tokens it generated per second (`vllm:generation_tokens_total`), and from its histograms the
requests whose time to first token was at most 1 s (the bucket `le="1.0"` of
`vllm:time_to_first_token_seconds`), their mean TTFT, and the mean inter-token latency
(`vllm:inter_token_latency_seconds`, sum over count). When one client reads a level as failing and
the other as passing, these say what the server did: whether it was loaded as the client says, and
how long it took. Bucket boundaries and names as in vLLM 0.26.0's `vllm/v1/metrics/loggers.py`.
"""

from __future__ import annotations

import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass, field

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
GENERATED = "vllm:generation_tokens"
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"


@dataclass(frozen=True)
class Poll:
    """One read of /metrics: its wall-clock time and the values this module uses (summed over engines)."""

    t: float
    running: float
    waiting: float
    generated: float
    ttft_count: float
    ttft_sum: float
    ttft_le_1s: float
    itl_count: float
    itl_sum: float


def parse(text: str, t: float) -> Poll:
    """The values of one /metrics text, every label set of a metric summed."""
    from prometheus_client.parser import text_string_to_metric_families  # vLLM's own dependency

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name
            if sample.name == f"{TTFT}_bucket":
                if float(sample.labels.get("le", "nan")) != 1.0:
                    continue
                key = f"{TTFT}_le_1"
            values[key] = values.get(key, 0.0) + sample.value
    return Poll(
        t=t, running=values.get(RUNNING, 0.0), waiting=values.get(WAITING, 0.0), generated=values.get(f"{GENERATED}_total", 0.0),
        ttft_count=values.get(f"{TTFT}_count", 0.0), ttft_sum=values.get(f"{TTFT}_sum", 0.0),
        ttft_le_1s=values.get(f"{TTFT}_le_1", 0.0), itl_count=values.get(f"{ITL}_count", 0.0),
        itl_sum=values.get(f"{ITL}_sum", 0.0),
    )


def window(polls: list[Poll], start: float, end: float) -> dict[str, float | int | None]:
    """What the server did between `start` and `end` (wall clock): the first poll at or after the start
    against the last at or before the end; empty when fewer than two polls fall inside."""
    inside = [p for p in polls if start <= p.t <= end]
    if len(inside) < 2:
        return {}
    a, b = inside[0], inside[-1]
    requests = b.ttft_count - a.ttft_count
    tokens = b.itl_count - a.itl_count
    return {
        "seconds": round(b.t - a.t, 2),
        "running_mean": round(statistics.fmean(p.running for p in inside), 1),
        "waiting_mean": round(statistics.fmean(p.waiting for p in inside), 1),
        "generated_tps": round((b.generated - a.generated) / (b.t - a.t), 1),
        "requests": int(requests),
        "ttft_le_1s": round((b.ttft_le_1s - a.ttft_le_1s) / requests, 4) if requests else None,
        "ttft_mean_ms": round(1000 * (b.ttft_sum - a.ttft_sum) / requests, 1) if requests else None,
        "itl_mean_ms": round(1000 * (b.itl_sum - a.itl_sum) / tokens, 2) if tokens else None,
    }


@dataclass
class Sampler:
    """Polls `base_url`/metrics every `every_s` in a thread while in its `with` block."""

    base_url: str
    every_s: float = 0.25
    polls: list[Poll] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(f"{self.base_url}/metrics", timeout=5) as reply:
                    self.polls.append(parse(reply.read().decode(), time.time()))
            except (OSError, ValueError):
                self.errors += 1
            self._stop.wait(self.every_s)
