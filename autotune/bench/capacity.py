"""Capacity under a latency target: the most concurrent streams whose requests meet the SLO.

The definition is GuideLLM 0.8's goodput profile (docs/metrics.md). The control variable is
concurrency: a level keeps N requests in flight (each stream sends its next request when its last
one ends) and is judged from its steady state. Which requests count is fixed by the order they
were sent: each stream's first request (the burst that fills the level) is its warm-up, not
judged; the next max(`min_requests`, N) requests sent are judged, every one waited for; a level
still unresolved then is judged again over the next 2x, 4x ... `min_requests` sent, up to
`max_requests`; requests sent after the judged ones are cut (awaited, excluded). A request is good
when it meets every limit of the SLO (TTFT, ITL, optionally E2E), a miss when it completed outside
one or failed. A level passes when the Wilson 95 % interval of its attainment lies at or above the
target, fails when it lies below, and is `unresolved` (never a bound) when it straddles it.

The search starts at `initial_streams`, doubles until a level fails (capped at `max_streams` and at
the planner's memory fit), then bisects between the best pass and the lowest fail above it until
`fail - pass <= max(1, 0.1 x pass)`, probing at most `max_probes` levels. `search` is the pure
logic over any level-measurer; `measure_level` measures one level against a served endpoint.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from autotune.bench.client import ChatClient
from autotune.bench.throughput import MeasurementFailed, decode_args, decoded_fully, load_prompts, user
from autotune.models import (
    CapacityReport,
    LevelResult,
    LevelVerdict,
    Measurement,
    RequestResult,
    SearchStop,
    Slo,
    Workload,
)

#: streams -> that level's result
LevelMeasurer = Callable[[int], Awaitable[LevelResult]]


def streams_held(pool_tokens: int, request_tokens: int) -> int:
    """Requests of `request_tokens` tokens a KV pool of `pool_tokens` holds; at least one (the engine
    starts only when one full context fits)."""
    return max(pool_tokens // request_tokens, 1)


def wilson_interval(good: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a share of good requests (scipy's binomtest)."""
    from scipy.stats import binomtest

    ci = binomtest(good, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def tolerance(best: int) -> float:
    """The bisection's resolution at a capacity: max(1, 0.1 x capacity) streams."""
    return max(1.0, 0.1 * best)


def tied(a: int, b: int) -> bool:
    """Two capacities closer than the bisection tolerance (at the larger) are tied."""
    return abs(a - b) < tolerance(max(a, b))


def itl_ms(result: RequestResult) -> float | None:
    """Inter-token latency of one request: its decode gap per token, (t_last - t_first) / (n_out - 1)."""
    return result.tpot_ms


def e2e_ms(result: RequestResult) -> float | None:
    return None if result.t_last is None else 1000.0 * (result.t_last - result.t_send)


def failed(result: RequestResult, workload: Workload) -> bool:
    return not result.ok or not decoded_fully(result, workload)


def good(result: RequestResult, slo: Slo, workload: Workload) -> bool:
    """Meets every limit the SLO sets. A one-token reply has no inter-token gap to judge."""
    if failed(result, workload) or result.ttft_ms is None or result.ttft_ms > slo.ttft_ms:
        return False
    itl = itl_ms(result)
    if itl is not None and itl > slo.itl_ms:
        return False
    e2e = e2e_ms(result)
    return slo.e2e_ms is None or (e2e is not None and e2e <= slo.e2e_ms)


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def judge(attainment_low: float, attainment_high: float, target: float) -> LevelVerdict:
    if attainment_low >= target:
        return LevelVerdict.PASS
    if attainment_high < target:
        return LevelVerdict.FAIL
    return LevelVerdict.UNRESOLVED


def attainment_of(determined: list[RequestResult], slo: Slo, workload: Workload) -> tuple[int, float, float]:
    """(good requests, the Wilson 95 % interval of their share); (0, 0, 1) for none."""
    n_good = sum(good(r, slo, workload) for r in determined)
    low, high = wilson_interval(n_good, len(determined)) if determined else (0.0, 1.0)
    return n_good, low, high


@functools.lru_cache(maxsize=256)
def misses_that_fail(judged: int, target: float) -> int:
    """The fewest misses among `judged` requests that fail a level whatever the others are: even all
    of them good, the top of the Wilson interval ends below the target (judged + 1 when none do).
    Worked out once per judged count: scipy's interval costs ~0.5 ms, the client's loop reads streams."""
    return bisect.bisect_left(range(judged + 1), True, key=lambda m: wilson_interval(judged - m, judged)[1] < target)


def fails_whatever_is_left(determined: list[RequestResult], left: int, slo: Slo, workload: Workload) -> bool:
    """The level fails whatever its `left` judged requests still out do: even all of them good, the
    interval would end below the target (the verdict waiting would give), and so does the interval of
    the judged ones in (the verdict its record shows)."""
    n_good = sum(good(r, slo, workload) for r in determined)
    return (left > 0 and len(determined) - n_good >= misses_that_fail(len(determined) + left, slo.attainment)
            and wilson_interval(n_good, len(determined))[1] < slo.attainment)


def level_of(
    streams: int, determined: list[RequestResult], excluded: int, slo: Slo, workload: Workload, seconds: float,
    output_tokens: float, unawaited: int = 0,
) -> LevelResult:
    """One level's record from its judged requests, and the output tokens its window streamed."""
    n_good, low, high = attainment_of(determined, slo, workload)
    n_failed = sum(failed(r, workload) for r in determined)
    n = len(determined)
    completed = [r for r in determined if not failed(r, workload)]
    ttfts = [r.ttft_ms for r in completed if r.ttft_ms is not None]
    itls = [v for v in map(itl_ms, completed) if v is not None]
    return LevelResult(
        streams=streams, good=n_good, slow=n - n_good - n_failed, failed=n_failed, excluded=excluded,
        attainment=round(n_good / n, 4) if n else 0.0, interval=(round(low, 4), round(high, 4)),
        verdict=judge(low, high, slo.attainment) if n else LevelVerdict.UNRESOLVED,
        output_tps=round(output_tokens / seconds, 3) if seconds > 0 else 0.0,
        p99_ttft_ms=None if not ttfts else round(p99(ttfts) or 0.0, 2),
        p99_itl_ms=None if not itls else round(p99(itls) or 0.0, 3),
        seconds=round(seconds, 3), unawaited=unawaited,
    )


def workload_prompts(workload: Workload) -> list[str]:
    """The prompts a level cycles through: the first `prompts_per_set` of each of the workload's sets."""
    sets = workload.prompt_sets or ["prose"]
    return [p.prompt for name in sets for p in load_prompts(name)[: workload.prompts_per_set]]


@dataclass
class _Level:
    """One level's requests by the order they were sent: index < streams is the burst that fills
    the level (its warm-up), [streams, streams + judged) are judged, the rest are cut."""

    streams: int
    looks: list[int]
    results: dict[int, RequestResult] = field(default_factory=dict)
    judged: int = 0  # the current size of the judged range

    def __post_init__(self) -> None:
        self.judged = self.looks.pop(0)

    def is_judged(self, index: int) -> bool:
        return self.streams <= index < self.streams + self.judged

    def judged_results(self) -> list[RequestResult]:
        return [r for i, r in sorted(self.results.items()) if self.is_judged(i)]

    def complete(self, resolved: Callable[[list[RequestResult]], bool],
                 hopeless: Callable[[list[RequestResult], int], bool] | None = None) -> bool:
        """Every judged request has ended, and the level is resolved or has no later look; widens the
        judged range to the next look when it is complete but unresolved. Also true, before every
        judged request has ended, once the level fails whatever the rest do (`hopeless`, when given)."""
        while True:
            judged = self.judged_results()
            if len(judged) < self.judged:
                return hopeless is not None and hopeless(judged, self.judged - len(judged))
            if not self.looks or resolved(judged):
                return True
            self.judged = self.looks.pop(0)

    def sent_outside(self, sent: int) -> int:
        """Requests sent outside the judged range: the burst that fills the level and those cut after it."""
        return sent - max(0, min(sent, self.streams + self.judged) - self.streams)


def steady_window(judged: list[RequestResult], every: list[RequestResult]) -> tuple[float, float]:
    """(seconds, output tokens) of the level's steady state: from the first judged request's send to
    the last one's end, counting the tokens every request of the level (burst and cut ones too)
    streamed inside it, each request's tokens spread evenly from its first to its last token."""
    start = min(r.t_send for r in judged)
    end = max(r.t_last or r.t_first or r.t_send for r in judged)
    tokens = 0.0
    for r in every:
        if not r.n_out or r.t_first is None:
            continue
        if start <= r.t_first <= end:
            tokens += 1
        last = r.t_last if r.t_last is not None else r.t_first
        if r.n_out > 1 and last > r.t_first:
            inside = min(end, last) - max(start, r.t_first)
            tokens += max(0.0, inside) / (last - r.t_first) * (r.n_out - 1)
    return end - start, tokens


async def measure_level(
    client: ChatClient, workload: Workload, slo: Slo, streams: int, progress: Callable[[str], None] | None = None,
    *, settle_early: bool = True,
) -> LevelResult:
    """Keep `streams` requests in flight (each stream sends its next request when its last one
    ends) and judge the level from its steady state. Which requests count is fixed by the order
    they were sent, never by the order they finish: each stream's first request (the burst that
    fills the level, and its warm-up at this batch size) is not judged; the next max(min_requests,
    streams) requests sent are, and the level waits for every one of them; while the level is then
    unresolved the judged range grows to `slo.looks()`'s next count. Requests sent after the judged
    range keep the load on and are cut (awaited, excluded). A level that fails whatever its judged
    requests still out do stops there, and they count as unawaited: a config far off the SLO is not
    waited on for a full look at each level down to one stream (unless `settle_early` is off: a
    cross-check against a tool that judges every request of a level). Prompts cycle through the workload's,
    each asking for `decode_max_tokens` (exactly, with `fixed_length`)."""
    prompts = workload_prompts(workload)
    level = _Level(streams, sorted({max(n, streams) for n in slo.looks()}))
    every: list[RequestResult] = []
    sent = [0]
    done = asyncio.Event()

    def resolved(judged: list[RequestResult]) -> bool:
        _, low, high = attainment_of(judged, slo, workload)
        return judge(low, high, slo.attainment) is not LevelVerdict.UNRESOLVED

    def hopeless(judged: list[RequestResult], left: int) -> bool:
        return fails_whatever_is_left(judged, left, slo, workload)

    async def stream() -> None:
        while not done.is_set():
            i = sent[0]
            sent[0] += 1
            result = await client.chat(
                user(prompts[i % len(prompts)]), max_tokens=workload.decode_max_tokens, **decode_args(workload)
            )
            every.append(result)
            if done.is_set():
                continue
            level.results[i] = result
            # only a miss can settle a fail early: a good request is never checked for it
            settles = hopeless if settle_early and not good(result, slo, workload) else None
            if level.is_judged(i) and level.complete(resolved, settles):
                done.set()

    if progress is not None:
        progress(f"capacity at the SLO: {streams} streams")
    await asyncio.gather(*(stream() for _ in range(streams)))
    judged = level.judged_results()
    seconds, tokens = steady_window(judged, every)
    result = level_of(streams, judged, level.sent_outside(sent[0]), slo, workload, seconds, tokens,
                      unawaited=level.judged - len(judged))
    if progress is not None:
        progress(f"{streams} streams: {result.verdict.value}, attainment {result.attainment:.1%} "
                 f"[{result.interval[0]:.1%}, {result.interval[1]:.1%}], {result.output_tps:.1f} tok/s, "
                 f"{result.counts()}")
    return result


def _bounds(levels: dict[int, LevelResult]) -> tuple[int, int | None]:
    """(best pass, lowest fail above it); 0 when nothing passed, None when nothing above it failed."""
    best = max((n for n, lv in levels.items() if lv.verdict is LevelVerdict.PASS), default=0)
    worst = min((n for n, lv in levels.items() if lv.verdict is LevelVerdict.FAIL and n > best), default=None)
    return best, worst


def _next_level(levels: dict[int, LevelResult], best: int, above: int) -> int | None:
    """The untried level nearest the midpoint of (best, above), lower first; None when none is left.

    When the midpoint itself was probed and stayed unresolved, the level nearest it would tell no
    more than it did: the midpoint of the gap below it (between it and the probed level under it)
    is probed instead, then of the gap above it."""
    mid = (best + above) / 2
    if mid in levels:
        under = max(k for k in [*levels, best] if k < mid)
        over = min(k for k in [*levels, above] if k > mid)
        for low, high in ((under, int(mid)), (int(mid), over)):
            if high - low > 1:
                return _next_level(levels, low, high)
    left = sorted((k for k in range(best + 1, above) if k not in levels), key=lambda k: (abs(k - mid), k))
    return left[0] if left else None


async def search(slo: Slo, measure: LevelMeasurer, fit_streams: int | None = None) -> CapacityReport:
    """Double from initial_streams until a level fails, then bisect; every level probed is kept."""
    cap = max(1, min(slo.max_streams, fit_streams)) if fit_streams is not None else slo.max_streams
    levels: dict[int, LevelResult] = {}
    order: list[LevelResult] = []

    async def probe(n: int) -> None:
        result = await measure(n)
        levels[n] = result
        order.append(result)

    n = min(slo.initial_streams, cap)
    stop: SearchStop | None = None
    while stop is None:  # doubling
        if len(order) >= slo.max_probes:
            stop = SearchStop.MAX_PROBES
            break
        await probe(n)
        best, worst = _bounds(levels)
        if worst is not None:
            break
        if n >= cap:
            stop = SearchStop.MAX_STREAMS if best == cap else None
            break
        n = min(2 * n, cap)
    while stop is None:  # bisection
        best, worst = _bounds(levels)
        if worst is not None and worst - best <= tolerance(best):
            stop = SearchStop.NONE_PASSED if best == 0 else SearchStop.RESOLVED
        elif worst is None and best == cap:
            stop = SearchStop.MAX_STREAMS
        elif len(order) >= slo.max_probes:
            stop = SearchStop.MAX_PROBES
        else:
            nxt = _next_level(levels, best, worst if worst is not None else cap + 1)
            if nxt is None:
                stop = SearchStop.NO_LEVEL_LEFT
            else:
                await probe(nxt)
    best, _ = _bounds(levels)
    return CapacityReport(slo=slo, levels=order, capacity=best, tolerance=tolerance(best), stop=stop,
                          fit_streams=fit_streams)


#: the failure class of a trial whose engine served but met the SLO at no level
SLO_UNMET = "slo_unmet"


class SloUnmet(MeasurementFailed):
    """Not one level met the SLO (one stream failed it): the trial fails, its levels kept."""

    def __init__(self, report: CapacityReport) -> None:
        self.report = report
        first = report.levels[0] if report.levels else None
        where = (f"; {first.streams} stream(s): attainment {first.attainment:.1%} [{first.interval[0]:.1%}, "
                 f"{first.interval[1]:.1%}], P99 TTFT {first.p99_ttft_ms} ms, P99 ITL {first.p99_itl_ms} ms"
                 if first else "")
        lowest = min(report.levels, key=lambda lv: lv.streams) if report.levels else None
        if lowest is not None and lowest is not first:
            where += (f"; {lowest.streams} stream(s): attainment {lowest.attainment:.1%} "
                      f"[{lowest.interval[0]:.1%}, {lowest.interval[1]:.1%}]")
        super().__init__(f"no concurrency level met the SLO ({report.slo.describe()}){where}")


async def fit_streams(client: ChatClient, workload: Workload, kv_pool_tokens: int | None) -> int | None:
    """The memory-fit bound on streams: the planner's KV pool over the tokens one request holds (its
    longest prompt by the engine's tokenizer, plus decode_max_tokens). None when the pool is unknown."""
    if kv_pool_tokens is None:
        return None
    longest = max([await client.count_tokens(p) for p in workload_prompts(workload)])
    return streams_held(kv_pool_tokens, longest + workload.decode_max_tokens)


def measurements(report: CapacityReport) -> list[Measurement]:
    """What a search adds to a trial's measurements: the capacity, and the output at it."""
    condition = (f"most concurrent streams with {report.slo.describe()}, each level judged over the requests "
                 f"sent after every stream's first, >= max({report.slo.min_requests}, streams) of them "
                 f"(Wilson 95% interval at or above the target); "
                 f"{len(report.levels)} level(s) probed, {report.stop.value}")
    out = [Measurement.of("capacity_at_slo", "streams", condition, [float(report.capacity)])]
    head = report.at_capacity
    if head is not None:
        out.append(Measurement.of(
            "output_tps.slo", "tok/s",
            f"aggregate output tok/s at the capacity ({report.capacity} streams in flight), over the window of its "
            f"{head.determined} judged requests ({head.seconds:g} s)", [head.output_tps]))
    return out
