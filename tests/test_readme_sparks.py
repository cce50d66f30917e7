"""The four-Spark walk: docs/guide.md "On four Sparks" in order (space new, probe, plan, dry run,
search, export), and the README's brief of it.

Every command in the guide that needs no Spark runs here as written (the model directory swapped for a
temp copy of the Qwen3-30B-A3B config.json fixture, the cluster file taken from the README) and
the lines quoted under it must appear, in order, in what it prints (`…` = any text; a line of
`…` alone = any lines). The search itself needs the boxes: it must be the dry run minus
`--dry-run`, and its quoted lines are checked against the code that prints them. The README's
"On four Sparks" lists the same commands, in the same order."""

from __future__ import annotations

import io
import re
import shlex
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from autotune import cli
from corpus import CORPUS

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = CORPUS / "qwen3-30b-a3b"
README_MODEL = "~/models/Qwen3-30B-A3B"


def section(page: str = "docs/guide.md") -> str:
    text = (ROOT / page).read_text()
    assert "\n## On four Sparks\n" in text, page
    return text.split("\n## On four Sparks\n")[1].split("\n## ")[0]


def blocks() -> list[tuple[str, list[str]]]:
    """(command, quoted output lines) of every console block, in order."""
    out = []
    for body in re.findall(r"```console\n(.*?)\n```", section(), re.S):
        first, *printed = body.splitlines()
        assert first.startswith("$ autotune "), first
        out.append((first.removeprefix("$ "), printed))
    return out


def squash(line: str) -> str:
    return " ".join(line.split())


def unmatched(quoted: list[str], printed: list[str]) -> str | None:
    """The first quoted line not found (in order) in the printed lines; None when all are."""
    lines = [squash(p) for p in printed]
    at = 0
    for want in quoted:
        if want.strip() == "…":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in squash(want).split("…")))
        while at < len(lines) and not pattern.fullmatch(lines[at]):
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


@pytest.fixture
def walk(tmp_path, monkeypatch, capsys):
    """Runs a command of the walk in a temp folder holding the guide's cluster.yaml and a model copy."""
    cluster = re.search(r"```yaml\n# cluster.yaml\n(.*?)\n```", section(), re.S)
    assert cluster
    (tmp_path / "cluster.yaml").write_text(cluster.group(1) + "\n")
    model = tmp_path / "models" / "Qwen3-30B-A3B"
    model.mkdir(parents=True)
    shutil.copy(FIXTURE / "config.json", model / "config.json")
    monkeypatch.setattr(cli, "console", Console(soft_wrap=True, width=400))

    def run(command: str) -> tuple[int, list[str]]:
        argv = shlex.split(command.replace(README_MODEL, str(model)))[1:]
        code = cli.main(argv)
        captured = capsys.readouterr()
        return code, captured.err.splitlines() + captured.out.splitlines()

    return run


def test_the_walk_is_in_order():
    commands = [c for c, _ in blocks()]
    kinds = []
    for command in commands:
        words = command.split()
        kinds.append("dry run" if "--dry-run" in words else " ".join(words[1:3]) if words[1] == "space" else words[1])
    assert kinds == ["space new", "probe", "plan", "dry run", "search", "export"]
    assert all("--hardware spark --nodes 4" in c for c in commands if c.split()[1] in ("space", "plan", "search"))


def test_the_readme_brief_is_the_guide_walk():
    (brief,) = re.findall(r"```bash\n(.*?)\n```", section("README.md"), re.S)
    assert brief.splitlines() == [c for c, _ in blocks()]
    assert "(docs/guide.md#on-four-sparks)" in section("README.md")


@pytest.mark.parametrize("kind", ["space new", "probe", "plan", "dry run"])
def test_each_command_prints_what_the_readme_quotes(walk, kind):
    command, quoted = {
        "space new": blocks()[0], "probe": blocks()[1], "plan": blocks()[2], "dry run": blocks()[3]
    }[kind]
    code, printed = walk(command)
    assert code == 0, "\n".join(printed[-5:])
    missing = unmatched(quoted, printed)
    assert missing is None, f"{command}: README quotes {missing!r}, not printed"


def test_the_written_space_is_the_one_the_readme_then_uses(walk):
    command, _ = blocks()[0]
    assert walk(command)[0] == 0
    code, printed = walk("autotune plan --space qwen3-spark4.yaml --hardware spark --nodes 4")
    assert code == 0
    assert any("plan: qwen3-30b-a3b-spark4 on 4 x spark (108 kept, 0 dropped)" in line for line in printed)


def test_the_search_is_the_dry_run_and_prints_what_the_readme_quotes(walk):
    from autotune.output import progress, terminal
    from autotune.commands.setup import prepare
    from autotune.models import Candidate
    from autotune.study.outcome import StudyOutcome

    (dry, dry_quoted), (real, quoted) = blocks()[3], blocks()[4]
    assert dry.replace(" --dry-run", "") == real
    assert quoted[0] == dry_quoted[0]  # the same space choice, said first
    code, printed = walk(dry)
    assert code == 0 and unmatched(quoted[:1], printed) is None

    # the rest is printed by the study's reporter and outcome; the plan is the dry run's
    args = shlex.split(real)[1:]
    plan = prepare(
        space_name="minimax-m3.1-flash-spark4", model_path=args[args.index("--model") + 1], db_path=Path("runs.db"),
        study=None, hardware="spark", nodes=4, accuracy=True, logs_dir=Path("logs"), dry_run=True,
        cluster_file=Path("cluster.yaml"),
    )
    console = Console(record=True, width=400, file=io.StringIO())
    reporter = progress.RichReporter(console)
    reporter.trial_started(0, 1, 10, Candidate(engine="vllm", params={}))
    assert reporter.status is not None
    reporter.status.stop()
    empty = StudyOutcome(name=plan.study, trials=[], ranked=[], baseline=None, skipped_reasons={})
    terminal.print_outcome(console, plan, empty)
    missing = unmatched(quoted[1:], console.export_text().splitlines())
    assert missing is None, f"README quotes {missing!r}, the reporter does not print it"


def test_the_export_lines(walk):
    command, quoted = blocks()[5]
    output = shlex.split(command)[shlex.split(command).index("-o") + 1]
    assert quoted == [f"recipe written to {output}"]
    # the measured export needs a study; the predicted one (same print) runs here as the README says
    predicted = "autotune export --predicted --hardware spark --nodes 4 -o predicted.yaml"
    assert predicted in " ".join(section().split())
    code, printed = walk(predicted)
    assert code == 0 and "recipe written to predicted.yaml" in printed
    assert "kind: predicted" in Path("predicted.yaml").read_text()
