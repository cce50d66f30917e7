"""qeval: a stable task set, answer parsing, the sandbox, the paired McNemar gate (no engine)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import Counter
from typing import Any

import pytest

from autotune.bench.qeval import (
    QevalTask,
    binomial_two_sided_p,
    build_tasks,
    mcnemar_exact,
    qeval_gate,
    run_qeval,
    score_answer,
)
from autotune.bench import sandbox
from autotune.bench.sandbox import run_python_tests
from autotune.errors import ConfigError
from autotune.models import QevalConfig, QevalReport, RequestResult

# Pinned: the serialized default set. A change here changes every stored qeval comparison, so it
# must be deliberate (then update the hash and say so in the commit).
DEFAULT_SET_SHA256 = "10c4923782832476fb745d910bc2fe782307721f7408eb9a4fe0564369d75fb8"


def serialized(tasks: list[QevalTask]) -> str:
    return json.dumps([t.model_dump() for t in tasks], sort_keys=True)


def test_default_set_is_pinned() -> None:
    assert hashlib.sha256(serialized(build_tasks(75, 1234)).encode()).hexdigest() == DEFAULT_SET_SHA256


def test_same_seed_same_tasks_other_seed_other_tasks() -> None:
    assert serialized(build_tasks(75, 1234)) == serialized(build_tasks(75, 1234))
    assert serialized(build_tasks(75, 99)) != serialized(build_tasks(75, 1234))


def test_set_shape_and_prefix_stability() -> None:
    tasks = build_tasks()
    assert len(tasks) == 75 and len({t.id for t in tasks}) == 75
    assert Counter(t.category for t in tasks) == {
        "arith": 12,
        "chain": 10,
        "string": 16,
        "track": 12,
        "json": 10,
        "code": 10,
        "knowledge": 5,
    }
    small = build_tasks(20)
    assert len(small) == 20
    by_id = {t.id: t for t in tasks}
    assert all(by_id[t.id] == t for t in small)  # "arith-003" is the same task whatever n is
    with pytest.raises(ConfigError):
        build_tasks(0)


def wrong_answer(task: QevalTask) -> str:
    if task.check == "integer":
        return f"Answer: {int(task.expected) + 1}"
    if task.check == "text":
        return "Answer: " + (task.expected.lower() if task.case_sensitive else "nothing")
    if task.check == "choice":
        return "Answer: " + next(o for o in task.options if o != task.expected)
    if task.check == "sorted_words":
        return "Answer: " + ", ".join(reversed(task.expected.split(", ")))
    if task.check == "json":
        return json.dumps({**task.fields, next(iter(task.fields)): "wrong"})
    return f"def {task.function}(*args):\n    return None\n"


def test_every_reference_answer_passes_and_a_wrong_one_fails() -> None:
    for task in build_tasks():
        assert score_answer(task, task.expected), task.id
        assert not score_answer(task, wrong_answer(task)), task.id
        assert not score_answer(task, ""), task.id
        assert not score_answer(task, task.prompt), task.id  # echoing the question is never right


def make_task(check: str, expected: str, **rest: Any) -> QevalTask:
    return QevalTask(
        id="t-000", category="t", prompt="?", check=check, expected=expected, max_tokens=8, **rest
    )


@pytest.mark.parametrize(
    ("reply", "passed"),
    [
        ("Answer: 42", True),
        ("**Answer:** 42", True),
        ("<think>maybe 41</think>\nAnswer: 42", True),
        ("17 + 25 = 42", True),  # no Answer line: the last number
        ("Answer: 42 (17 + 25)", True),  # Answer line: its first number
        ("The result is 42.\nAnswer: 41", False),  # the Answer line wins
        ("42.5", False),
        ("Answer: 1,042", False),
        ("forty-two", False),
    ],
)
def test_integer_parsing(reply: str, passed: bool) -> None:
    assert score_answer(make_task("integer", "42"), reply) is passed


def test_text_choice_and_sorted_parsing() -> None:
    upper = make_task("text", "STONE PAPER", case_sensitive=True)
    assert score_answer(upper, "Answer: **STONE PAPER**")
    assert not score_answer(upper, "Answer: Stone Paper")
    reverse = make_task("text", "revir")
    assert score_answer(reverse, "The word backwards is 'Revir'.")
    assert not score_answer(reverse, "Answer: revirs")

    lookup = make_task("choice", "oslo", options=["red", "oslo", "pear"])
    assert score_answer(lookup, "Answer: Oslo")
    assert not score_answer(lookup, "Answer: oslo or pear")  # hedging between options fails

    sort = make_task("sorted_words", "apple, lemon, tiger", options=["tiger", "apple", "lemon"])
    assert score_answer(sort, "Sorted:\n1. apple\n2. lemon\n3. tiger")
    assert not score_answer(sort, "Answer: apple, tiger, lemon")
    assert not score_answer(sort, "Answer: apple, lemon")


def test_json_and_code_extraction() -> None:
    task = make_task("json", "", fields={"item": "lemon", "total": 9})
    assert score_answer(task, 'Here it is:\n```json\n{"item": "lemon", "total": 9}\n```')
    assert score_answer(task, '{"total": 9, "item": "lemon", "extra": 1}')
    assert not score_answer(task, '{"item": "lemon", "total": "9"}')  # the type matters
    assert not score_answer(task, '{"item": "lemon", "total": 9')

    code = make_task("python", "", function="add_k", tests=["add_k(1) == 4", "add_k(-3) == 0"])
    assert score_answer(code, "Sure!\n```python\ndef add_k(x):\n    return x + 3\n```\nThis adds three.")
    assert score_answer(code, "def add_k(x):\n    return x + 3")
    assert not score_answer(code, "```python\ndef add_k(x):\n    return x + 2\n```")


def test_sandbox_kills_an_endless_loop_within_its_limit() -> None:
    start = time.monotonic()
    result = run_python_tests("def f():\n    while True:\n        pass\n", ["f() == 1"], timeout_s=1.0)
    assert result.timed_out and not result.ok
    assert time.monotonic() - start < 20.0  # killed, not left running (generous: CI machines are busy)


def test_sandbox_reports_the_cpu_limit_as_a_time_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CPU limit (same size as the wall limit) can strike before the parent's wall-clock wait
    # ends, e.g. on a busy CI machine: the kernel kills the child and that is a time-out too.
    real_popen = sandbox.subprocess.Popen

    class LateWaitingPopen(real_popen):  # type: ignore[misc,valid-type]
        def wait(self, timeout: float | None = None) -> int:
            return super().wait(None if timeout is None else timeout + 30.0)

    monkeypatch.setattr(sandbox.subprocess, "Popen", LateWaitingPopen)
    result = run_python_tests("def f():\n    while True:\n        pass\n", ["f() == 1"], timeout_s=1.0)
    assert result.timed_out and not result.ok
    assert "CPU" in result.error


def test_sandbox_refuses_network_and_stray_writes(tmp_path: Any) -> None:
    assert "socket" in run_python_tests("import socket\ndef f():\n    return 1\n", ["f() == 1"]).error
    outside = tmp_path / "leak.txt"
    write = f"def f():\n    open({str(outside)!r}, 'w').write('x')\n    return 1\n"
    result = run_python_tests(write, ["f() == 1"])
    assert not result.ok and "outside the sandbox" in result.failures[0]
    assert not outside.exists()
    inside = "def f():\n    open('note.txt', 'w').write('x')\n    return open('note.txt').read()\n"
    assert run_python_tests(inside, ["f() == 'x'"]).ok
    assert not run_python_tests("import os\ndef f():\n    return os.system('true')\n", ["f() == 0"]).ok


def test_sandbox_counts_passing_tests() -> None:
    result = run_python_tests("def f(x):\n    return 2 * x\n", ["f(2) == 4", "f(3) == 7", "f(None)"])
    assert (result.passed, result.total, result.ok) == (1, 3, False)
    assert run_python_tests("def f(:\n", ["f() == 1"]).error.startswith("SyntaxError")


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [(0, 0, 1.0), (5, 0, 0.0625), (0, 5, 0.0625), (10, 0, 0.001953125), (3, 1, 0.625), (6, 6, 1.0)],
)
def test_exact_binomial_p(b: int, c: int, p: float) -> None:
    assert binomial_two_sided_p(b, b + c) == pytest.approx(p, abs=1e-12)


def results(pattern: str) -> dict[str, bool]:
    return {f"t-{i:03d}": ch == "1" for i, ch in enumerate(pattern)}


def report(pattern: str) -> QevalReport:
    res = results(pattern)
    return QevalReport(results=res, correct=sum(res.values()), total=len(res), per_category={})


def test_mcnemar_pairs_by_task_id() -> None:
    test = mcnemar_exact(candidate=results("0000011111"), baseline=results("1111111111"))
    assert (test.n_paired, test.worse, test.better, test.p_value) == (10, 5, 0, 0.0625)
    with pytest.raises(ConfigError, match="different tasks"):
        mcnemar_exact(results("11"), results("111"))


def test_gate_fails_only_when_significantly_worse() -> None:
    baseline = report("1" * 10 + "0" * 5)
    much_worse = report("0" * 10 + "0" * 5)
    gate = qeval_gate(much_worse, baseline, alpha=0.05)
    assert not gate.passed
    assert gate.detail == (
        "qeval 0/15 vs reference 10/15, 10 worse, 0 better, one-sided p=0.00098 (alpha 0.05), "
        "net loss 10 (margin 0): significantly worse"
    )

    slightly_worse = report("1110111011" + "01000")
    gate = qeval_gate(slightly_worse, baseline, alpha=0.05, margin_tasks=1)
    assert gate.passed and "2 worse, 1 better" in gate.detail
    assert not qeval_gate(slightly_worse, baseline, alpha=0.05, margin_tasks=0).passed  # one net loss > margin 0

    assert qeval_gate(report("1" * 15), baseline, alpha=0.05).passed  # better is never a failure


class ScriptedModel:
    """Replies with each task's reference answer; tracks how many requests run at once."""

    def __init__(self, wrong_ids: set[str] = frozenset(), delay_s: float = 0.0) -> None:
        self.by_prompt = {t.prompt: t for t in build_tasks(75)}
        self.wrong_ids = wrong_ids
        self.delay_s = delay_s
        self.in_flight = 0
        self.peak = 0
        self.budgets: list[int] = []

    async def count_tokens(self, text: str) -> int:
        return len(text.split())

    async def chat(self, messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> RequestResult:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.budgets.append(max_tokens)
        await asyncio.sleep(self.delay_s)
        self.in_flight -= 1
        task = self.by_prompt[messages[0]["content"]]
        if task.id in self.wrong_ids:
            return RequestResult(ok=True, text=wrong_answer(task))
        if task.id == "track-000":
            return RequestResult(ok=False, error="HTTP 500")
        return RequestResult(ok=True, text=task.expected)


def test_run_qeval_scores_each_task_and_tallies_categories() -> None:
    model = ScriptedModel(wrong_ids={"arith-001", "code-000"})
    cfg = QevalConfig(tasks=16, max_tokens=40)
    rep = asyncio.run(run_qeval(model, cfg, concurrency=3))
    assert rep.total == 16 and len(rep.results) == 16
    assert {t for t, ok in rep.results.items() if not ok} == {"arith-001", "code-000", "track-000"}
    assert rep.correct == 13
    assert rep.answers["track-000"] == "error: HTTP 500"
    assert sum(n for n, _ in rep.per_category.values()) == 13
    assert sum(total for _, total in rep.per_category.values()) == 16
    assert model.peak <= 3
    assert max(model.budgets) == 40  # the config caps every task's own budget


def test_run_qeval_counts_unanswered_tasks_as_wrong() -> None:
    model = ScriptedModel(delay_s=0.05)
    cfg = QevalConfig(tasks=40, timeout_s=0.5)
    start = time.monotonic()
    rep = asyncio.run(run_qeval(model, cfg))
    assert time.monotonic() - start < 3.0
    timed_out = [t for t, a in rep.answers.items() if a == "timeout"]
    assert 10 < len(timed_out) < 40
    assert all(not rep.results[t] for t in timed_out)
    assert rep.total == 40


def test_the_forecasts_token_guess_is_the_task_set_it_would_send():
    from autotune.bench.qeval import CHARS_PER_TOKEN_GUESS, completion_prompt, few_shot_examples, request_tokens_guess
    from autotune.models import QevalConfig

    cfg = QevalConfig(tasks=12, max_tokens=40)
    tasks = build_tasks(12, cfg.seed)
    chat_in, budget = request_tokens_guess(cfg, "chat")
    assert chat_in == sum(len(t.prompt) for t in tasks) // CHARS_PER_TOKEN_GUESS
    assert budget == sum(min(t.max_tokens, 40) for t in tasks) <= 12 * 40
    few_shot_in, _ = request_tokens_guess(cfg, "completion")
    shots = few_shot_examples(tasks[0].category, cfg.seed, {t.prompt for t in tasks})
    assert few_shot_in > chat_in  # base models get solved examples before each question
    assert len(completion_prompt(tasks[0], shots)) > len(tasks[0].prompt)
