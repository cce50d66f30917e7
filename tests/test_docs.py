"""Docs that must match the code: README's two commands, CI, and the CLI reference."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    """The bash blocks of the README's "Set up and go" section."""
    text = (ROOT / "README.md").read_text()
    assert "\n## Set up and go\n" in text
    top = text.split("\n## Set up and go\n")[1].split("\n## ")[0]
    return re.findall(r"```bash\n(.+?)\n```", top)


def test_readme_has_exactly_two_setup_commands():
    commands = readme_commands()
    assert len(commands) == 2
    assert commands[0].endswith("autotune search")
    assert commands[1].endswith("pytest")


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == readme_commands()[1]


def test_cli_reference_is_current():
    out = subprocess.run([sys.executable, "scripts/gen_cli_docs.py", "--check"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_every_command_has_help_and_docs():
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_cli_docs

    from autotune.cli import app

    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    assert names == set(gen_cli_docs.COMMANDS)
    for command in app.registered_commands:
        assert (command.callback.__doc__ or "").strip(), f"{command.callback.__name__} has no help text"
    readme = (ROOT / "README.md").read_text()
    for name in names:
        assert f"autotune {name}" in readme, f"README does not mention `autotune {name}`"
    groups = {g.name: g.typer_instance for g in app.registered_groups}
    assert set(groups) == set(gen_cli_docs.GROUPS)
    for group, sub in groups.items():
        assert {c.name for c in sub.registered_commands} == set(gen_cli_docs.GROUPS[group])
        for command in sub.registered_commands:
            assert (command.callback.__doc__ or "").strip(), f"{group} {command.name} has no help text"
            assert f"autotune {group} {command.name}" in readme, f"README does not mention `autotune {group} {command.name}`"


def test_each_command_summary_is_one_line():
    """`autotune --help` lists each command by its help's first paragraph, keeping its line breaks:
    a first paragraph over two lines breaks there mid-sentence. So it must be one line."""
    from autotune.cli import app

    commands = list(app.registered_commands)
    commands += [c for g in app.registered_groups for c in g.typer_instance.registered_commands]
    for command in commands:
        first = (command.callback.__doc__ or "").strip().split("\n\n")[0]
        assert "\n" not in first, f"{command.callback.__name__}: the first paragraph of its help spans lines: {first!r}"
    for group in app.registered_groups:
        assert "\n" not in (group.typer_instance.info.help or "").strip().split("\n\n")[0], group.name


def test_figures_are_what_the_data_renders():
    """The search-quality, ground-truth and failure-corpus figures of README.md and docs/ are written
    by benchmarks/figures.py from benchmarks/data/*.json and tests/logs/; --check fails when one
    differs, or when a table changed after its replay was stored."""
    out = subprocess.run([sys.executable, "benchmarks/figures.py", "--check"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_readme_links_resolve():
    """Every relative link of README.md and docs/*.md names a file of the repository."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            path = (page.parent / target).resolve()
            assert path.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"


def test_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for page in ("guide", "verdict", "metrics", "search-quality", "support", "architecture"):
        assert f"](docs/{page}.md" in text, f"README does not link docs/{page}.md"


def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "autotune", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.startswith("autotune ")


def test_committed_recipes_are_what_export_writes():
    """docs/recipes/ holds recipes exported from real studies: each must still load into the Recipe
    model and render back byte for byte, so the schema and the examples cannot drift apart."""
    from autotune.output.recipe import from_yaml, to_yaml

    recipes = sorted((ROOT / "docs" / "recipes").glob("*.yaml"))
    assert recipes
    for path in recipes:
        text = path.read_text()
        recipe = from_yaml(text)
        assert to_yaml(recipe) == text, path.name
        assert recipe.kind == "measured" and recipe.numbers and recipe.provenance.engine_version
