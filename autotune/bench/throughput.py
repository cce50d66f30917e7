"""Throughput inside one engine launch: single-stream decode on prose and structured prompts,
TTFT, cold prefill at several depths, aggregate output at concurrency > 1.

Measuring only: requests go through a ChatClient, results come back as Measurement records with
the condition each was measured under. Scoring and printing happen elsewhere.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import uuid
from collections.abc import Awaitable, Callable
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict

from autotune.bench.client import ChatClient
from autotune.bench.needle import Haystack, fit_sentence_count
from autotune.models import Measurement, Objective, Quantity, RequestResult, Workload, tps_measurement

PromptBuilder = Callable[[int, str], Awaitable[str]]


class Prompt(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    prompt: str


def load_prompts(set_name: str) -> list[Prompt]:
    text = resources.files("autotune.bench.prompts").joinpath(f"{set_name}.yaml").read_text()
    return [Prompt.model_validate(item) for item in yaml.safe_load(text)]


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _failed_detail(results: list[RequestResult]) -> str:
    errors = [r.error for r in results if not r.ok and r.error]
    return errors[0] if errors else "no successful request"


class MeasurementFailed(RuntimeError):
    """A workload's requests failed beyond what the space tolerates: the config does not serve."""


def check_errors(what: str, results: list[RequestResult], workload: Workload, decode: bool = False) -> None:
    """Raise when more requests failed than `workload.tolerated_error_rate` allows (default: any).
    With `decode`, a fixed-length request that came back short counts as failed too."""
    failed = [r for r in results if not r.ok or (decode and not decoded_fully(r, workload))]
    if failed and len(failed) > workload.tolerated_error_rate * len(results):
        first = next((r.error for r in failed if r.error), None) or (
            f"{failed[0].n_out} of exactly {workload.decode_max_tokens} tokens"
        )
        raise MeasurementFailed(f"{what}: {len(failed)} of {len(results)} requests failed; first error: {first}")


def decode_args(workload: Workload) -> dict[str, object]:
    """Extra request fields for decode: fixed-length decoding asks for exactly decode_max_tokens."""
    if not workload.fixed_length:
        return {}
    return {"ignore_eos": True, "min_tokens": workload.decode_max_tokens}


def length_condition(workload: Workload) -> str:
    n = workload.decode_max_tokens
    length = f"exactly {n} output tokens (ignore_eos, min_tokens)" if workload.fixed_length else f"up to {n} output tokens"
    return length + (", raw prompts to /v1/completions" if workload.request_style == "completion" else "")


class CompletionRequests:
    """A client whose chat requests go out as raw prompts to /v1/completions (the user turn's text,
    no chat template): throughput under `workload.request_style: completion`."""

    def __init__(self, client: ChatClient) -> None:
        self._client = client

    async def chat(self, messages: list[dict[str, str]], max_tokens: int, **extra: object) -> RequestResult:
        return await self._client.complete("\n".join(m["content"] for m in messages), max_tokens, **extra)

    async def complete(self, prompt: str, max_tokens: int, **extra: object) -> RequestResult:
        return await self._client.complete(prompt, max_tokens, **extra)

    async def count_tokens(self, text: str) -> int:
        return await self._client.count_tokens(text)


def requests_for(client: ChatClient, workload: Workload) -> ChatClient:
    """The client throughput requests go through, in the workload's request style."""
    return CompletionRequests(client) if workload.request_style == "completion" else client


def decoded_fully(result: RequestResult, workload: Workload) -> bool:
    """A fixed-length request that came back shorter did not do what was measured: it counts as failed."""
    return not workload.fixed_length or result.n_out == workload.decode_max_tokens


async def warm_up(client: ChatClient, workload: Workload) -> None:
    prompts = load_prompts("prose")
    for i in range(workload.warmup_requests):
        await client.chat(user(prompts[i % len(prompts)].prompt), max_tokens=16)


async def warm_wave(client: ChatClient, workload: Workload, streams: int) -> None:
    """`streams` short requests at once, not measured, before a wave or level of that many: an
    engine can compile kernels at its first steps of a batch size (vLLM 0.26.0 on the H200: Triton's
    fused_moe_kernel inside a measured 8-stream wave). Skipped with `warmup_requests: 0`."""
    if workload.warmup_requests <= 0 or streams <= 1:
        return
    prompts = load_prompts("prose")
    await asyncio.gather(*(client.chat(user(prompts[i % len(prompts)].prompt), max_tokens=16) for i in range(streams)))


async def measure_decode(client: ChatClient, set_name: str, workload: Workload) -> list[Measurement]:
    """Passes over the prompt set; each pass gives the geometric mean of per-prompt decode tok/s."""
    prompts = load_prompts(set_name)[: workload.prompts_per_set]
    per_pass: list[float] = []
    ttfts: list[float] = []
    tpots: list[float] = []
    chunk_ratio: list[float] = []
    failed = 0
    results: list[RequestResult] = []
    for _ in range(workload.repeats):
        rates: list[float] = []
        for prompt in prompts:
            result = await client.chat(
                user(prompt.prompt), max_tokens=workload.decode_max_tokens, **decode_args(workload)
            )
            results.append(result)
            if not result.ok or result.decode_tps is None or not decoded_fully(result, workload):
                failed += 1
                continue
            rates.append(result.decode_tps)
            ttfts.append(result.ttft_ms or 0.0)
            tpots.append(result.tpot_ms or 0.0)
            if result.n_out and result.n_chunks > 1:
                chunk_ratio.append((result.n_out - 1) / (result.n_chunks - 1))
        if rates:
            per_pass.append(geomean(rates))
    check_errors(f"{set_name} decode", results, workload, decode=True)
    if not per_pass:
        raise MeasurementFailed(f"{set_name} decode: {_failed_detail(results)}")
    setting = f"1 stream, {set_name} prompts ({len(prompts)}), {length_condition(workload)}, greedy"
    per_request = f"{setting}; median over {len(ttfts)} requests"
    out = [
        Measurement.of(
            tps_measurement(set_name),
            "tok/s",
            f"decode tok/s, {setting}; median of {len(per_pass)} passes, each the geometric mean over prompts",
            per_pass,
            failed,
        ),
        Measurement.of(f"ttft_ms.{set_name}", "ms", f"TTFT, {per_request}", ttfts),
        Measurement.of(f"tpot_ms.{set_name}", "ms", f"TPOT, {per_request}", tpots),
    ]
    if chunk_ratio:
        out.append(
            Measurement.of(
                f"tokens_per_chunk.{set_name}",
                "tokens",
                f"tokens per streamed chunk (>1 means drafted tokens arrive together), {per_request}",
                chunk_ratio,
            )
        )
    return out


def filler_prompt_builder(client: ChatClient, seed: int = 7) -> PromptBuilder:
    """Prompts of a target length in the engine's own tokens: salt line, filler sentences, a
    one-line request. The sentence count is fitted with the engine's tokenizer for every prompt."""
    haystack = Haystack(seed)

    def compose(salt: str, n: int) -> str:
        return f"{salt}\n" + " ".join(haystack.sentences(n)) + "\n\nSummarize the text above in one sentence."

    async def build(target_tokens: int, salt: str) -> str:
        async def count(n: int) -> int:
            return await client.count_tokens(compose(salt, n))

        n, _ = await fit_sentence_count(count, target_tokens)
        return compose(salt, n)

    return build


async def prefill_overhead_ms(client: ChatClient) -> float:
    """Median TTFT of three tiny cold prompts: the fixed cost subtracted from long-prompt TTFT."""
    ttfts = []
    for _ in range(3):
        result = await client.chat(user(f"{uuid.uuid4().hex[:8]} Say yes."), max_tokens=2)
        if result.ok and result.ttft_ms is not None:
            ttfts.append(result.ttft_ms)
    return statistics.median(ttfts) if ttfts else 0.0


async def measure_prefill(
    client: ChatClient, workload: Workload, build_prompt: PromptBuilder, context_tokens: int
) -> list[Measurement]:
    """Cold prefill tok/s at each depth that fits: prompt_tokens / (TTFT - fixed overhead)."""
    overhead = await prefill_overhead_ms(client)
    out: list[Measurement] = []
    for depth in workload.prefill_tokens:
        if depth + 64 > context_tokens:
            continue
        rates: list[float] = []
        n_in_seen: list[int] = []
        failed = 0
        results: list[RequestResult] = []
        for _ in range(workload.prefill_repeats):
            salt = uuid.uuid4().hex
            text = await build_prompt(depth, salt)
            result = await client.chat(user(text), max_tokens=2)
            results.append(result)
            if not result.ok or result.ttft_ms is None:
                failed += 1
                continue
            n_in = result.n_in or await client.count_tokens(text)
            correction = min(overhead, 0.8 * result.ttft_ms)
            rates.append(n_in / ((result.ttft_ms - correction) / 1000.0))
            n_in_seen.append(n_in)
        check_errors(f"cold prefill at {depth} tokens", results, workload)
        if rates:
            out.append(
                Measurement.of(
                    f"prefill_tps.{depth}",
                    "tok/s",
                    f"cold prefill tok/s, ~{statistics.median(n_in_seen):.0f} prompt tokens, unique salt "
                    f"first (no prefix-cache hits), (TTFT - {overhead:.0f} ms overhead); "
                    f"median of {len(rates)}",
                    rates,
                    failed,
                )
            )
    return out


async def measure_concurrency(client: ChatClient, workload: Workload) -> list[Measurement]:
    """Aggregate output tok/s with c requests in flight: sum(n_out) / (last token - first send)."""
    prompts = load_prompts("prose")
    out: list[Measurement] = []
    for level in workload.concurrency:
        if level <= 1:
            continue
        batch = [user(prompts[i % len(prompts)].prompt) for i in range(level)]
        results = await asyncio.gather(
            *(client.chat(m, max_tokens=workload.decode_max_tokens, **decode_args(workload)) for m in batch)
        )
        check_errors(f"concurrency {level}", list(results), workload, decode=True)
        ok = [r for r in results if r.ok and r.t_last is not None and r.n_out and decoded_fully(r, workload)]
        if not ok:
            continue
        span = max(r.t_last for r in ok if r.t_last) - min(r.t_send for r in ok)
        total = sum(r.n_out or 0 for r in ok)
        out.append(
            Measurement.of(
                tps_measurement(f"c{level}"),
                "tok/s",
                f"aggregate output tok/s, {level} concurrent prose requests, "
                f"{length_condition(workload)} each; one wave",
                [total / span],
                failed=len(results) - len(ok),
            )
        )
    return out


async def measure_long_decode(
    client: ChatClient, workload: Workload, build_prompt: PromptBuilder, context_tokens: int
) -> list[Measurement]:
    """One stream decoding after a long cold prompt: decode tok/s (every step reads the whole KV
    cache, so the KV dtype shows) and the TTFT of that prompt, `prefill_repeats` times per length."""
    out: list[Measurement] = []
    for depth in workload.decode_context_tokens:
        if depth + workload.decode_max_tokens + 64 > context_tokens:
            continue
        rates: list[float] = []
        ttfts: list[float] = []
        n_in_seen: list[int] = []
        results: list[RequestResult] = []
        for _ in range(workload.prefill_repeats):
            text = await build_prompt(depth, uuid.uuid4().hex)
            result = await client.chat(user(text), max_tokens=workload.decode_max_tokens, **decode_args(workload))
            results.append(result)
            if not result.ok or result.decode_tps is None or not decoded_fully(result, workload):
                continue
            rates.append(result.decode_tps)
            ttfts.append(result.ttft_ms or 0.0)
            n_in_seen.append(result.n_in or 0)
        failed = len(results) - len(rates)
        check_errors(f"decode after {depth} prompt tokens", results, workload, decode=True)
        if not rates:
            raise MeasurementFailed(f"decode after {depth} prompt tokens: {_failed_detail(results)}")
        setting = (
            f"1 stream after a cold ~{statistics.median(n_in_seen):.0f}-token prompt (unique salt first), "
            f"{length_condition(workload)}, greedy; median of {len(rates)}"
        )
        out += [
            Measurement.of(f"ctx_decode_tps.{depth}", "tok/s", f"decode tok/s, {setting}", rates, failed),
            Measurement.of(f"ctx_ttft_ms.{depth}", "ms", f"TTFT (prefill of the prompt), {setting}", ttfts, failed),
        ]
    return out


def objective_value(measurements: list[Measurement], objective: Objective) -> tuple[float, float]:
    """(objective, score): objective from the medians, score = objective minus its noise."""
    by_name = {m.name: m for m in measurements}
    metric = objective.metric
    if objective.weighted:
        return weighted_value(by_name, objective)
    name = objective.measurement_name
    if objective.capacity or objective.energy:  # one value per launch: no within-launch spread to take off
        found = by_name.get(name) if name else None
        if found is None:
            why = " (no GPU energy counter or power reading on this host)" if objective.energy else ""
            raise MeasurementFailed(f"objective {metric}: nothing measured{why}")
        return found.median, found.median
    if name is None:  # decode_tps_geomean: every prompt set's decode
        parts = [m for n, m in by_name.items() if n.startswith("decode_tps.")]
    else:
        parts = [by_name[name]] if name in by_name else []
    if not parts:
        raise MeasurementFailed(f"objective {metric}: nothing measured")
    value = geomean([m.median for m in parts])
    # relative noise of a geometric mean ~ mean of the parts' relative MADs
    rel_noise = statistics.fmean(1.4826 * m.mad / m.median for m in parts if m.median > 0)
    return value, value * (1.0 - objective.mad_penalty * rel_noise)


def weighted_value(by_name: dict[str, Measurement], objective: Objective) -> tuple[float, float]:
    """speed_energy: (prod of term ** weight, that minus its noise). The relative noise of a weighted
    geometric mean ~ the weighted sum of the terms' relative MADs (an energy term has none: one
    value per window)."""
    missing = [t for t in objective.terms if t.measurement not in by_name]
    if missing:
        energy = any(t.quantity is Quantity.TOKENS_PER_JOULE for t in missing)
        why = " (no GPU energy counter or power reading on this host)" if energy else ""
        raise MeasurementFailed(f"objective {objective.metric}: {', '.join(t.measurement for t in missing)} not "
                                f"measured{why}")
    parts = [(by_name[t.measurement], t.weight) for t in objective.terms]
    if any(m.median <= 0 for m, _ in parts):
        raise MeasurementFailed(f"objective {objective.metric}: a term is not above 0")
    value = math.exp(sum(w * math.log(m.median) for m, w in parts))
    rel_noise = sum(w * 1.4826 * m.mad / m.median for m, w in parts)
    return value, value * (1.0 - objective.mad_penalty * rel_noise)
