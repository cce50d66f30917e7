"""Per-trial seconds per phase (issue 12, item 4): timed from the trial's own progress events,
stored on the TrialResult, shown by `show`."""

from __future__ import annotations

from pathlib import Path

from autotune.cli import main
from autotune.engines import get_engine
from autotune.models import Candidate, TrialResult
from autotune.trial.phases import PHASES, Phase, PhaseClock, Step
from autotune.space.candidates import load_space
from autotune.store import Store


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_steps_name_their_phase_and_say_what_the_status_line_shows():
    assert Step.of(Phase.WARM_UP) == Step(phase=Phase.WARM_UP, label="warm-up")
    assert Step.decode("prose").phase is Phase.DECODE and Step.decode("prose").label == "decode (prose)"
    assert Step.long_decode().phase is Phase.DECODE
    assert Step.of(Phase.PREFILL).label == "cold prefill"  # the label is for people, the phase for the clock
    assert Step.of(Phase.CAPACITY).label == "capacity at the SLO"
    assert PHASES == ("start", "warm-up", "decode", "prefill", "concurrency", "capacity", "needle", "qeval", "teardown")


def test_the_clock_adds_seconds_until_the_next_phase():
    clock = FakeClock()
    phases = PhaseClock(clock)
    phases.enter(Phase.START)
    clock.now = 4.0
    phases.stop()
    phases.enter(Phase.WARM_UP)
    clock.now = 5.0
    phases.enter(Phase.DECODE)
    clock.now = 11.0
    phases.enter(Phase.DECODE)  # the same phase again (another prompt set): adds up
    clock.now = 14.0
    phases.enter(Phase.QEVAL)
    clock.now = 20.5
    phases.stop()
    phases.enter(Phase.TEARDOWN)
    clock.now = 21.0
    phases.stop()
    assert phases.ordered() == {"start": 4.0, "warm-up": 1.0, "decode": 9.0, "qeval": 6.5, "teardown": 0.5}
    assert list(phases.ordered()) == ["start", "warm-up", "decode", "qeval", "teardown"]


def test_show_prints_the_seconds_per_phase(tmp_path: Path, capsys):
    store = Store(tmp_path / "runs.db")
    store.save_study("s", load_space("llamacpp-gemma3-270m"), "cpu", 1, "host")
    params = {"chat_format": "gemma", "seed": 1234, "n_threads": 1, "type_k": "f16", "type_v": "f16",
              "flash_attn": False, "draft_k": 0, "n_batch": 512, "n_ubatch": 512, "n_ctx": 2048}
    store.save_trial(TrialResult(
        study="s", number=0, candidate=Candidate(engine="llamacpp", params=params), status="ok", objective=20.0,
        score=19.0, duration_s=130.0,
        phase_s={"start": 3.2, "warm-up": 0.9, "decode": 31.0, "prefill": 6.0, "needle": 24.0, "qeval": 63.0, "teardown": 0.4},
    ))
    assert main(["show", "--db", str(tmp_path / "runs.db")]) in (0, None)
    out = capsys.readouterr().out
    assert "seconds per phase" in out
    row = next(line for line in out.splitlines() if line.startswith("│ 0 │") and "63.0" in line)
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells == ["0", "3.2", "0.9", "31.0", "6.0", "24.0", "63.0", "0.4", "130.0"]


def wide(monkeypatch) -> None:
    """`show` on a 200-column console: the start table has eleven columns (a pytest-xdist worker runs
    with COLUMNS=80, read once when the CLI's console is made)."""
    from rich.console import Console

    import autotune.cli

    monkeypatch.setattr(autotune.cli, "console", Console(soft_wrap=True, width=200))


def test_where_a_vllm_start_went_is_read_from_its_log():
    """Recorded on the H200 (vLLM 0.26.0, Gemma 3 270M, fp8 KV, compiled): the start's parts as
    vLLM logs them; the llama.cpp engine logs none of them."""
    from autotune.engines import get_engine

    log = (Path(__file__).parent / "logs" / "clean__vllm_startup_fp8_kv.log").read_text()
    assert get_engine("vllm").start_parts(log) == {
        "weights": 2.67, "compile": 34.79, "profile": 0.82, "cuda_graphs": 5.0, "engine_init": 156.8,
        # from the lines' own clock: the first line 16:08:26, the engine core's first 16:08:57, its init
        # done 16:11:39, "Starting vLLM server" 16:11:47
        "api_server": 31.0, "serving": 8.0, "logged": 201.0,
        "kernels": 0.03,  # FlashInfer's autotune step, run on every Hopper start: nothing to compile here
    }
    assert get_engine("vllm").start_parts("no such lines\n") == {}
    assert get_engine("llamacpp").start_parts(log) == {}


def test_a_start_across_a_month_boundary_reads_its_seconds():
    """vLLM stamps its lines MM-DD HH:MM:SS: a start from 11-30 23:59:50 to 12-01 00:00:09 spans 19 s."""
    from autotune.engines import get_engine

    log = ("INFO 11-30 23:59:50 [api_utils.py:273] non-default args: {}\n"
           "INFO 12-01 00:00:05 [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: model='m'\n"
           "INFO 12-01 00:00:09 [api_server.py:677] Starting vLLM server on http://127.0.0.1:8000\n")
    assert get_engine("vllm").start_parts(log) == {"api_server": 15.0, "logged": 19.0}


FLASHINFER_START = """\
(APIServer pid=2370) INFO 12-07 21:48:26 [model.py:623] Resolved architecture: LlamaForCausalLM
(EngineCore pid=2453) INFO 12-07 21:48:42 [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: model='m'
(EngineCore pid=2453) INFO 12-07 21:49:06 [monitor.py:53] torch.compile took 18.22 s in total
(EngineCore pid=2453) 2026-12-07 21:49:09,154 - INFO - autotuner.py:651 - flashinfer.jit: [Autotuner]: Autotuning process starts ...
(EngineCore pid=2453) 2026-12-07 21:50:22,566 - INFO - autotuner.py:674 - flashinfer.jit: [Autotuner]: Autotuning process ends
(EngineCore pid=2453) WARNING 12-07 21:50:22 [kernel_warmup.py:258] No FlashInfer autotune cache entries found.Falling back to default tactics.
(EngineCore pid=2453) INFO 12-07 21:50:22 [kernel_warmup.py:147] Warming up FlashInfer attention.
(EngineCore pid=2453) INFO 12-07 21:50:53 [cutedsl_warmup.py:101] Skipping CuTeDSL warmup because no compile units were requested.
(EngineCore pid=2453) INFO 12-07 21:50:57 [model_runner.py:747] Graph capturing finished in 4 secs, took 0.35 GiB
(EngineCore pid=2453) INFO 12-07 21:51:14 [core.py:340] init engine (profile, create kv cache, warmup model) took 146.08 s (compilation: 18.22 s)
(APIServer pid=2370) INFO 12-07 21:51:15 [api_server.py:677] Starting vLLM server on http://127.0.0.1:47479
"""


def test_flashinfer_kernel_steps_of_a_start_are_read_from_its_log():
    """A FLASHINFER start on an H100 (vLLM 0.26.0, the dense 8B shape, 2026-12-07), lines of its log:
    FlashInfer's autotune step (its own stamps, with milliseconds) and its attention warm-up (to the
    next line) took 104.4 s of the 146 s init, the part a start with the kernels on disk skips."""
    parts = get_engine("vllm").start_parts(FLASHINFER_START)
    assert parts["kernels"] == 104.41  # 73.412 s autotune + 31 s attention warm-up
    assert parts["engine_init"] == 146.08 and parts["compile"] == 18.22
    # a start on another backend logs an autotune step of milliseconds and no attention warm-up
    other = FLASHINFER_START.replace("21:50:22,566", "21:49:09,178").replace(
        "Warming up FlashInfer attention.", "Skipping FlashInfer attention warm-up (not used).")
    assert get_engine("vllm").start_parts(other)["kernels"] == 0.02


def start_row(tmp_path: Path, capsys, monkeypatch, start: float, duration: float, parts: dict[str, float]) -> list[str]:
    """The cells of `show`'s start table for one stored vLLM trial."""
    wide(monkeypatch)
    store = Store(tmp_path / "runs.db")
    store.save_study("s", load_space("vllm-gemma3-270m"), "h200", 1, "host")
    store.save_trial(TrialResult(
        study="s", number=0, candidate=Candidate(engine="vllm", params={}), status="ok", objective=500.0,
        score=490.0, duration_s=duration, phase_s={"start": start, "decode": 10.0}, start_parts_s=parts,
    ))
    assert main(["show", "--db", str(tmp_path / "runs.db")]) in (0, None)
    out = capsys.readouterr().out
    after = out[out.index("where the start went"):]
    row = next(line for line in after.splitlines() if line.startswith("│ 0 │"))
    return [c.strip() for c in row.strip("│").split("│")]


def test_show_splits_the_start_into_what_the_engine_logged(tmp_path: Path, capsys, monkeypatch):
    cells = start_row(tmp_path, capsys, monkeypatch, 180.0, 200.0,
                      {"weights": 2.67, "compile": 34.79, "profile": 0.82, "cuda_graphs": 5.0, "engine_init": 156.8})
    # start, before the first line, API server, weights, torch.compile, CUDA graphs, FlashInfer's
    # kernels, the rest of engine init, serving, other: a row stored before the log's clock was read
    # leaves those parts out
    assert cells == ["0", "180.0", "-", "-", "2.7", "34.8", "5.0", "-", "117.0", "-", "20.5"]


def test_show_splits_the_start_by_the_logs_own_clock(tmp_path: Path, capsys, monkeypatch):
    """A start of 54 s whose log spans 36 s: 18 s before vLLM's first line (process start, imports),
    17 s from that line to the engine core's first, 1 s from the core's init to serving."""
    cells = start_row(tmp_path, capsys, monkeypatch, 54.0, 120.0,
                      {"weights": 2.9, "compile": 4.4, "profile": 0.1, "cuda_graphs": 4.0, "engine_init": 11.7,
                       "api_server": 17.0, "serving": 1.0, "logged": 36.0})
    assert cells == ["0", "54.0", "18.0", "17.0", "2.9", "4.4", "4.0", "-", "3.3", "1.0", "3.4"]


def test_show_names_the_flashinfer_kernel_steps_apart_from_the_rest_of_init(tmp_path: Path, capsys, monkeypatch):
    cells = start_row(tmp_path, capsys, monkeypatch, 187.9, 229.0, get_engine("vllm").start_parts(FLASHINFER_START))
    # init 146.1 = compile 18.2 + graphs 4 + FlashInfer's kernels 104.4 + the rest 19.5
    assert cells == ["0", "187.9", "18.9", "16.0", "-", "18.2", "4.0", "104.4", "19.5", "1.0", "5.9"]
