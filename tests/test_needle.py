"""Needle-in-a-haystack: prompt construction, length fitting, scoring and the run loop (no engine)."""

from __future__ import annotations

import asyncio
import random
import re
from typing import Any

import pytest

from autotune.bench import needle, words
from autotune.bench.needle import (
    Haystack,
    Needle,
    build_prompt,
    default_lengths,
    fit_sentence_count,
    insert_needles,
    make_salt,
    run_needle,
    score_needle_answer,
)
from autotune.errors import ConfigError
from autotune.models import NeedleConfig, RequestResult


def toy_tokens(text: str) -> int:
    """A stand-in tokenizer: words and punctuation marks."""
    return len(re.findall(r"\w+|[^\w\s]", text))


class ScriptedClient:
    """A perfect reader up to `reads_up_to` tokens: answers with the code of the asked key."""

    def __init__(self, reads_up_to: int = 10**9, report_usage: bool = True) -> None:
        self.reads_up_to = reads_up_to
        self.report_usage = report_usage
        self.prompts: list[str] = []
        self.count_calls = 0

    async def count_tokens(self, text: str) -> int:
        self.count_calls += 1
        return toy_tokens(text)

    def _answer(self, prompt: str) -> RequestResult:
        self.prompts.append(prompt)
        n_in = toy_tokens(prompt) + 5  # the chat template adds a few tokens
        key = re.search(r"What is the secret code for (\w+)\?", prompt).group(1)
        code = re.search(rf"The secret code for {key} is (\d{{5}})\.", prompt).group(1)
        text = f"The code is {code}." if n_in <= self.reads_up_to else "I could not find it."
        return RequestResult(ok=True, text=text, n_in=n_in if self.report_usage else None, n_out=6)

    async def chat(self, messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> RequestResult:
        assert len(messages) == 1 and messages[0]["role"] == "user"
        return self._answer(messages[0]["content"])


class CompletingClient(ScriptedClient):
    async def complete(self, prompt: str, max_tokens: int, **extra: Any) -> RequestResult:
        assert prompt.rstrip().endswith("is")
        return self._answer(prompt)


def test_word_lists_keep_keys_out_of_the_filler() -> None:
    filler = set(
        words.FILLER_ADJECTIVES
        + words.FILLER_NOUNS
        + words.FILLER_INTRANSITIVE_VERBS
        + words.FILLER_TRANSITIVE_VERBS
        + words.FILLER_PREPOSITIONS
        + tuple(w for phrase in words.FILLER_TIMES for w in phrase.split())
    )
    assert not filler & set(words.NEEDLE_KEYS)
    assert len(set(words.NEEDLE_KEYS)) == len(words.NEEDLE_KEYS)


def test_haystack_is_seeded_prefix_stable_and_digit_free() -> None:
    first = Haystack(7).sentences(200)
    assert Haystack(7).sentences(50) == first[:50]
    assert Haystack(8).sentences(200) != first
    text = " ".join(first)
    assert not re.search(r"\d", text)
    assert not any(key in text.split() for key in words.NEEDLE_KEYS)
    assert all(s[0].isupper() and s.endswith(".") for s in first)


@pytest.mark.parametrize("depth", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_needle_sits_once_at_the_requested_depth(depth: float) -> None:
    filler = Haystack(0).sentences(40)
    item = Needle("otter", "48213", depth)
    sentences = insert_needles(filler, [item])
    assert sentences.count(item.text) == 1
    assert sentences.index(item.text) == round(depth * 40)
    assert [s for s in sentences if s != item.text] == filler

    prompt = build_prompt(make_salt(random.Random(1)), filler, [item], "otter")
    assert prompt.count(item.text) == 1
    assert prompt.count("48213") == 1
    assert prompt.rstrip().endswith("What is the secret code for otter? Reply with the 5-digit code only.")


def test_build_prompt_refuses_a_duplicated_needle() -> None:
    item = Needle("otter", "48213", 0.5)
    filler = [*Haystack(0).sentences(10), item.text]
    with pytest.raises(AssertionError):
        build_prompt("Session x.", filler, [item], "otter")
    with pytest.raises(AssertionError):
        build_prompt("Session x.", Haystack(0).sentences(10), [item], "falcon")


def test_completion_prompt_ends_with_the_answer_sentence() -> None:
    item = Needle("heron", "51234", 0.3)
    prompt = build_prompt("Session x.", Haystack(0).sentences(10), [item], "heron", style="completion")
    assert prompt.endswith("\nThe secret code for heron is")
    assert prompt.count(item.text) == 1


def test_salts_differ_and_carry_no_digits() -> None:
    rng = random.Random(3)
    salts = {make_salt(rng) for _ in range(200)}
    assert len(salts) == 200
    assert not any(re.search(r"\d", s) for s in salts)


@pytest.mark.parametrize("target", [120, 700, 4_000, 33_333, 131_072])
def test_length_fit_finds_the_largest_count_within_few_calls(target: int) -> None:
    rng = random.Random(target)
    sizes = [rng.randint(11, 18) for _ in range(20_000)]
    calls: list[int] = []

    async def count(n: int) -> int:
        calls.append(n)
        return 60 + sum(sizes[:n])

    n, tokens = asyncio.run(fit_sentence_count(count, target))
    assert tokens == 60 + sum(sizes[:n]) <= target
    assert 60 + sum(sizes[: n + 1]) > target
    assert len(calls) <= 10, calls


def test_length_fit_rejects_a_target_below_the_fixed_prompt() -> None:
    async def count(n: int) -> int:
        return 90 + 10 * n

    with pytest.raises(ConfigError, match="shorter than the prompt"):
        asyncio.run(fit_sentence_count(count, 50))


@pytest.mark.parametrize(
    ("answer", "passed"),
    [
        ("48213", True),
        ("The secret code for otter is 48213.", True),
        ("48,213", True),
        ("48213. Again: 48213", True),
        ("<think>could be 11111</think>\n48213", True),
        ("12345", False),
        ("48213 or maybe 12345", False),
        ("482130", False),
        ("4821", False),
        ("", False),
        ("I do not know.", False),
    ],
)
def test_needle_scoring(answer: str, passed: bool) -> None:
    assert score_needle_answer(answer, "48213") is passed


def test_default_lengths_from_fractions_are_capped_to_fit() -> None:
    cfg = NeedleConfig(length_fractions=[0.5, 0.25, 1.0], max_tokens=24)
    room = 2048 - 24 - needle.TEMPLATE_RESERVE_TOKENS
    assert default_lengths(2048, cfg) == [512, 1024, room]


def test_default_lengths_prefer_explicit_lengths() -> None:
    cfg = NeedleConfig(lengths_tokens=[1500, 500, 500])
    assert default_lengths(4096, cfg) == [500, 1500]
    with pytest.raises(ConfigError, match="do not fit"):
        default_lengths(1024, cfg)
    with pytest.raises(ConfigError, match="no room"):
        default_lengths(40, NeedleConfig())


def test_run_needle_covers_every_length_and_depth() -> None:
    client = ScriptedClient(reads_up_to=700)
    cfg = NeedleConfig(lengths_tokens=[300, 600, 900], depths=[0.9, 0.1, 0.5])
    report = asyncio.run(run_needle(client, cfg, context_tokens=2048, seed=1, salt_rng=random.Random(0)))

    assert [(c.length_tokens, c.depth) for c in report.cases] == [
        (n, d) for n in (300, 600, 900) for d in (0.1, 0.5, 0.9)
    ]
    assert [c.passed for c in report.cases] == [True] * 6 + [False] * 3
    assert report.max_pass_length == 600
    for case, prompt in zip(report.cases, client.prompts, strict=True):
        assert toy_tokens(prompt) <= case.length_tokens
        assert toy_tokens(prompt) > case.length_tokens - 40  # within about two sentences
        assert case.prompt_tokens == toy_tokens(prompt) + 5  # the server's count
    first_lines = [p.splitlines()[0] for p in client.prompts]
    assert len(set(first_lines)) == len(first_lines)
    assert len({c.expected for c in report.cases}) == len(report.cases)
    assert client.count_calls <= 3 * 10


def test_run_needle_records_the_counted_length_without_usage() -> None:
    client = ScriptedClient(report_usage=False)
    cfg = NeedleConfig(lengths_tokens=[400], depths=[0.5])
    report = asyncio.run(run_needle(client, cfg, context_tokens=2048))
    assert report.cases[0].passed
    assert report.cases[0].prompt_tokens == toy_tokens(client.prompts[0])


def test_run_needle_completion_style_uses_complete() -> None:
    cfg = NeedleConfig(lengths_tokens=[400], depths=[0.5])
    report = asyncio.run(run_needle(CompletingClient(), cfg, context_tokens=2048, style="completion"))
    assert report.max_pass_length == 400


def test_cases_past_the_time_limit_fail_as_timeout() -> None:
    now = [0.0]

    class SlowClient(ScriptedClient):
        async def chat(self, messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> RequestResult:
            now[0] += 100.0  # each request takes 100 s on the scripted clock
            return await super().chat(messages, max_tokens, **extra)

    cfg = NeedleConfig(lengths_tokens=[300, 600], depths=[0.1, 0.9], timeout_s=250)
    report = asyncio.run(run_needle(SlowClient(), cfg, context_tokens=2048, clock=lambda: now[0]))
    assert [c.answer for c in report.cases][3] == "timeout"
    assert [c.passed for c in report.cases] == [True, True, True, False]
    assert report.max_pass_length == 300


def test_failed_requests_and_tokenizer_errors_fail_cases() -> None:
    class BrokenClient(ScriptedClient):
        async def chat(self, messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> RequestResult:
            return RequestResult(ok=False, error="HTTP 500: boom")

    cfg = NeedleConfig(lengths_tokens=[300], depths=[0.5])
    report = asyncio.run(run_needle(BrokenClient(), cfg, context_tokens=2048))
    assert report.cases[0].answer == "error: HTTP 500: boom" and report.max_pass_length is None

    class NoTokenizer(ScriptedClient):
        async def count_tokens(self, text: str) -> int:
            raise OSError("connection refused")

    report = asyncio.run(run_needle(NoTokenizer(), cfg, context_tokens=2048))
    assert report.cases[0].answer.startswith("error: tokenizer: OSError")
