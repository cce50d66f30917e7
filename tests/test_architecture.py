"""docs/architecture.md against the code: every package it names exists and says in its docstring
what lives there, the top level stays small, and every import of autotune's own code follows the
table of allowed imports (no package reaches up past what its row names)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autotune"
GROUND = {"models", "errors", "yaml_files", "autotune"}  # importable from anywhere ("autotune": __version__)


def allowed() -> dict[str, set[str] | None]:
    """package -> the packages it may import (None: every one), from the doc's table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("<!-- allowed-imports:begin -->")[1].split("<!-- allowed-imports:end -->")[0]
    rows = {}
    for line in table.strip().splitlines()[2:]:
        name, _, may = [c.strip() for c in line.strip("|").split("|")]
        name = name.strip("`").removesuffix("/").removesuffix(".py")
        rows[name] = None if may.startswith("every") else {m.strip() for m in may.split(",") if m.strip()}
    return rows


def room_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_rooms(path: Path) -> set[str]:
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "autotune":
            parts = node.module.split(".")
            names = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
            rooms.update("autotune" if n == "__version__" else n for n in names)
        elif isinstance(node, ast.Import):
            rooms.update(a.name.split(".")[1] for a in node.names if a.name.startswith("autotune."))
    return rooms


def test_every_package_the_map_names_exists_and_says_what_it_holds():
    rows = allowed()
    assert len(rows) >= 15
    for name in rows:
        if (PACKAGE / name).is_dir():
            doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
            summary = (doc or "").split("\n\n")[0]
            assert summary and len(summary.splitlines()) <= 3, f"autotune/{name}/__init__.py: say in two lines what lives there"
        else:
            assert (PACKAGE / f"{name}.py").is_file(), f"docs/architecture.md names {name}, which does not exist"
    on_disk = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert on_disk <= set(rows), f"packages missing from docs/architecture.md: {on_disk - set(rows)}"


def test_the_top_level_holds_at_most_a_dozen_modules():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 12, modules


def test_every_import_follows_the_table():
    rows = allowed()
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        me = room_of(path)
        may = rows.get(me, set()) if me not in {"__init__", "__main__"} else None
        if may is None:
            continue
        for room in imported_rooms(path) - GROUND - {me}:
            if room not in may:
                wrong.append(f"{path.relative_to(ROOT)} imports {room}")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_check_catches_an_import_the_table_does_not_allow(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("from autotune.study.tuner import Tuner\nfrom autotune import __version__\n")
    assert imported_rooms(bad) == {"study", "autotune"}
    assert "study" not in (allowed()["trial"] or set())
    assert re.search(r"\| `trial/` \|", (ROOT / "docs" / "architecture.md").read_text())


LONG_MODULE_LINES = 600


def test_a_long_module_says_at_its_top_why_it_is_one_module():
    """Issue 51: no module over ~600 lines without a reason written at its top ("on purpose" in its
    docstring, and why); a hub that grows past it is split by job instead."""
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > LONG_MODULE_LINES and "on purpose" not in (ast.get_docstring(ast.parse(text)) or ""):
            unexplained.append(f"{path.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    assert not unexplained, "split these by job or say at their top why they are one: " + ", ".join(unexplained)
