"""benchmarks/figures.py: a figure block is rewritten from its data, text outside the markers is
left alone, and a replay of a table that changed since is reported stale (tests/test_docs.py runs
the whole `--check` on the committed pages)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import figures  # noqa: E402


def test_a_hand_edited_figure_is_put_back():
    page = (ROOT / "docs" / "search-quality.md").read_text()
    tampered = page.replace("| 2 (12%) | autotune (default) | 0.990", "| 2 (12%) | autotune (default) | 0.999", 1)
    assert tampered != page
    assert figures.render_page(tampered, {}) == page


def test_text_outside_the_markers_is_left_alone():
    text = "before\n<!-- figures:corpus:begin -->\nold text\n<!-- figures:corpus:end -->\nafter\n"
    out = figures.render_page(text, {})
    assert out.startswith("before\n<!-- figures:corpus:begin -->\n")
    assert out.endswith("\n<!-- figures:corpus:end -->\nafter\n")
    assert "old text" not in out and "logs (`tests/logs/*.log`, `tests/logs/v*/*.log`)" in out


def test_an_unknown_block_is_refused():
    with pytest.raises(SystemExit, match="unknown figures block"):
        figures.render_page("<!-- figures:nope:begin -->\n<!-- figures:nope:end -->\n", {})


def test_a_replay_of_a_changed_table_is_stale():
    rep = figures.Replayed("gt-vllm-minimax-h200-c8")
    rep.data["code"] = figures.git("rev-parse", "HEAD").stdout.strip()  # as if replayed now
    assert rep.stale() is None
    rep.data["table_sha256"] = "0" * 64
    assert "changed since it was replayed" in (rep.stale() or "")


def test_a_replay_made_before_the_last_change_to_what_it_measures_is_stale():
    """Issue 51: the H200 8-stream replay was made 183 commits before the code it measures last changed."""
    if figures.last_change() is None:
        pytest.skip("no git history here (a shallow clone): only the tables' checksums can be checked")
    rep = figures.Replayed("gt-vllm-minimax-h200-c8")
    before = figures.git("rev-parse", f"{figures.last_change()}~1").stdout.strip()
    rep.data["code"] = before[:12]
    assert "older than the last change to what it measures" in (rep.stale() or "")
    rep.data["code"] = figures.last_change()[:12]
    assert rep.stale() is None
    rep.data["code"] = f"{figures.last_change()[:12]} (with uncommitted changes)"
    assert "uncommitted" in (rep.stale() or "")


def test_every_block_is_on_a_page_and_every_replay_is_stored():
    used = {m.group(2) for page in figures.PAGES for m in figures.MARK.finditer((ROOT / page).read_text())}
    assert used == set(figures.BLOCKS)
    for name in figures.REPLAYS:
        data = figures.Replayed(name).data
        assert data["seeds"] == figures.SEEDS and data["budgets"] == figures.REPLAYS[name]["budgets"]
        assert len(data["runs"]) == data["seeds"] * len(data["budgets"]) * len(data["strategies"])


def test_every_log_of_the_corpus_says_where_it_came_from():
    for path in figures.corpus_logs():
        assert figures.corpus_origin(path.read_text().splitlines()[0]) in ("H200", "public issue", "this CPU", "hand-written")
