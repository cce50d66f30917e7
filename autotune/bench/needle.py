"""Offline needle-in-a-haystack: can the config still find one fact in a long prompt?

Prompt:

    <salt line>                      unique random words, so every request is a cold prefill
    <instruction line>
    <haystack>                       seeded pseudo-prose sentences (words.py), the needle
                                     "The secret code for <key> is <5-digit code>." inserted
                                     between two sentences at `depth` (fraction of the sentences)
    <question>                       asks for the code of <key>
    [The secret code for <key> is]   completion style only

Two styles. "chat" (default, for instruction-tuned models): the prompt is one user message
(system prompts are not supported by every chat template, e.g. Gemma's). "completion" (for base
models, through a client with `complete`): the prompt ends with the start of the answer
sentence. A base model behind a chat template echoes the user message from its first line
instead of answering (measured with Gemma 3 270M, the CPU test bed), while it completes the
answer sentence from ~900 tokens of context at every depth.

Length: the number of filler sentences is fitted so that the whole prompt (the user message),
counted by the engine's own tokenizer, is the largest that does not exceed the target length
(within one sentence, ~15 tokens); the fit is made once per length, for the middle depth. Each
case records the prompt tokens the server reported (usage, which includes the chat template),
else the fitted count.

Scoring (`score_needle_answer`): after removing <think>...</think>, the answer passes when it
contains the expected 5-digit code and no other 5-digit number (repeating the code is fine;
listing several candidates is not). Thousands separators ("48,213") are accepted. Filler, salt
and instructions contain no digits, so the code is the only number the model can copy.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from autotune.bench import words
from autotune.bench.client import ChatClient, without_thinking
from autotune.errors import AutotuneError, ConfigError
from autotune.models import NeedleCase, NeedleConfig, NeedleReport

NEEDLE_TEXT = "The secret code for {key} is {code}."
INSTRUCTION = "Read the text below. Somewhere in it is a secret code. Answer the question at the end."
QUESTION = "What is the secret code for {key}? Reply with the 5-digit code only."
ANSWER_START = "The secret code for {key} is"

PromptStyle = Literal["chat", "completion"]


# Room left in the context for what the user message does not contain: the chat template around
# it (BOS, role markers) and the answer (cfg.max_tokens is added on top).
TEMPLATE_RESERVE_TOKENS = 64
# First guess of tokens per filler sentence, corrected after the first measurement.
GUESS_TOKENS_PER_SENTENCE = 14
MAX_COUNT_CALLS = 64

_CODE = re.compile(r"(?<!\d)\d{5}(?!\d)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


@dataclass(frozen=True)
class Needle:
    key: str
    code: str
    depth: float

    @property
    def text(self) -> str:
        return NEEDLE_TEXT.format(key=self.key, code=self.code)


class Haystack:
    """A seeded, endless stream of filler sentences; the first n are the same for every n."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(f"haystack-{seed}")
        self._sentences: list[str] = []

    def sentences(self, n: int) -> list[str]:
        while len(self._sentences) < n:
            self._sentences.append(self._sentence())
        return self._sentences[:n]

    def _sentence(self) -> str:
        r = self._rng
        adj, noun = words.FILLER_ADJECTIVES, words.FILLER_NOUNS
        form = r.randrange(4)
        if form == 0:
            text = (
                f"the {r.choice(adj)} {r.choice(noun)} {r.choice(words.FILLER_INTRANSITIVE_VERBS)} "
                f"{r.choice(words.FILLER_PREPOSITIONS)} the {r.choice(noun)} {r.choice(words.FILLER_TIMES)}"
            )
        elif form == 1:
            text = (
                f"every {r.choice(noun)} {r.choice(words.FILLER_TRANSITIVE_VERBS)} a {r.choice(adj)} "
                f"{r.choice(noun)} {r.choice(words.FILLER_PREPOSITIONS)} the {r.choice(adj)} {r.choice(noun)}"
            )
        elif form == 2:
            text = (
                f"{r.choice(words.FILLER_TIMES)} the {r.choice(noun)} "
                f"{r.choice(words.FILLER_TRANSITIVE_VERBS)} "
                f"the {r.choice(adj)} {r.choice(noun)} and {r.choice(words.FILLER_INTRANSITIVE_VERBS)}"
            )
        else:
            text = (
                f"a {r.choice(adj)} {r.choice(noun)} {r.choice(words.FILLER_INTRANSITIVE_VERBS)} "
                f"{r.choice(words.FILLER_PREPOSITIONS)} a {r.choice(adj)} {r.choice(noun)} while the "
                f"{r.choice(noun)} {r.choice(words.FILLER_INTRANSITIVE_VERBS)}"
            )
        return text[0].upper() + text[1:] + "."


def make_salt(rng: random.Random) -> str:
    """A unique first line (random filler words, no digits) so no prefix cache can match."""
    picks = [rng.choice(words.FILLER_NOUNS + words.FILLER_ADJECTIVES) for _ in range(8)]
    return "Session " + " ".join(picks) + "."


def insert_needles(filler: list[str], needles: list[Needle]) -> list[str]:
    """Put each needle between sentences at round(depth * len(filler)); depth 0 = first, 1 = last."""
    for needle in needles:
        if not 0.0 <= needle.depth <= 1.0:
            raise ConfigError(f"needle depth {needle.depth} is outside 0..1")
    slots: dict[int, list[str]] = {}
    for needle in needles:
        slots.setdefault(round(needle.depth * len(filler)), []).append(needle.text)
    out: list[str] = []
    for index in range(len(filler) + 1):
        out.extend(slots.get(index, []))
        if index < len(filler):
            out.append(filler[index])
    return out


def build_prompt(
    salt: str, filler: list[str], needles: list[Needle], ask: str, style: PromptStyle = "chat"
) -> str:
    """The whole prompt. Asserts every needle appears exactly once and `ask` is a needle key."""
    body = " ".join(insert_needles(filler, needles))
    prompt = f"{salt}\n{INSTRUCTION}\n\n{body}\n\n{QUESTION.format(key=ask)}"
    if style == "completion":
        prompt += "\n" + ANSWER_START.format(key=ask)
    for needle in needles:
        if prompt.count(needle.text) != 1 or prompt.count(needle.code) != 1:
            raise AssertionError(f"needle for {needle.key} is not in the prompt exactly once")
    if ask not in {n.key for n in needles}:
        raise AssertionError(f"question asks for {ask}, which has no needle")
    return prompt


def score_needle_answer(answer: str, expected: str) -> bool:
    """Pass when `expected` is the only distinct 5-digit number in the answer (see module doc)."""
    text = _THOUSANDS.sub("", without_thinking(answer))
    found = set(_CODE.findall(text))
    return found == {expected}


def default_lengths(context_tokens: int, cfg: NeedleConfig) -> list[int]:
    """Haystack lengths (tokens of the user message) to test, increasing.

    `cfg.lengths_tokens` when set, else `cfg.length_fractions` of the context size; each is capped
    so that the chat template and `cfg.max_tokens` of answer still fit in `context_tokens`.
    """
    if context_tokens <= 0:
        raise ConfigError(f"context size must be positive, got {context_tokens}")
    room = context_tokens - cfg.max_tokens - TEMPLATE_RESERVE_TOKENS
    if room <= 0:
        raise ConfigError(
            f"context of {context_tokens} tokens leaves no room for a needle prompt "
            f"(answer {cfg.max_tokens} + template {TEMPLATE_RESERVE_TOKENS} tokens)"
        )
    if cfg.lengths_tokens:
        too_long = [n for n in cfg.lengths_tokens if n > room]
        if too_long:
            raise ConfigError(
                f"needle lengths {too_long} do not fit a {context_tokens}-token context "
                f"(at most {room} with the answer and chat template)"
            )
        lengths = list(cfg.lengths_tokens)
    else:
        lengths = [min(int(f * context_tokens), room) for f in cfg.length_fractions]
    bad = [n for n in lengths if n <= 0]
    if bad:
        raise ConfigError(f"needle lengths must be positive, got {bad}")
    return sorted(set(lengths))


async def fit_sentence_count(count: Callable[[int], Awaitable[int]], target: int) -> tuple[int, int]:
    """Largest n with count(n) <= target, and count(n).

    `count(n)` is the token count of the prompt with n filler sentences (monotone in n). The first
    two calls give tokens per sentence; each next guess is a secant step inside the bracket
    [lo, hi], and a bisection after two steps in a row failed to halve the bracket (so the
    bracket at least halves every third call). Typically 3 to 6 calls.
    """
    known: dict[int, int] = {0: await count(0)}
    if known[0] > target:
        raise ConfigError(
            f"needle length {target} tokens is shorter than the prompt without filler ({known[0]} tokens)"
        )
    lo, hi = 0, None  # count(lo) <= target < count(hi)
    guess = max(1, (target - known[0]) // GUESS_TOKENS_PER_SENTENCE)
    slow_steps = 0
    for _ in range(MAX_COUNT_CALLS):
        if hi is not None and hi - lo <= 1:
            return lo, known[lo]
        if hi is None:
            guess = max(guess, lo + 1)
        else:
            guess = (lo + hi) // 2 if slow_steps >= 2 else min(max(guess, lo + 1), hi - 1)
        width = None if hi is None else hi - lo
        known[guess] = await count(guess)
        if known[guess] <= target:
            lo = guess
        else:
            hi = guess
        if width is not None and hi is not None and (hi - lo) * 2 > width:
            slow_steps += 1
        else:
            slow_steps = 0
        a, b = (lo, hi) if hi is not None else (0, lo)
        rate = max((known[b] - known[a]) / (b - a), 1e-9)
        guess = lo + int((target - known[lo]) / rate)
    raise AssertionError(f"sentence fit did not converge in {MAX_COUNT_CALLS} tokenizer calls")


@dataclass(frozen=True)
class _Plan:
    length: int
    depth: float
    needle: Needle


def _plan_cases(lengths: list[int], depths: list[float], seed: int) -> list[_Plan]:
    rng = random.Random(f"needles-{seed}")
    n = len(lengths) * len(depths)
    order = list(words.NEEDLE_KEYS)
    rng.shuffle(order)
    keys = [order[i % len(order)] for i in range(n)]  # one needle per prompt: repeats are harmless
    codes = [str(c) for c in rng.sample(range(10000, 100000), n)]
    grid = [(length, depth) for length in lengths for depth in depths]
    return [_Plan(length, depth, Needle(keys[i], codes[i], depth)) for i, (length, depth) in enumerate(grid)]


def _prompt_counter(
    client: ChatClient, haystack: Haystack, probe: Needle, salt_rng: random.Random, style: PromptStyle
) -> Callable[[int], Awaitable[int]]:
    """count(n): engine tokens of the prompt with n filler sentences and the probe needle."""

    async def count(n: int) -> int:
        prompt = build_prompt(make_salt(salt_rng), haystack.sentences(n), [probe], probe.key, style)
        return await client.count_tokens(prompt)

    return count


async def run_needle(
    client: ChatClient,
    cfg: NeedleConfig,
    context_tokens: int,
    seed: int = 0,
    *,
    style: PromptStyle = "chat",
    request_extra: dict[str, Any] | None = None,
    salt_rng: random.Random | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> NeedleReport:
    """Every length x depth once (lengths increasing), within `cfg.timeout_s` overall.

    Cases left when the time is up fail with answer "timeout"; a failed request or tokenizer call
    fails its case(s) with the error as the answer. `request_extra` goes into every request (e.g.
    chat_template_kwargs to turn thinking off). `style` is explained in the module doc;
    "completion" sends the prompt through `complete` (/v1/completions).
    """
    lengths = default_lengths(context_tokens, cfg)
    depths = sorted(set(cfg.depths))
    plans = _plan_cases(lengths, depths, seed)
    salt_rng = salt_rng or random.SystemRandom()
    haystack = Haystack(seed)
    deadline = clock() + cfg.timeout_s
    extra = request_extra or {}
    cases: list[NeedleCase] = []

    def failed(plan: _Plan, answer: str, prompt_tokens: int = 0) -> NeedleCase:
        return NeedleCase(
            length_tokens=plan.length,
            prompt_tokens=prompt_tokens,
            depth=plan.depth,
            passed=False,
            expected=plan.needle.code,
            answer=answer,
        )

    for length in lengths:
        todo = [p for p in plans if p.length == length]
        count = _prompt_counter(client, haystack, todo[len(todo) // 2].needle, salt_rng, style)
        try:
            n_sentences, fitted_tokens = await asyncio.wait_for(
                fit_sentence_count(count, length), max(deadline - clock(), 0.0)
            )
        except TimeoutError:
            cases.extend(failed(p, "timeout") for p in todo)
            continue
        except AutotuneError:
            raise
        except Exception as exc:  # the engine's tokenizer failed: data, not a crash
            cases.extend(failed(p, f"error: tokenizer: {type(exc).__name__}: {exc}") for p in todo)
            continue

        for plan in todo:
            prompt = build_prompt(
                make_salt(salt_rng), haystack.sentences(n_sentences), [plan.needle], plan.needle.key, style
            )
            remaining = deadline - clock()
            if remaining <= 0:
                cases.append(failed(plan, "timeout", fitted_tokens))
                continue
            if style == "completion":
                request = client.complete(prompt, cfg.max_tokens, **extra)
            else:
                request = client.chat([{"role": "user", "content": prompt}], cfg.max_tokens, **extra)
            try:
                result = await asyncio.wait_for(request, remaining)
            except TimeoutError:
                cases.append(failed(plan, "timeout", fitted_tokens))
                continue
            prompt_tokens = result.n_in if result.n_in is not None else fitted_tokens
            if not result.ok:
                cases.append(failed(plan, f"error: {result.error}", prompt_tokens))
                continue
            cases.append(
                NeedleCase(
                    length_tokens=length,
                    prompt_tokens=prompt_tokens,
                    depth=plan.depth,
                    passed=score_needle_answer(result.text, plan.needle.code),
                    expected=plan.needle.code,
                    answer=result.text.strip()[:200],
                )
            )

    passing = [n for n in lengths if all(c.passed for c in cases if c.length_tokens == n)]
    return NeedleReport(cases=cases, max_pass_length=max(passing) if passing else None)
