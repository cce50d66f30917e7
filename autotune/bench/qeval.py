"""Offline qeval: a fixed, generated task set with checkable answers, and the paired gate.

Tasks come from seeded generators (random.Random seeded with a string per category, never
hash()), so the set for a given (n, seed) is identical across runs and Python versions, and task
"arith-003" is the same whatever n is. Categories, in the order their tasks are interleaved:

  arith      one addition, subtraction or multiplication of small numbers
  chain      a start value and three operations applied in order
  string     reverse a word, count a letter, upper-case two words, sort four words
  track      look up one of five stated facts, or follow token transfers between people
  json       a JSON object with required fields (copied values or one computed value)
  code       a short Python function, executed against fixed tests in the sandbox
  knowledge  easy general-knowledge questions with one-word or one-number answers

Answer parsing (`score_answer`), after removing <think>...</think>: if a line starts with
"Answer:" (markdown bold allowed), the text after the last such marker is the answer part,
otherwise the whole reply is. Then, per check:
  integer       the first number in an "Answer:" part, else the last number in the reply
  text          the expected text occurs as a whole word/phrase (case-sensitive only for
                upper-casing tasks)
  choice        the expected option occurs and none of the other listed options does
  sorted_words  the task's words, in their order of appearance, are exactly the sorted list
  json          the first {...} (inside a code fence if there is one) parses as an object
                holding every required field with the exact value and type
  python        the code (first fenced block defining the function, else from "def <name>")
                passes every test in the sandbox

One module of ~620 lines on purpose: most of it is the seeded task generators, one per category,
which must stay beside the checker that grades their answers.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import time
from collections.abc import Callable
from typing import Any, Literal

from autotune.bench import words
from autotune.bench.client import ChatClient, without_thinking
from autotune.bench.sandbox import run_python_tests
from autotune.errors import ConfigError
from autotune.models import (
    CheckKind,
    GateOutcome,
    McNemarResult,
    QevalConfig,
    QevalReport,
    QevalTask,
    Scalar,
)

ANSWER_LINE = "End with a line of the form 'Answer: X'."

# Share of the set per category (75 tasks: 12/10/16/12/10/10/5).
CATEGORY_WEIGHTS: dict[str, int] = {
    "arith": 12,
    "chain": 10,
    "string": 16,
    "track": 12,
    "json": 10,
    "code": 10,
    "knowledge": 5,
}
MAX_TOKENS: dict[str, int] = {
    "arith": 32,
    "chain": 64,
    "string": 48,
    "track": 48,
    "json": 64,
    "code": 96,
    "knowledge": 32,
}
SANDBOX_TIMEOUT_S = 5.0

# ---------------------------------------------------------------- generators


def _task(category: str, index: int, prompt: str, check: CheckKind, expected: str, **rest: Any) -> QevalTask:
    return QevalTask(
        id=f"{category}-{index:03d}",
        category=category,
        prompt=prompt,
        check=check,
        expected=expected,
        max_tokens=MAX_TOKENS[category],
        **rest,
    )


def _arith(rng: random.Random, i: int) -> QevalTask:
    op = i % 3
    if op == 0:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        question, value = f"What is {a} + {b}?", a + b
    elif op == 1:
        a = rng.randint(20, 99)
        b = rng.randint(1, a - 1)
        question, value = f"What is {a} - {b}?", a - b
    else:
        a, b = rng.randint(3, 19), rng.randint(2, 9)
        question, value = f"What is {a} * {b}?", a * b
    return _task("arith", i, f"{question} {ANSWER_LINE}", "integer", str(value))


def _chain(rng: random.Random, i: int) -> QevalTask:
    value = rng.randint(2, 9)
    start = value
    steps = []
    for _ in range(3):
        kind = rng.choice(("add", "sub", "mul"))
        if kind == "sub" and value <= 2:
            kind = "add"
        if kind == "mul" and value > 30:
            kind = "sub"
        if kind == "add":
            k = rng.randint(2, 9)
            steps.append(f"add {k}")
            value += k
        elif kind == "sub":
            k = rng.randint(1, min(9, value - 1))
            steps.append(f"subtract {k}")
            value -= k
        else:
            k = rng.randint(2, 3)
            steps.append(f"multiply by {k}")
            value *= k
    prompt = (
        f"Start with {start}. Then {steps[0]}, then {steps[1]}, then {steps[2]}. "
        f"What is the result? {ANSWER_LINE}"
    )
    return _task("chain", i, prompt, "integer", str(value))


def _string(rng: random.Random, i: int) -> QevalTask:
    kind = i % 4
    if kind == 0:
        word = rng.choice(words.TASK_WORDS)
        prompt = f"Write the word '{word}' backwards (last letter first). {ANSWER_LINE}"
        return _task("string", i, prompt, "text", word[::-1])
    if kind == 1:
        word = rng.choice(words.TASK_WORDS)
        letter = rng.choice(sorted(set(word)))
        prompt = f"How many times does the letter '{letter}' appear in the word '{word}'? {ANSWER_LINE}"
        return _task("string", i, prompt, "integer", str(word.count(letter)))
    if kind == 2:
        first, second = rng.sample(words.TASK_WORDS, 2)
        prompt = f"Write '{first} {second}' in capital letters. {ANSWER_LINE}"
        return _task("string", i, prompt, "text", f"{first} {second}".upper(), case_sensitive=True)
    picks = rng.sample(words.TASK_WORDS, 4)
    prompt = f"Sort these words alphabetically: {', '.join(picks)}. {ANSWER_LINE}"
    return _task("string", i, prompt, "sorted_words", ", ".join(sorted(picks)), options=picks)


def _track(rng: random.Random, i: int) -> QevalTask:
    if i % 2 == 0:
        keys = rng.sample(words.LOOKUP_KEYS, 5)
        values = rng.sample(words.LOOKUP_VALUES, 5)
        asked = rng.randrange(5)
        facts = " ".join(f"The secret word for {k} is {v}." for k, v in zip(keys, values, strict=True))
        prompt = f"{facts} What is the secret word for {keys[asked]}? {ANSWER_LINE}"
        return _task("track", i, prompt, "choice", values[asked], options=values)
    people = rng.sample(words.PEOPLE, 3)
    tokens = {p: rng.randint(3, 9) for p in people}
    lines = [", ".join(f"{p} has {tokens[p]} tokens" for p in people) + "."]
    for _ in range(3):
        giver, taker = rng.sample(people, 2)
        amount = rng.randint(1, min(3, tokens[giver]))
        tokens[giver] -= amount
        tokens[taker] += amount
        lines.append(f"{giver} gives {taker} {amount}.")
    asked = rng.choice(people)
    prompt = f"{' '.join(lines)} How many tokens does {asked} have now? {ANSWER_LINE}"
    return _task("track", i, prompt, "integer", str(tokens[asked]))


def _json(rng: random.Random, i: int) -> QevalTask:
    name = rng.choice(words.TASK_WORDS)
    if i % 2 == 0:
        count = rng.randint(2, 40)
        active = rng.choice((True, False))
        fields: dict[str, Scalar] = {"name": name, "count": count, "active": active}
        spec = f'"name" set to "{name}", "count" set to {count} and "active" set to {json.dumps(active)}'
    else:
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        fields = {"item": name, "total": a + b}
        spec = f'"item" set to "{name}" and "total" set to the sum of {a} and {b}'
    prompt = f"Reply with only a JSON object with {spec}."
    return _task("json", i, prompt, "json", json.dumps(fields), fields=fields)


# (function signature, what it does, reference body, tests) with {k} / {c} filled per task
_CODE_TEMPLATES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    (
        "add_k(x)",
        "returns x plus {k}",
        "    return x + {k}",
        ("add_k(0) == {k}", "add_k(5) == 5 + {k}", "add_k(-3) == -3 + {k}"),
    ),
    (
        "is_multiple(n)",
        "returns True if n is divisible by {k}, else False",
        "    return n % {k} == 0",
        (
            "is_multiple({k}) is True",
            "is_multiple({k} * 7) is True",
            "is_multiple({k} + 1) is False",
            "is_multiple(0) is True",
        ),
    ),
    (
        "count_letter(s)",
        "returns how many times the letter '{c}' occurs in the string s",
        "    return s.count('{c}')",
        ("count_letter('') == 0", "count_letter('{c}{c}x{c}') == 3", "count_letter('xyz{c}') == 1"),
    ),
    (
        "big_sum(xs)",
        "returns the sum of the numbers in the list xs that are greater than {k}",
        "    return sum(x for x in xs if x > {k})",
        ("big_sum([]) == 0", "big_sum([{k}, {k} + 1, {k} + 5]) == 2 * {k} + 6", "big_sum([{k} - 1]) == 0"),
    ),
    (
        "clamp(x)",
        "returns x limited to the range 0 to {k}: 0 if x < 0, {k} if x > {k}, otherwise x",
        "    return max(0, min({k}, x))",
        ("clamp(-5) == 0", "clamp({k} + 10) == {k}", "clamp(1) == 1", "clamp({k}) == {k}"),
    ),
)


def _code(rng: random.Random, i: int) -> QevalTask:
    signature, does, body, tests = _CODE_TEMPLATES[i % len(_CODE_TEMPLATES)]
    fill = {"k": rng.randint(3, 9), "c": rng.choice("abdeklmnoprst")}
    name = signature.split("(")[0]
    prompt = f"Write a Python function {signature} that {does.format(**fill)}. Reply with only the code."
    reference = f"def {signature}:\n{body.format(**fill)}\n"
    return _task(
        "code",
        i,
        prompt,
        "python",
        reference,
        function=name,
        tests=[t.format(**fill) for t in tests],
    )


# (question, check, expected)
_KNOWLEDGE: tuple[tuple[str, CheckKind, str], ...] = (
    ("What is the capital city of France?", "text", "Paris"),
    ("How many days are there in a week?", "integer", "7"),
    ("Which planet is the largest in our solar system?", "text", "Jupiter"),
    ("How many legs does a spider have?", "integer", "8"),
    ("What color do you get when you mix blue and yellow paint?", "text", "green"),
    ("How many minutes are there in one hour?", "integer", "60"),
    ("What is the largest ocean on Earth?", "text", "Pacific"),
    ("How many sides does a triangle have?", "integer", "3"),
    ("What is the opposite of the word 'hot'?", "text", "cold"),
    ("Which animal is known as the king of the jungle?", "text", "lion"),
)


def _knowledge_order(seed: int) -> list[int]:
    order = list(range(len(_KNOWLEDGE)))
    random.Random(f"knowledge-{seed}").shuffle(order)
    return order


def _knowledge(order: list[int], i: int) -> QevalTask:
    question, check, expected = _KNOWLEDGE[order[i % len(order)]]
    return _task("knowledge", i, f"{question} {ANSWER_LINE}", check, expected)


def _allocate(n: int) -> dict[str, int]:
    """Tasks per category for a set of n: largest remainder over CATEGORY_WEIGHTS."""
    total = sum(CATEGORY_WEIGHTS.values())
    exact = {c: n * w / total for c, w in CATEGORY_WEIGHTS.items()}
    counts = {c: math.floor(x) for c, x in exact.items()}
    order = sorted(CATEGORY_WEIGHTS, key=lambda c: (-(exact[c] - counts[c]), list(CATEGORY_WEIGHTS).index(c)))
    for c in order[: n - sum(counts.values())]:
        counts[c] += 1
    return counts


def _draw(
    make: Callable[[random.Random, int], QevalTask], rng: random.Random, i: int, seen: set[str]
) -> QevalTask:
    """Draw task i until its prompt is new and echoing the prompt back does not score (a base
    model behind a chat template echoes the prompt)."""
    for _ in range(100):
        task = make(rng, i)
        if task.prompt in seen:
            continue
        if task.check == "python" or not score_answer(task, task.prompt):
            seen.add(task.prompt)
            return task
    raise AssertionError(f"could not draw a usable task {task.id}")


def _generators(seed: int) -> dict[str, Callable[[random.Random, int], QevalTask]]:
    knowledge_order = _knowledge_order(seed)
    return {
        "arith": _arith,
        "chain": _chain,
        "string": _string,
        "track": _track,
        "json": _json,
        "code": _code,
        "knowledge": lambda _rng, i: _knowledge(knowledge_order, i),
    }


def build_tasks(n: int = 75, seed: int = 1234) -> list[QevalTask]:
    """The task set for (n, seed), interleaved across categories (so a time limit cuts evenly)."""
    if n < 1:
        raise ConfigError(f"qeval needs at least one task, got {n}")
    counts = _allocate(n)
    per_category: dict[str, list[QevalTask]] = {}
    generators = _generators(seed)
    for category, make in generators.items():
        rng = random.Random(f"{category}-{seed}")
        seen: set[str] = set()
        per_category[category] = [_draw(make, rng, i, seen) for i in range(counts[category])]
    tasks = []
    for index in range(max(counts.values())):
        for category in CATEGORY_WEIGHTS:
            if index < len(per_category[category]):
                tasks.append(per_category[category][index])
    ids = [t.id for t in tasks]
    assert len(set(ids)) == len(ids) == n
    return tasks


# ---------------------------------------------------------------- completion style (base models)

SHOTS_PER_CATEGORY = 2
COMPLETION_STOP = ["\n\nQuestion:", "\nQuestion:"]


def _bare(prompt: str) -> str:
    return prompt.replace(f" {ANSWER_LINE}", "")


def few_shot_examples(category: str, seed: int, avoid: set[str]) -> list[QevalTask]:
    """Solved examples of a category for base models: drawn from the category's own generator
    with another seed (knowledge from the far end of its list), never a prompt of the set."""
    if category == "knowledge":
        order = _knowledge_order(seed)
        picks = [_knowledge(order, len(order) - 1 - i) for i in range(len(order))]
    else:
        rng = random.Random(f"shots-{category}-{seed}")
        make = _generators(seed)[category]
        picks = [make(rng, 1000 + i) for i in range(20)]
    shots = [t for t in picks if t.prompt not in avoid][:SHOTS_PER_CATEGORY]
    return shots


def shots_by_category(tasks: list[QevalTask], seed: int) -> dict[str, list[QevalTask]]:
    """The solved examples each category of the task set gets, none of them a prompt of the set."""
    prompts = {t.prompt for t in tasks}
    return {c: few_shot_examples(c, seed, prompts) for c in {t.category for t in tasks}}


def _answer_text(task: QevalTask) -> str:
    return f"\n{task.expected}" if "\n" in task.expected else f" {task.expected}"


def completion_prompt(task: QevalTask, shots: list[QevalTask]) -> str:
    """Question/Answer pairs ending in "Answer:": what a base model continues most reliably."""
    parts = [f"Question: {_bare(s.prompt)}\nAnswer:{_answer_text(s)}" for s in shots]
    parts.append(f"Question: {_bare(task.prompt)}\nAnswer:")
    return "\n\n".join(parts)


CHARS_PER_TOKEN_GUESS = 4  # English text and digits, roughly: for forecasts only, never for measuring


def request_tokens_guess(cfg: QevalConfig, prompt_style: str) -> tuple[int, int]:
    """(prompt tokens, answer budget tokens) of the study's task set, as run_qeval would send it:
    the prompt from its characters, the answer budget summed per task. For the forecast."""
    tasks = build_tasks(cfg.tasks, cfg.seed)
    if prompt_style == "completion":
        shots = shots_by_category(tasks, cfg.seed)
        chars = sum(len(completion_prompt(t, shots[t.category])) for t in tasks)
    else:
        chars = sum(len(t.prompt) for t in tasks)
    return chars // CHARS_PER_TOKEN_GUESS, sum(min(t.max_tokens, cfg.max_tokens) for t in tasks)


# ---------------------------------------------------------------- answer parsing

_ANSWER = re.compile(r"^[\s>*_#-]*answer[\s*_]*:", re.IGNORECASE | re.MULTILINE)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?")
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:```|$)", re.DOTALL)


def strip_thinking(text: str) -> str:
    return without_thinking(text).strip()


def answer_part(text: str) -> tuple[str, bool]:
    """(answer text, whether it came from an "Answer:" line); see the module doc."""
    text = strip_thinking(text)
    markers = list(_ANSWER.finditer(text))
    if not markers:
        return text, False
    tail = text[markers[-1].end() :].strip()
    return tail, True


def _numbers(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in _NUMBER.findall(text)]


def _words_in(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]+", text)


def _phrase_present(phrase: str, text: str, case_sensitive: bool) -> bool:
    flags = 0 if case_sensitive else re.IGNORECASE
    pattern = r"(?<![A-Za-z0-9])" + r"\s+".join(map(re.escape, phrase.split())) + r"(?![A-Za-z0-9])"
    return re.search(pattern, text, flags) is not None


def extract_json(text: str) -> Any:
    """The first JSON object in the reply (fenced block first); raises ValueError if none parses."""
    text = strip_thinking(text)
    for _lang, block in _FENCE.findall(text):
        if "{" in block:
            text = block
            break
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the reply")
    return json.loads(text[start : end + 1])


def extract_code(text: str, function: str) -> str:
    """The fenced block that defines `function`, else the reply from "def <function>" on."""
    text = strip_thinking(text)
    for _lang, block in _FENCE.findall(text):
        if f"def {function}" in block:
            return block
    start = text.find(f"def {function}")
    return text[start:] if start >= 0 else text


def _same_value(got: Any, want: Scalar) -> bool:
    return type(got) is type(want) and got == want


def score_answer(task: QevalTask, answer_text: str) -> bool:
    """Whether `answer_text` (the model's whole reply) answers `task`; rules in the module doc."""
    if task.check == "python":
        code = extract_code(answer_text, task.function or "")
        return run_python_tests(code, task.tests, timeout_s=SANDBOX_TIMEOUT_S).ok
    if task.check == "json":
        try:
            obj = extract_json(answer_text)
        except ValueError:
            return False
        return isinstance(obj, dict) and all(
            k in obj and _same_value(obj[k], v) for k, v in task.fields.items()
        )
    part, from_marker = answer_part(answer_text)
    if task.check == "integer":
        numbers = _numbers(part)
        if not numbers:
            return False
        got = numbers[0] if from_marker else numbers[-1]
        return got == int(task.expected)
    if task.check == "text":
        return _phrase_present(task.expected, part, task.case_sensitive)
    if task.check == "choice":
        others = [o for o in task.options if o != task.expected]
        return _phrase_present(task.expected, part, False) and not any(
            _phrase_present(o, part, False) for o in others
        )
    if task.check == "sorted_words":
        wanted = {w.lower() for w in task.options}
        seen = [w.lower() for w in _words_in(part) if w.lower() in wanted]
        return seen == [w.strip().lower() for w in task.expected.split(",")]
    raise AssertionError(f"unknown check {task.check}")


# ---------------------------------------------------------------- running


async def run_qeval(
    client: ChatClient,
    cfg: QevalConfig,
    *,
    style: Literal["chat", "completion"] = "chat",
    concurrency: int = 1,
    request_extra: dict[str, Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> QevalReport:
    """Ask every task once (at most `concurrency` at a time) within `cfg.timeout_s` overall.

    Each request gets min(task budget, cfg.max_tokens) tokens. A task that failed, errored or was
    not answered in time counts as wrong; its answer records why ("timeout", "error: ...").
    "completion" style (base models) sends few-shot Question/Answer text to /v1/completions and
    scores the continuation as the "Answer:" line.
    """
    if concurrency < 1:
        raise ConfigError(f"qeval concurrency must be at least 1, got {concurrency}")
    tasks = build_tasks(cfg.tasks, cfg.seed)
    extra = request_extra or {}
    shots = shots_by_category(tasks, cfg.seed)
    deadline = clock() + cfg.timeout_s
    gate = asyncio.Semaphore(concurrency)
    results: dict[str, bool] = {}
    answers: dict[str, str] = {}

    async def one(task: QevalTask) -> None:
        async with gate:
            if clock() >= deadline:
                return
            budget = min(task.max_tokens, cfg.max_tokens)
            if style == "completion":
                prompt = completion_prompt(task, shots[task.category])
                reply = await client.complete(prompt, budget, stop=COMPLETION_STOP, **extra)
                text = f"Answer:{reply.text}"
            else:
                reply = await client.chat([{"role": "user", "content": task.prompt}], budget, **extra)
                text = reply.text
            if not reply.ok:
                results[task.id], answers[task.id] = False, f"error: {reply.error}"
                return
            answers[task.id] = text
            if task.check == "python":
                results[task.id] = await asyncio.to_thread(score_answer, task, text)
            else:
                results[task.id] = score_answer(task, text)

    running = [asyncio.create_task(one(t)) for t in tasks]
    done, pending = await asyncio.wait(running, timeout=max(deadline - clock(), 0.0))
    for job in pending:
        job.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for job in done:
        job.result()  # surfaces bugs in scoring instead of hiding them as wrong answers

    ordered: dict[str, bool] = {}
    per_category: dict[str, list[int]] = {}
    for task in tasks:
        correct = results.get(task.id, False)
        if task.id not in results:
            answers.setdefault(task.id, "timeout")
        ordered[task.id] = correct
        tally = per_category.setdefault(task.category, [0, 0])
        tally[0] += int(correct)
        tally[1] += 1
    return QevalReport(
        results=ordered,
        correct=sum(ordered.values()),
        total=len(tasks),
        per_category=per_category,
        answers={t.id: answers[t.id] for t in tasks},
    )


# ---------------------------------------------------------------- comparison


def binomial_two_sided_p(k: int, n: int) -> float:
    """Exact two-sided p of k successes in n trials with p = 1/2 (symmetric, so 2 x the smaller tail)."""
    if n == 0:
        return 1.0
    low = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(low + 1))
    return min(1.0, 2 * tail / 2**n)


def mcnemar_exact(candidate: dict[str, bool], baseline: dict[str, bool]) -> McNemarResult:
    """Exact McNemar test, pairing the two runs by task id (both must cover the same tasks)."""
    if set(candidate) != set(baseline):
        missing = sorted(set(candidate) ^ set(baseline))
        raise ConfigError(
            f"qeval runs cover different tasks ({len(missing)} unpaired, e.g. {missing[0]}); "
            "compare runs made with the same task count and seed"
        )
    worse = sum(1 for t in baseline if baseline[t] and not candidate[t])
    better = sum(1 for t in baseline if candidate[t] and not baseline[t])
    return McNemarResult(
        n_paired=len(baseline),
        worse=worse,
        better=better,
        p_value=binomial_two_sided_p(worse, worse + better),
    )


def binomial_upper_p(k: int, n: int) -> float:
    """Exact one-sided p: P(X >= k) for X ~ Binomial(n, 1/2)."""
    if n == 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


def qeval_gate(
    candidate_report: QevalReport, baseline_report: QevalReport, alpha: float, margin_tasks: int = 0
) -> GateOutcome:
    """Passes when the candidate is neither significantly worse than the reference (one-sided exact
    McNemar: P(at least `worse` of the discordant pairs go against it) < alpha) nor worse by more
    than `margin_tasks` net tasks (lost - gained)."""
    test = mcnemar_exact(candidate_report.results, baseline_report.results)
    p_worse = binomial_upper_p(test.worse, test.worse + test.better)
    significant = p_worse < alpha and test.worse > test.better
    beyond_margin = test.worse - test.better > margin_tasks
    detail = (
        f"qeval {candidate_report.correct}/{candidate_report.total} vs reference "
        f"{baseline_report.correct}/{baseline_report.total}, {test.worse} worse, {test.better} better, "
        f"one-sided p={p_worse:.2g} (alpha {alpha}), net loss {test.worse - test.better} (margin {margin_tasks})"
    )
    if significant:
        detail += ": significantly worse"
    elif beyond_margin:
        detail += ": loses more than the margin"
    return GateOutcome(gate="qeval", status="fail" if significant or beyond_margin else "pass", detail=detail)
