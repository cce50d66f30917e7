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


def parallel_db(path: Path) -> Path:
    """runs.db of a study whose trials ran two at a time on boxes 0 and 1 (one interrupted)."""
    from test_show_layout import STUDY, _ok, _trial

    store = Store(path)
    from autotune.space.candidates import load_space

    store.save_study(STUDY, load_space("llamacpp-gemma3-270m"), "cpu", 1, "host")
    at = "2026-12-03T10:00:{:02d}.000+00:00".format
    for trial in [
        _ok(0, {}, 23.6).model_copy(update={"boxes": [0], "started_at": at(0), "duration_s": 30.0}),
        _ok(1, {"n_threads": 2}, 40.0).model_copy(update={"boxes": [1], "started_at": at(1), "duration_s": 20.0}),
        _ok(3, {"n_batch": 256}, 30.0).model_copy(update={"boxes": [1], "started_at": at(22), "duration_s": 20.0}),
        _ok(4, {"n_ubatch": 128}, 25.0).model_copy(update={"boxes": [0], "started_at": at(31), "duration_s": 10.0}),
        _trial(5, {"n_ctx": 4096}, status="interrupted", reason="interrupted (Ctrl-C / SIGTERM)", boxes=[1]),
    ]:
        store.save_trial(trial)
    return path


def test_the_boxes_section_draws_each_trial_on_its_box_and_the_trials_in_flight(tmp_path):
    from autotune.output.box_timeline import in_flight, spans

    db = parallel_db(tmp_path / "runs.db")
    trials = Store(db).trials("layout")
    # trial 0 on box 0 from 0 s to 30 s; 1 then 3 on box 1; 4 on box 0 once 0 ended; 5 cut: not drawn
    assert [(s.trial, s.box, s.start_s, s.end_s) for s in spans(trials)] == [
        (0, 0, 0.0, 30.0), (1, 1, 1.0, 21.0), (3, 1, 22.0, 42.0), (4, 0, 31.0, 41.0)]
    assert in_flight(trials) == [(0.0, 1), (1.0, 2), (21.0, 1), (22.0, 2), (30.0, 1), (31.0, 2), (41.0, 1), (42.0, 0)]

    page = tmp_path / "report.html"
    assert main(["report", "--db", str(db), "-o", str(page)]) == 0
    html = page.read_text()
    assert "<h2>Boxes: where and when each trial ran" in html
    assert "at most 2 trial(s) in flight at once; trials per box: box 0: 2, box 1: 2" in html
    assert "1 cut attempt(s) (interrupted, crashed) recorded no wall time" in html
    assert "<td>box 1</td>" in html  # the trials table names each trial's box
    dom = dump_dom(page)
    markup = plot_markup(dom, "plot-boxes")
    assert 'class="main-svg"' in markup, "the box timeline was not drawn"
    assert markup.count('class="point"') >= 4  # a bar per trial that ran


def test_a_study_without_boxes_says_one_at_a_time():
    from autotune.output.box_timeline import box_figure, spans
    from autotune.output.html import boxes_section
    from autotune.study.outcome import StudyOutcome
    from test_show_layout import _ok

    trials = [_ok(0, {}, 23.6).model_copy(update={"started_at": "2026-12-03T10:00:00+00:00"}),
              _ok(1, {"n_threads": 2}, 40.0).model_copy(update={"started_at": "2026-12-03T10:05:00+00:00"})]
    outcome = StudyOutcome(name="s", trials=trials, ranked=trials, baseline=trials[0], skipped_reasons={})
    assert "one trial at a time, no box pool" in boxes_section(outcome)
    assert [s.box for s in spans(trials)] == [None, None] and box_figure(trials, COLORS) is not None
