"""The table of vLLM's refusals, generated from its wheels by scripts/vllm_refusals.py
(autotune/engines/refusals.py reads it; autotune/engines/signatures.py classifies with it).

- The committed tables, one per vLLM version (0.26.0, 0.33.0): well-formed, short patterns, known
  classes and knobs; a line built from each pattern classifies as its row says, as an exception
  line and as pydantic's `Value error,` line; the same words on a WARNING line are no failure.
- The script, run for real on a small wheel written here (its messages are this test's own words,
  not vLLM's): what it reads, the knob a message names, the pattern it picks, what it leaves out,
  the diff it prints, and one clear line for a file that is no wheel.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autotune.engines.refusals import TABLE_DIR, read_table, refusals, table_path, versions
from autotune.engines.signatures import REFUSAL_CLASSES, classify, refusal_signatures
from autotune.engines.vllm import VllmEngine
from autotune.models import FailureCause

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "vllm_refusals.py"
TABLE_VERSIONS = ["0.26.0", "0.33.0"]
ROWS = [row for v in TABLE_VERSIONS for row in read_table(table_path(v))]


def outcome(pattern: str) -> tuple[str, tuple[str, ...]]:
    """What the classifier holds for a pattern: the row it keeps (the newest version's)."""
    kept = next(r for r in refusals() if r.pattern == pattern)
    return kept.failure_class, kept.knobs


def test_a_table_per_version_read_newest_first() -> None:
    assert versions() == ["0.33.0", "0.26.0"]
    for version in TABLE_VERSIONS:
        rows = read_table(table_path(version))
        assert len(rows) > 300, f"vLLM {version}: {len(rows)} rows"
        assert {r.version for r in rows} == {version}
    assert len(refusal_signatures()) == len({r.pattern for r in ROWS})


def test_rows_are_short_facts_with_known_classes_and_knobs() -> None:
    for row in ROWS:
        assert 3 <= len(row.pattern.split(" ")) <= 6, row
        assert row.failure_class in REFUSAL_CLASSES, row
        assert set(row.knobs) <= VllmEngine.knobs, row
        assert row.file.startswith("vllm/") and row.file.endswith(".py"), row
        cause = REFUSAL_CLASSES[row.failure_class][0]
        assert bool(row.knobs) == (cause is FailureCause.KNOB), row
        assert not any(part in row.pattern for part in ("/tmp/", "/root/", "/home/", "/work/")), row


@pytest.mark.parametrize("version", TABLE_VERSIONS)
def test_a_line_built_from_each_pattern_classifies_as_its_row(version: str) -> None:
    wrong = []
    for row in read_table(table_path(version)):
        want_class, want_knobs = outcome(row.pattern)
        cause = REFUSAL_CLASSES[want_class][0]
        for line in (f"ValueError: {row.pattern} (a line built from the table)",
                     f"(EngineCore_DP0 pid=1) ERROR 12-02 10:00:00 [core.py:1] NotImplementedError: x {row.pattern}",
                     f"  Value error, {row.pattern} [type=value_error, input_value=1, input_type=int]"):
            info = classify(line, engine="vllm")
            got = (info.failure_class, tuple(info.implicates), info.cause) if info else None
            if got != (want_class, want_knobs if cause is FailureCause.KNOB else (), cause):
                wrong.append((line, got))
    assert not wrong, f"{len(wrong)} lines classify otherwise, e.g. {wrong[:3]}"


def test_a_row_names_its_version_and_file_in_the_feature() -> None:
    info = classify("ValueError: User-specified max_model_len (262144) is greater than the derived max_model_len "
                    "(max_position_embeddings=131072 or model_max_length=None in model's config.json).", engine="vllm")
    assert info.failure_class == "max_model_len_rejected" and info.implicates == ["max_model_len"]
    assert info.feature == "what vLLM 0.33.0 checks in vllm/config/model.py"
    assert info.fix == REFUSAL_CLASSES["max_model_len_rejected"][1]


def test_the_same_words_on_a_warning_line_are_no_refusal() -> None:
    quiet = [f"(APIServer pid=1) WARNING 12-02 10:00:00 [x.py:1] {row.pattern}" for row in ROWS]
    assert classify("\n".join(quiet), engine="vllm") is None


def test_rows_are_vllms_only() -> None:
    assert classify(f"ValueError: {ROWS[0].pattern}", engine="llamacpp").failure_class == "unclassified_crash"


# ---------------------------------------------------------------- the script on a small wheel

MODEL_PY = '''
import logging
logger = logging.getLogger(__name__)


def check(max_model_len, limit):
    msg = f"Requested max_model_len ({max_model_len}) exceeds the frobnicated limit ({limit})."
    raise ValueError(f"{msg} Lower it.")


def unnamed():
    raise ValueError("Toaster temperature must stay below the boiling point")


def dependency():
    raise ImportError("The widget library is needed: pip install widgetlib")


def flags(n, m):
    raise ValueError(f"--max-num-seqs {n} must not exceed --max-num-batched-tokens {m} here")


def logged():
    logger.warning("Quantum flux capacitor overloaded in sector seven")
    raise ValueError("Quantum flux capacitor overloaded in sector seven, says tensor_parallel_size")
'''
PROPOSER_PY = '''
def propose(depth):
    assert depth > 0, "Drafter depth must be a positive whole number"
'''
OUTSIDE_PY = '''
def elsewhere():
    raise ValueError("Outside the areas read, max_model_len is never a row")
'''


def wheel(folder: Path, version: str, files: dict[str, str]) -> Path:
    path = folder / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"vllm-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def run_script(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_the_script_reads_a_wheel_into_rows(tmp_path: Path) -> None:
    out = tmp_path / "tables"
    files = {"vllm/config/model.py": MODEL_PY, "vllm/v1/spec_decode/proposer.py": PROPOSER_PY,
             "vllm/other/outside.py": OUTSIDE_PY}
    done = run_script(wheel(tmp_path, "9.9.9", files), "--out", out)
    assert done.returncode == 0, done.stderr
    rows = {r.pattern: r for r in read_table(table_path("9.9.9", out))}
    # a message assigned to a name first, its words glued to a value cut: "(" + value
    row = rows["exceeds the frobnicated limit"]
    assert (row.failure_class, row.knobs, row.version, row.file) == (
        "max_model_len_rejected", ("max_model_len",), "9.9.9", "vllm/config/model.py")
    # flags name their knobs
    assert rows["must not exceed --max-num-batched-tokens"].knobs == ("max_num_seqs", "max_num_batched_tokens")
    # a missing package names no knob
    assert rows["The widget library is needed: pip"].failure_class == "missing_dependency"
    # an assert's message in a spec-decode proposer: the area's knob
    assert rows["Drafter depth must be a positive"].knobs == ("spec_method",)
    # a pattern never shares words with a log call of the wheel
    logged = next(r for r in rows.values() if "capacitor" in r.pattern)
    assert logged.pattern not in "Quantum flux capacitor overloaded in sector seven"
    # a message naming no knob, and a file outside the areas, give no row
    assert not any("Toaster" in p or "Outside" in p for p in rows)
    assert len(rows) == 5
    assert "5 rows written" in done.stdout and "names no knob 1" in done.stdout


def test_the_script_prints_the_diff_it_made(tmp_path: Path) -> None:
    out = tmp_path / "tables"
    older = run_script(wheel(tmp_path, "9.8.0", {"vllm/config/model.py": MODEL_PY}), "--out", out)
    assert older.returncode == 0 and "4 rows written" in older.stdout
    files = {"vllm/config/model.py": MODEL_PY, "vllm/v1/spec_decode/proposer.py": PROPOSER_PY}
    first = run_script(wheel(tmp_path, "9.9.9", files), "--out", out)
    assert "diff against vLLM 9.8.0: 1 added, 0 removed" in first.stdout
    assert "+ 'Drafter depth must be a positive' -> spec_decode_unsupported [spec_method]" in first.stdout
    again = run_script(wheel(tmp_path, "9.9.9", files), "--out", out)
    assert "diff against the table that was there (5 rows): 0 change(s)" in again.stdout


def test_the_script_refuses_what_is_no_wheel_in_one_line(tmp_path: Path) -> None:
    missing = run_script(tmp_path / "nope.whl")
    assert missing.returncode == 2 and missing.stderr.strip() == f"{tmp_path / 'nope.whl'}: no such file"
    text = tmp_path / "vllm.whl"
    text.write_text("not a zip")
    bad = run_script(text)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "not a readable wheel" in bad.stderr
    assert not (TABLE_DIR / "vllm-.tsv").exists()


def test_support_gives_the_tables_sizes_as_they_are() -> None:
    import re

    text = " ".join((ROOT / "docs" / "support.md").read_text().split())
    found = re.search(r"(\d+) rows from the 0\.26\.0 wheel and (\d+) from 0\.33\.0 \((\d+) added and (\d+) gone", text)
    assert found, "docs/support.md no longer gives the table's size per version"
    old, new = (read_table(table_path(v)) for v in TABLE_VERSIONS)
    # counted as the script's diff counts: a row is its pattern, class and knobs
    before, after = ({(r.pattern, r.failure_class, r.knobs) for r in rows} for rows in (old, new))
    assert [int(n) for n in found.groups()] == [len(old), len(new), len(after - before), len(before - after)]
