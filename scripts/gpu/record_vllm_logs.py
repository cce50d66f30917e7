"""Record real vLLM failure logs on a lent GPU machine, for the failure corpus in tests/logs/.

Each case starts `vllm serve` with the flags that reproduce one failure (or one healthy start),
several side by side (small --gpu-memory-utilization), captures the whole output, replaces the
machine's paths with placeholders (<model>, <site>, <home>, <tmp>) and writes
`<fixture name>.log` in --out with its source in the first line. Healthy starts are stopped
once the server answers /health. Then, here: copy the files over their hand-written namesakes in
tests/logs/ and run the signature tests.

    python3 scripts/gpu/record_vllm_logs.py --model /tmp/gemma-hf [--only NAME ...] [--parallel 4]

A log that an autotune run wrote on the GPU machine (a probe launch, a trial) becomes a fixture the
same way, scrubbed, with the run that made it as its source:

    python3 scripts/gpu/record_vllm_logs.py --from-log trial-002.log --as NAME --source "scripts/gpu/session.sh verdict ..."
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project, for its helpers
from autotune.launchers.base import free_port  # noqa: E402

SMALL = ["--max-model-len", "4096", "--gpu-memory-utilization", "0.08"]


@dataclass(frozen=True)
class Case:
    fixture: str  # the tests/logs/ file name it records
    args: tuple[str, ...]
    healthy: bool = False  # a start expected to come up: stopped at /health
    model: str = "model"  # "model" or "no_weights" (config and tokenizer without the weights)
    timeout_s: float | None = None  # a limit of its own (the start-up time-out case)


CASES = [
    Case("kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2",
         ("--attention-backend", "TRITON_ATTN", "--kv-cache-dtype", "fp8_e5m2", "--enforce-eager", *SMALL)),
    Case("kv_dtype_rejected_at_forward__vllm_triton_attn_fp8_e5m2_compiled",
         ("--attention-backend", "TRITON_ATTN", "--kv-cache-dtype", "fp8_e5m2", *SMALL)),
    Case("backend_sliding_window__vllm_flashinfer_sm90",
         ("--attention-backend", "FLASHINFER", "--enforce-eager", *SMALL)),
    Case("backend_sliding_window__vllm_fp8_e5m2_backend_chosen",
         ("--kv-cache-dtype", "fp8_e5m2", *SMALL)),
    Case("kv_dtype_unsupported__vllm_nvfp4_no_backend", ("--kv-cache-dtype", "nvfp4", "--enforce-eager", *SMALL)),
    Case("bad_flag__vllm_unrecognized_arguments", ("--no-such-flag", "1", *SMALL)),
    Case("bad_flag__vllm_invalid_choice", ("--kv-cache-dtype", "fp9", *SMALL)),
    Case("kv_cache_memory__vllm_max_seq_len",
         ("--max-model-len", "32768", "--kv-cache-memory-bytes", "2000000", "--enforce-eager",
          "--gpu-memory-utilization", "0.08")),
    Case("kv_cache_memory__vllm_no_cache_blocks",
         ("--max-model-len", "4096", "--gpu-memory-utilization", "0.004", "--enforce-eager")),
    Case("unclassified_crash__vllm_missing_weight", ("--enforce-eager", *SMALL), model="no_weights"),
    Case("clean__vllm_startup_fp8_kv", ("--kv-cache-dtype", "fp8", *SMALL), healthy=True),
    Case("clean__vllm_startup_eager", ("--enforce-eager", *SMALL), healthy=True),
    # a KV cache asked for by size, far beyond the card: the allocation itself fails
    Case("oom__vllm_cuda_oom_kv_bytes", ("--kv-cache-memory-bytes", "400000000000", "--enforce-eager",
                                          "--max-model-len", "4096")),
    # a compiled start cut long before it is ready: what a trial's start-up time-out sees
    Case("startup_timeout__vllm_compiled_start", SMALL, healthy=True, timeout_s=25.0),
    # #50, not recorded yet: a max_model_len far above Gemma 3 270M's config.json (refused at argument time)
    Case("max_model_len_rejected__vllm_above_config",
         ("--max-model-len", "1000000", "--gpu-memory-utilization", "0.08", "--enforce-eager")),
]


def scrub(text: str, model_dir: Path) -> str:
    """The GPU machine's paths become placeholders (its models folder, the bundle's site-packages,
    its Python environment, its home)."""
    for path, mark in ((str(model_dir), f"<models>/{model_dir.name}"), ("/tmp/site", "<site>"), (sys.prefix, "<venv>"),
                       ("/opt/torch/.venv", "<venv>"), (str(Path.home()), "<home>"), ("/root", "<home>")):
        if path not in ("", "/"):
            text = text.replace(path, mark)
    text = re.sub(r"/tmp/tmp[\w-]+", "<tmp>", text)
    # any other temp path (vLLM's file:///tmp/vllm_dist_<hex> rendezvous, ...) keeps only its kind
    text = re.sub(r"/tmp/([A-Za-z_]+?)_?[0-9a-f]{8,}\b", r"<tmp>/\1_<id>", text)
    return re.sub(r"(?<![\w<>])/tmp/", "<tmp>/", text)


def vllm_version() -> str:
    from importlib.metadata import version

    return version("vllm")


def header(source: str) -> str:
    return f"# recording: {source}\n"


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def record(case: Case, model_dir: Path, no_weights: Path, out: Path, timeout_s: float) -> str:
    model = model_dir if case.model == "model" else no_weights
    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model), "--port", str(port), *case.args]
    log = out / f"{case.fixture}.log"
    started = time.monotonic()
    with tempfile.TemporaryFile() as raw:
        proc = subprocess.Popen(argv, stdout=raw, stderr=subprocess.STDOUT, start_new_session=True)
        ended = "exited"
        limit = case.timeout_s or timeout_s
        while proc.poll() is None:
            if time.monotonic() - started > limit:
                ended = "timed out"
                break
            if case.healthy and healthy(port):
                ended = "healthy"
                break
            time.sleep(1.0)
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
        raw.seek(0)
        text = raw.read().decode("utf-8", "replace")
    seconds = time.monotonic() - started
    shown = " ".join(["vllm serve", f"<models>/{model.name}", *case.args])
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    source = (f"scripts/gpu/record_vllm_logs.py on a lent NVIDIA H200 (sm_90, vLLM {vllm_version()}) {when}: "
              f"`{shown}` ({ended} after {seconds:.0f} s, exit {proc.returncode})")
    log.write_text(header(source) + scrub(text, model_dir))
    return f"{case.fixture}: {ended} after {seconds:.0f} s, exit {proc.returncode}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("/tmp/gemma-hf"), help="a Hugging Face checkpoint directory (Gemma 3 270M)")
    parser.add_argument("--from-log", type=Path, help="turn this log of an autotune run into a fixture instead")
    parser.add_argument("--as", dest="fixture", help="with --from-log: the fixture name (tests/logs/NAME.log)")
    parser.add_argument("--source", help="with --from-log: the run that wrote it (machine, date, command)")
    parser.add_argument("--only", nargs="*", help="fixture names to record (default: all)")
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--out", type=Path, help="folder for the logs (default: $OUT/recorded)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    args = parser.parse_args(argv)
    if args.from_log:
        if not (args.fixture and args.source):
            parser.error("--from-log needs --as and --source")
        target = Path(__file__).resolve().parents[2] / "tests" / "logs" / f"{args.fixture}.log"
        target.write_text(header(args.source) + scrub(args.from_log.read_text(), args.model))
        print(f"wrote {target.name}")
        return 0
    out = args.out or Path(os.environ.get("OUT", ".")) / "recorded"
    out.mkdir(parents=True, exist_ok=True)
    no_weights = args.model.parent / f"{args.model.name}-no-weights"
    no_weights.mkdir(exist_ok=True)
    for item in args.model.iterdir():
        if item.is_file() and not item.name.endswith((".safetensors", ".bin")) and "index" not in item.name:
            shutil.copy(item, no_weights / item.name)
    cases = [c for c in CASES if not args.only or c.fixture in args.only]
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        for line in pool.map(lambda c: record(c, args.model, no_weights, out, args.timeout), cases):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
