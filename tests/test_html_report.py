"""`autotune report`: a self-contained HTML file, opened in headless Chromium as a person would:
the plots must be drawn (SVG elements plotly creates only when its JavaScript ran, and the
trials' marker colours in the screenshot), with no network."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image

from autotune.cli import main
from autotune.output.html import COLORS, accuracy_of
from autotune.store import Store
from chromium import dump_dom, screenshot
from real_study import real_study

PLOTS = ("plot-pareto", "plot-knobs", "plot-time", "plot-predicted")
SECTIONS = ("Verdict", "Pareto fronts", "Throughput per knob value", "Trials", "Pruned before launching",
            "Host probe matrix", "Planner: predicted vs measured", "Recipe")


def plot_markup(dom: str, div_id: str) -> str:
    """The DOM of one plot's div, up to the next plot or section."""
    start = dom.index(f'id="{div_id}"')
    end = min([i for i in (dom.find('id="plot-', start + 10), dom.find("<section", start)) if i > 0] or [len(dom)])
    return dom[start:end]


def count_colour(png: Path, hex_colour: str, tolerance: int = 12) -> int:
    target = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    image = Image.open(png).convert("RGB")
    return sum(
        n for n, rgb in image.getcolors(maxcolors=1 << 24) if all(abs(a - b) <= tolerance for a, b in zip(rgb, target))
    )


def check_self_contained(html: str) -> None:
    assert not re.search(r"<script[^>]+src=", html), "every script must be inline"
    assert not re.search(r"<link[^>]+href=", html), "no stylesheet from elsewhere"
    assert "Plotly.newPlot" in html


@pytest.mark.engine
def test_report_of_a_real_study_draws_its_plots_in_chromium(tmp_path_factory, gemma_gguf, tmp_path):
    study = real_study(tmp_path_factory, gemma_gguf)
    before = study.db.read_bytes()
    page = tmp_path / "report.html"
    assert main(["report", "--db", str(study.db), "--study", study.study, "-o", str(page)]) == 0
    assert study.db.read_bytes() == before, "report only reads runs.db"
    html = page.read_text()
    check_self_contained(html)
    for title in SECTIONS:
        assert f"<h2>{title}" in html, title
    trials = Store(study.db).trials(study.study)
    failed = [t for t in trials if t.status == "failed"]
    assert failed and failed[0].failure.failure_class in html  # the failure class of the q8_0 V trial
    # the other q8_0 candidate: pruned when sampled, else listed as ruled out by the learned failure
    pruned = [t for t in trials if t.status == "skipped"]
    if pruned:
        assert "learned: flash_attn=False, type_v=q8_0" in html
    else:
        assert "ruled out by failures learned on this host" in html and "flash_attn=False, type_v=q8_0" in html
    best = Store(study.db).trials(study.study)
    outcome_best = max((t for t in best if t.feasible), key=lambda t: t.score or 0.0)
    if outcome_best.number != 0:  # which config wins on a loaded 2-core machine is not fixed
        assert "confirmation (1 interleaved rounds" in html
    else:
        assert "The baseline (engine defaults) is the best config measured." in html
    assert "python3 -m llama_cpp.server" in html  # the recipe's launch
    assert "kernel:fp8_scaled_mm" in html  # the host's probe matrix

    dom = dump_dom(page)
    ran = [t for t in trials if t.status == "ok"]
    for div_id in PLOTS:
        markup = plot_markup(dom, div_id)
        assert 'class="main-svg"' in markup, f"{div_id} was not drawn"
    # every ran trial on the TTFT front, and every one whose accuracy was measured on the other (a
    # dominated trial skipped its gates; with gates at the end the baseline measured qeval only)
    with_accuracy = [t for t in ran if accuracy_of(t) is not None]
    assert with_accuracy and plot_markup(dom, "plot-pareto").count('class="point"') >= len(ran) + len(with_accuracy)
    assert plot_markup(dom, "plot-time").count('class="point"') >= len([t for t in trials if t.status != "skipped"])

    png = screenshot(page, tmp_path / "report.png")
    assert count_colour(png, COLORS["best"]) > 50, "the best trial's marker is not on the screenshot"
    assert count_colour(png, COLORS["baseline"]) > 50


def test_report_of_a_stored_study_draws_in_chromium(tmp_path):
    """Fast path (no engine): the same checks on trials saved straight into runs.db."""
    from test_show_layout import STUDY, build_db

    db = build_db(tmp_path / "runs.db")
    page = tmp_path / "report.html"
    assert main(["report", "--db", str(db), "-o", str(page)]) == 0
    check_self_contained(page.read_text())
    dom = dump_dom(page)
    for div_id in PLOTS:
        assert 'class="main-svg"' in plot_markup(dom, div_id), div_id
    assert "rejected: qeval gate" in dom and "significantly worse" in dom and STUDY in dom


def test_report_of_a_missing_study_is_bad_input(tmp_path, capsys):
    from test_show_layout import build_db

    db = build_db(tmp_path / "runs.db")
    before = db.read_bytes()
    assert main(["report", "--db", str(db), "--study", "nope", "-o", str(tmp_path / "r.html")]) == 2
    assert "no study 'nope'" in capsys.readouterr().err
    assert db.read_bytes() == before and not (tmp_path / "r.html").exists()


def test_the_planner_section_sets_its_single_stream_prediction_against_single_stream_decode():
    # The planner predicts decode at one stream. With an 8-stream objective the trial's objective is
    # a wave's aggregate tok/s; "measured / predicted" must not divide that by a one-stream number.
    from autotune.output.html import predicted_figure, predicted_rows
    from autotune.models import Candidate, Measurement, TrialResult

    trial = TrialResult(
        study="s", number=3, candidate=Candidate(engine="vllm", params={"kv_cache_dtype": "auto"}), status="ok",
        objective=3200.0, score=3100.0, predicted={"decode_tps": 500.0},
        measurements=[
            Measurement.of("decode_tps.prose", "tok/s", "1 stream", [400.0, 402.0, 398.0]),
            Measurement.of("decode_tps.structured", "tok/s", "1 stream", [400.0, 400.0, 400.0]),
            Measurement.of("output_tps.c8", "tok/s", "8 streams, one wave", [3200.0]),
        ],
    )
    cells = re.findall(r"<td>([^<]*)</td>", predicted_rows([trial]))
    assert cells == ["3", "500.0", "400.0", "0.80"]
    figure = predicted_figure([trial])
    assert figure is not None and list(figure.data[0].y) == pytest.approx([400.0])
