"""Bad input: one clear line, a non-zero exit, and runs.db untouched."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.space.candidates import load_space
from stand_in import placeholder_gguf

GOOD = """
name: tiny
engine: llamacpp
model: {name: m, path: MODEL}
knobs:
  - {name: n_threads, values: [1, 2], default: 1}
"""


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """An existing runs.db holding one study, to prove bad input leaves it as it was."""
    from autotune.models import Candidate, TrialResult
    from autotune.store import Store

    store = Store(tmp_path / "runs.db")
    store.db["tuning_studies"].insert(
        {"name": "old", "space_name": "tiny", "engine": "llamacpp", "hardware": "cpu", "nodes": 1, "host_key": "h",
         "space": load_space("llamacpp-gemma3-270m").model_dump_json(), "created_at": "2026-11-29T00:00:00+00:00"}
    )
    store.save_trial(TrialResult(study="old", number=0, candidate=Candidate(engine="llamacpp", params={}), status="skipped", reason="x"))
    return tmp_path / "runs.db"


def run(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def space_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text.replace("MODEL", str(placeholder_gguf(tmp_path))))
    return str(path)


CASES = {
    "malformed yaml": ("name: [unclosed\n", "malformed YAML at line"),
    "unknown key": (GOOD + "colour: blue\n", "unknown key 'colour'"),
    "unknown engine": (GOOD.replace("engine: llamacpp", "engine: tgi"), "unknown engine 'tgi'; known engines: llamacpp, vllm"),
    "unknown knob": (GOOD + "  - {name: n_warp, values: [1], default: 1}\n", "engine 'llamacpp' has no knob 'n_warp'"),
    "missing model": (GOOD.replace("path: MODEL", "path: /nonexistent/model.gguf"), "model file /nonexistent/model.gguf does not exist"),
    "no valid candidate": (
        GOOD + "rules:\n  - {when: {n_threads: [1, 2]}, then: {n_threads: [4]}, reason: never}\n",
        "the rules rule out all 2 candidates",
    ),
    "bad value type": (GOOD.replace("values: [1, 2]", "values: 3"), "knobs.0.values"),
}


# issue 17: knob values checked against the engine's own options before runs.db opens
CASES.update(
    {
        "knob value of the wrong type": (
            GOOD + "  - {name: n_ctx, values: [abc, 2048], default: 2048}\n",
            "knob n_ctx: value 'abc' is not valid for llama.cpp's --n_ctx (Input should be a valid integer",
        ),
        "knob value out of range": (
            GOOD.replace("values: [1, 2]", "values: [0, 1]"),
            "knob n_threads: value 0 is not valid for llama.cpp's --n_threads (Input should be greater than or equal to 1)",
        ),
        "unknown kv cache type": (
            GOOD + "  - {name: type_k, values: [f16, q9_9], default: f16}\n",
            "knob type_k: 'q9_9' is not a KV cache type",
        ),
        "fixed value of the wrong type": (
            GOOD + "fixed: {flash_attn: maybe}\n",
            "knob flash_attn: value 'maybe' is not valid for llama.cpp's --flash_attn",
        ),
    }
)


# issue 32: the capacity objective's SLO checked when the space loads
CASES.update(
    {
        "capacity without an slo": (GOOD + "objective: {metric: capacity_at_slo}\n", "needs objective.slo"),
        "slo attainment of 1": (
            GOOD + "objective: {metric: capacity_at_slo, slo: {ttft_ms: 2000, itl_ms: 50, attainment: 1}}\n",
            "attainment",
        ),
        "negative latency limit": (
            GOOD + "objective: {metric: capacity_at_slo, slo: {ttft_ms: -5, itl_ms: 50}}\n", "ttft_ms",
        ),
        "too few requests to pass": (
            GOOD + "objective: {metric: capacity_at_slo, slo: {ttft_ms: 2000, itl_ms: 50, min_requests: 20}}\n",
            "min_requests 20 can never pass attainment 0.95",
        ),
        "slo on another objective": (
            GOOD + "objective: {metric: decode_tps_prose, slo: {ttft_ms: 2000, itl_ms: 50}}\n",
            "objective.slo is used by metric capacity_at_slo only",
        ),
    }
)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_space_exits_2_and_leaves_db_untouched(case, tmp_path, db, capsys):
    text, message = CASES[case]
    before = digest(db)
    code, out = run(capsys, "search", "--space", space_file(tmp_path, text), "--db", str(db))
    assert code == 2, out
    assert message in out
    assert out.strip().startswith("error:") and len(out.strip().splitlines()) == 1, out
    assert digest(db) == before


def test_unknown_space_name(capsys, db):
    code, out = run(capsys, "search", "--space", "no-such", "--db", str(db))
    assert code == 2 and "unknown search space 'no-such'" in out


def test_unwritable_db_path(tmp_path, capsys):
    code, out = run(capsys, "search", "--space", space_file(tmp_path, GOOD), "--db", str(tmp_path / "missing" / "runs.db"))
    assert code == 2 and "does not exist" in out
    assert not (tmp_path / "missing").exists()


def test_read_only_folder(tmp_path, capsys, monkeypatch):
    # the suite may run as root, who can write anywhere: deny writing the way the OS would
    import os

    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if mode == os.W_OK else real_access(p, mode))
    code, out = run(capsys, "search", "--space", space_file(tmp_path, GOOD), "--db", str(tmp_path / "runs.db"))
    assert code == 2 and "permission denied" in out
    assert not (tmp_path / "runs.db").exists()


def test_db_that_is_not_sqlite(tmp_path, capsys):
    bad = tmp_path / "runs.db"
    bad.write_text("not a database\n" * 50)
    before = digest(bad)
    code, out = run(capsys, "show", "--db", str(bad))
    assert code == 2 and "cannot use" in out
    assert digest(bad) == before


def test_show_without_db_does_not_create_one(tmp_path, capsys):
    code, out = run(capsys, "show", "--db", str(tmp_path / "runs.db"))
    assert code == 2 and "no database" in out
    assert not (tmp_path / "runs.db").exists()


def test_show_and_export_unknown_study(db, capsys):
    code, out = run(capsys, "show", "--db", str(db), "--study", "nope")
    assert code == 2 and "no study 'nope'" in out


def test_export_study_without_winner(db, capsys):
    code, out = run(capsys, "export", "--db", str(db), "--study", "old")
    assert code == 2 and "nothing to export" in out


def test_usage_error_exits_2(capsys):
    code, out = run(capsys, "search", "--trials", "0")
    assert code == 2


def test_classify_a_log(capsys):
    log = Path(__file__).parent / "logs" / "kv_quant_needs_flash_attn__llamacpp_q4_0_kv_no_flash_attn.log"
    code, out = run(capsys, "probe", "--classify", str(log))
    assert code == 0
    assert "kv_quant_needs_flash_attn" in out and "quantized V cache requires flash_attn" in out


def test_classify_clean_log(capsys):
    log = Path(__file__).parent / "logs" / "clean__llamacpp_q8_0_kv_flash_attn.log"
    code, out = run(capsys, "probe", "--classify", str(log))
    assert code == 0 and "shows no failure" in out


def test_classify_an_environment_failure_says_no_knob_explains_it(capsys):
    log = Path(__file__).parent / "logs" / "nccl_timeout__vllm_ray_watchdog.log"
    code, out = run(capsys, "probe", "--classify", str(log))
    assert code == 0 and "nccl_timeout" in out
    assert "blames: the environment" in " ".join(out.split()) and "implicates knobs" not in out


def test_classify_missing_file(capsys, tmp_path):
    code, out = run(capsys, "probe", "--classify", str(tmp_path / "nope.log"))
    assert code == 2 and "cannot read log" in out


def test_plan_spark_four_nodes(capsys):
    code, out = run(capsys, "plan", "--space", "minimax-m3.1-flash-spark4", "--hardware", "spark", "--nodes", "4")
    assert code == 0, out
    assert "tok/s" in out or "decode" in out


def test_plan_layout_mismatch(capsys):
    code, out = run(capsys, "plan", "--space", "minimax-m3.1-flash-spark4", "--hardware", "spark", "--nodes", "3")
    assert code == 2 and "--nodes 3 on spark" in out


def test_unknown_hardware(capsys):
    code, out = run(capsys, "plan", "--space", "minimax-m3.1-flash-spark4", "--hardware", "tpu9")
    assert code == 2 and "tpu9" in out


def test_probe_without_engine_stores_and_reuses(tmp_path, capsys):
    import json

    db = tmp_path / "runs.db"
    code, out = run(capsys, "probe", "--space", "llamacpp-gemma3-270m", "--db", str(db), "--no-engine", "--json")
    assert code == 0, out
    report = json.loads(out)
    features = {r["feature"]: r for r in report["results"]}
    assert "kernel:fp8_scaled_mm_tensorwise" in features and "kernel:bf16_golden" in features
    assert report["reused"] is False and report["device"]["cpu_cores"] >= 1
    code, out = run(capsys, "probe", "--space", "llamacpp-gemma3-270m", "--db", str(db), "--no-engine", "--json")
    assert code == 0 and json.loads(out)["reused"] is True
    code, out = run(capsys, "probe", "--space", "llamacpp-gemma3-270m", "--db", str(db), "--no-engine")
    assert code == 0 and "capabilities" in out and "stored results reused" in out


def test_plan_drops_what_this_hosts_probes_show_failing(tmp_path, capsys):
    """Planning for this host's own hardware, stored probe failures drop candidates (with the
    reason); planning for other hardware, this host's probes say nothing."""
    import json

    from autotune.engines import get_engine
    from autotune.models import ProbeResult
    from autotune.hardware.device import detect, host_fingerprint
    from autotune.store import Store

    db = tmp_path / "runs.db"
    host = host_fingerprint(detect(), get_engine("llamacpp"))
    failing = ProbeResult(feature="type_v=q4_0 flash_attn=False", status="fails", signature="kv_quant_needs_flash_attn",
                          params={"type_v": "q4_0", "flash_attn": False})
    Store(db).save_probe_results(host.key(), [failing])

    def planned(*extra: str) -> dict:
        code, out = run(capsys, "plan", "--space", "llamacpp-gemma3-270m", "--db", str(db), "--json", *extra)
        assert code == 0, out
        return json.loads(out)

    def blocked(label: str) -> bool:
        return "type_v=q4_0" in label and "flash_attn=False" in label

    here = planned("--hardware", "auto")
    assert here["hardware"] == "cpu"
    assert not [e for e in here["kept"] if blocked(e["label"])]
    dropped = [e for e in here["dropped"] if e["reason"].startswith("probe: type_v=q4_0 flash_attn=False fails")]
    assert dropped and all(blocked(e["label"]) for e in dropped)
    elsewhere = planned("--hardware", "h200")
    assert [e for e in elsewhere["kept"] if blocked(e["label"])]
    assert not [e for e in elsewhere["dropped"] if e["reason"].startswith("probe:")]


# ---------------------------------------------------------------- issue 17: checked before runs.db opens

def refused(capsys, db: Path, *args: str, code: int = 2) -> str:
    """Run `autotune search ... --db db`: the exit code, one line of output, runs.db unchanged."""
    before = digest(db)
    rc, out = run(capsys, "search", *args, "--db", str(db))
    text = out.strip()
    assert rc == code, text
    assert text.startswith("error:") and len(text.splitlines()) == 1, text
    assert digest(db) == before
    return text


def cluster_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return str(path)


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


def test_cluster_file_with_the_process_launcher_is_refused(tmp_path, db, capsys):
    cluster = cluster_file(tmp_path, "nodes:\n  - {ip: 127.0.0.1}\n")
    text = refused(capsys, db, "--space", space_file(tmp_path, GOOD), "--cluster", cluster)
    assert "needs --launcher docker (or ray)" in text and "would ignore the boxes" in text


def test_ray_launcher_with_a_box_that_is_not_this_host(tmp_path, db, capsys):
    cluster = cluster_file(tmp_path, "nodes:\n  - {ip: 192.0.2.10}\n")
    text = refused(capsys, db, "--space", space_file(tmp_path, GOOD), "--cluster", cluster, "--launcher", "ray")
    assert "node 0 (192.0.2.10) is not an address of this host" in text


def test_unreachable_docker_daemon_is_refused_quickly(tmp_path, db, capsys):
    import time

    pytest.importorskip("docker")
    port = closed_port()
    cluster = cluster_file(tmp_path, f"image: img\nnodes:\n  - {{address: 'tcp://127.0.0.1:{port}', ip: 127.0.0.1}}\n")
    t0 = time.monotonic()
    text = refused(capsys, db, "--space", space_file(tmp_path, GOOD), "--cluster", cluster, "--launcher", "docker")
    assert f"cluster node 0: Docker daemon tcp://127.0.0.1:{port} is not reachable" in text
    assert time.monotonic() - t0 < 30


def test_unreachable_ssh_daemon_is_refused(tmp_path, db, capsys):
    pytest.importorskip("paramiko")
    port = closed_port()
    cluster = cluster_file(tmp_path, f"image: img\nnodes:\n  - {{address: 'ssh://me@127.0.0.1:{port}', ip: 127.0.0.1}}\n")
    import shutil

    if shutil.which("ssh") is None:
        text = refused(capsys, db, "--space", space_file(tmp_path, GOOD), "--cluster", cluster, "--launcher", "docker", code=3)
        assert "`ssh` client" in text
    else:
        text = refused(capsys, db, "--space", space_file(tmp_path, GOOD), "--cluster", cluster, "--launcher", "docker")
        assert "is not reachable" in text and f"127.0.0.1', {port}" in text


def test_ssh_daemon_without_paramiko_exits_3(tmp_path, db, capsys, monkeypatch):
    """paramiko missing is simulated (it is installed here): the check names the extra to install."""
    from autotune.launchers import preflight

    real = preflight._installed
    monkeypatch.setattr(preflight, "_installed", lambda module: False if module == "paramiko" else real(module))
    cluster = cluster_file(tmp_path, "image: img\nnodes:\n  - {address: 'ssh://me@spark1', ip: 127.0.0.1}\n")
    text = refused(capsys, db, "--space", space_file(tmp_path, GOOD), "--cluster", cluster, "--launcher", "docker", code=3)
    assert "needs paramiko: pip install 'autotune[docker]'" in text


def test_the_docker_extra_installs_what_ssh_needs():
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    docker_extra = " ".join(project["optional-dependencies"]["docker"])
    assert "paramiko" in docker_extra


def test_changed_space_is_refused_saying_what_changed(tmp_path, db, capsys):
    from autotune.commands.setup import prepare
    from autotune.store import Store

    path = space_file(tmp_path, GOOD)
    plan = prepare(space_name=path, model_path=None, db_path=db, study="tiny", hardware=None, nodes=None,
                   accuracy=False, logs_dir=tmp_path)
    Store(db).save_study("tiny", plan.space, "cpu", 1, "h")
    (tmp_path / "space.yaml").write_text(Path(path).read_text().replace("values: [1, 2]", "values: [1, 2, 3]"))
    text = refused(capsys, db, "--space", path, "--study", "tiny")
    assert "study 'tiny' was created from another space: the new one only adds knob values (n_threads + 3)" in text
    assert "--study NAME" in text
    (tmp_path / "space.yaml").write_text(Path(path).read_text().replace("values: [1, 2, 3]", "values: [1, 2]") + "workload: {repeats: 5}\n")
    text = refused(capsys, db, "--space", path, "--study", "tiny")
    assert "(workload.repeats: 3 -> 5)" in text


def test_a_ctrl_c_during_the_clean_up_still_exits_130_with_engines_stopped(monkeypatch):
    """A second (or late) Ctrl-C while autotune stops its engines used to escape as a traceback
    (exit -2, seen once in CI under load); it must end in 130 with the engines stopped."""
    from autotune import cli

    stops: list[str] = []

    def interrupted_app(*args, **kwargs):
        raise KeyboardInterrupt

    def stop_engines() -> None:
        stops.append("stop")
        if len(stops) == 1:
            raise KeyboardInterrupt  # the second Ctrl-C lands inside the first clean-up

    monkeypatch.setattr(cli, "app", interrupted_app)
    monkeypatch.setattr(cli, "_stop_engines", stop_engines)
    assert cli.main(["search"]) == 130
    assert len(stops) >= 2  # stopped again after the interrupted clean-up


def test_a_ctrl_c_inside_string_compiled_code_still_exits_130():
    """Under `python -m`, CPython ends a run by SIGINT (exit -2) when a KeyboardInterrupt ever ended a
    string exec, even one autotune caught and handled: seen as rc -2 when Ctrl-C landed in httpx's
    lazy import of httpcore (its dataclasses) while an engine started."""
    tests = Path(__file__).resolve().parent
    proc = subprocess.run([sys.executable, "-m", "fakes.ctrl_c_in_exec", "search"], cwd=tests, text=True,
                          capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": f"{tests}{os.pathsep}{tests.parent}"})
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted: engine processes stopped" in proc.stderr


def plan_rows(out: str) -> int:
    """Candidate rows of the plan's table: each row's first line shows its TPxPP layout."""
    import re

    return len(re.findall(r"^│[^│]*│\s+\d+x\d+\s+│", out, flags=re.MULTILINE))


def test_plan_shows_the_fastest_candidates_and_says_how_to_see_all(capsys):
    # the Spark x4 space keeps 2592 candidates: one table row each was 24,000 lines of terminal
    code, out = run(capsys, "plan", "--space", "minimax-m3.1-flash-spark4", "--hardware", "spark", "--nodes", "4")
    assert code == 0, out
    assert plan_rows(out) == 20
    assert "the 20 fastest-predicted of 2592 kept" in out and "--top 0" in out
    assert "launch of the best-predicted candidate" in out


def test_plan_top_picks_how_many_and_zero_shows_all(capsys):
    import json

    args = ["plan", "--space", "minimax-m3.1-flash-spark1", "--hardware", "spark", "--nodes", "1"]
    code, out = run(capsys, *args, "--json")
    report = json.loads(out)
    kept, dropped = len(report["kept"]), len(report["dropped"])
    assert kept > 5 and dropped > 5
    code, out = run(capsys, *args, "--top", "5")
    assert code == 0 and plan_rows(out) == 10  # five kept, five dropped
    assert f"the 5 fastest-predicted of {kept} kept and 5 of {dropped} dropped" in out
    code, out = run(capsys, *args, "--top", "0")
    assert code == 0 and plan_rows(out) == kept + dropped
    assert "fastest-predicted of" not in out
    code, out = run(capsys, *args, "--top", "-1")
    assert code == 2


def test_plan_json_holds_every_candidate_whatever_top_says(capsys):
    import json

    args = ["plan", "--space", "minimax-m3.1-flash-spark4", "--hardware", "spark", "--nodes", "4", "--json"]
    code, out = run(capsys, *args, "--top", "3")
    assert code == 0 and len(json.loads(out)["kept"]) == 2592


@pytest.mark.parametrize("hardware, arch", [("h200", "sm_90"), ("h100", "sm_90")])
def test_plan_for_other_hardware_drops_what_its_arch_is_known_to_refuse(capsys, hardware, arch):
    """With no probe of such a host, `plan --hardware h200` put nvfp4 KV candidates first, which
    no vLLM attention backend takes on sm_90 (recorded on the H200); the profile's known failures
    drop them, naming the arch and the source. (Spark has none: there the image decides, by probe.)"""
    import json

    code, out = run(capsys, "plan", "--space", "vllm-gemma3-270m", "--hardware", hardware, "--json")
    assert code == 0, out
    plan = json.loads(out)
    assert plan["kept"] and not [e for e in plan["kept"] if "kv_cache_dtype=nvfp4" in e["label"]]
    dropped = [e for e in plan["dropped"] if "kv_cache_dtype=nvfp4" in e["label"]]
    assert dropped and all(e["reason"].startswith(f"known to fail on {hardware} ({arch}): ") for e in dropped)
    fp8 = [e for e in plan["kept"] if "kv_cache_dtype=fp8" in e["label"]]
    assert fp8  # only the refused value goes


def test_every_time_option_takes_one_duration_format(capsys):
    """Issue 51: --time-budget was minutes and probe --budget seconds; each now takes 90m, 130s or
    1.5h, and a bare number keeps the option's old unit so that scripts written before stay right."""
    from autotune.cli import duration_s, main

    assert duration_s("90m", "m") == 5400 and duration_s("130s", "m") == 130 and duration_s("1.5h", "s") == 5400
    assert duration_s("10", "m") == 600 and duration_s("480", "s") == 480
    assert main(["search", "--dry-run", "--time-budget", "ten minutes"]) == 2
    assert "is not a duration: write it like 90m, 130s or 1.5h" in capsys.readouterr().err
    assert main(["probe", "--no-engine", "--timeout", "0s"]) == 2
    assert "a duration must be above zero" in capsys.readouterr().err
    # probe --budget 0 is a request (launch nothing, list what waits: test_launch_order), not a mistake
    assert duration_s("0", "s", zero_ok=True) == 0
    assert main(["probe", "--no-engine", "--budget", "-5s"]) == 2
    assert "a duration cannot be negative" in capsys.readouterr().err


def test_probe_takes_hardware_and_nodes_like_search(tmp_path, capsys):
    """Issue 51: a bare `probe` after `search --hardware spark --nodes 4` probed the CPU space; probe
    now picks the space as search does and says which on stderr."""
    from autotune.cli import main
    from autotune.space.choice import choose_space

    chosen = choose_space(None, "spark", 4)
    db = tmp_path / "runs.db"
    assert main(["probe", "--hardware", "spark", "--nodes", "4", "--no-engine", "--json", "--db", str(db)]) == 0
    assert chosen.name != "llamacpp-gemma3-270m" and chosen.name in capsys.readouterr().err
    assert main(["probe", "--nodes", "4", "--no-engine", "--db", str(db)]) == 2  # as search: name the hardware
    assert "without --space: name the hardware" in capsys.readouterr().err
