"""FAKE: a stand-in `vllm` package for exercising autotune's vLLM path where no GPU and no vLLM run.

`write_fake_vllm(root, version)` writes, under `root`, a package named `vllm` of one recorded version
(0.26.0 or 0.33.0, with its dist-info) that answers what autotune asks the installed vLLM: the
choices question (`autotune.engines.vllm_choices.DUMP` runs unchanged against it: its argparse
parser, KV-dtype, quantization, speculative, MoE and linear Literals and attention-backend enum are
built from that version's recorded dump in tests/data/vllm_choices/), `python -m
vllm.entrypoints.cli.main serve --help=all` with the option lines recorded from that version, and
`serve MODEL ...` with a small OpenAI-compatible HTTP server: streamed
chat and completions (words at a fixed pace; two tokens per chunk when a speculative config is
given: 1 + K // 2 tokens per step, each step longer the more requests draft K at once, so the best K
falls as concurrency rises; with the spec-decode counters moving in /metrics; a schedule
`num_speculative_tokens_per_batch_size` sets K per requests in flight, and is refused at start by a
version whose SpeculativeConfig lacks the key), /tokenize, /health, and start-up log
lines in the wording of that version's recorded logs (the non-default args, the config line with its
compilation mode and CUDA graph capture sizes (up to --max-cudagraph-capture-size where given), the attention backend; the KV cache size on 0.26.0
only: no recorded 0.33.0 start reached it). `--kv-cache-dtype nvfp4` fails at start with vLLM's real error text.
With `--load-format dummy` a reply stops after 7 tokens unless the request sets `ignore_eos`
(random weights sample an end-of-sequence token early). A request with `"stream": false` gets one
JSON reply. With FAKE_VLLM_STALL_AFTER=N in its environment, every generation after the first N
hangs while /health still answers 200 (a stalled engine). With `--distributed-executor-backend ray` it
joins the Ray cluster at RAY_ADDRESS as a driver first (as vLLM's Ray executor does) and logs the
nodes it found.
It is not vLLM: nothing is computed, and the numbers it yields mean nothing.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
#: the versions the stand-in can be: each one's recorded `serve --help=all` and choices dump
VERSIONS = ("0.26.0", "0.33.0")
HELP = {"0.26.0": TESTS / "logs" / "vllm_serve_help_all.txt",
        "0.33.0": TESTS / "logs" / "vllm-0.33.0_serve_help_options.txt"}


def recorded_choices(version: str) -> Path:
    """The dump `python -m autotune.engines.vllm_choices` printed for `version` on the H200."""
    return TESTS / "data" / "vllm_choices" / f"vllm-{version}_choices.json"


def source_read_keys(version: str) -> Path:
    """SpeculativeConfig's keys for `version` read from vLLM's source, NOT recorded (the dumps
    above predate that question); absent for a version no source was read for."""
    return TESTS / "data" / "vllm_choices" / f"vllm-{version}_speculative_config_keys.json"


# The recorded dump, read by every module below that stands in for one of vLLM's registries; where
# the dump predates the speculative-config question, the keys read from the source stand in for it.
RECORDED = r'''
import json, os
DUMP = json.load(open({dump!r}))
if not DUMP.get("speculative_config_keys") and os.path.exists({keys!r}):
    DUMP["speculative_config_keys"] = json.load(open({keys!r}))["keys"]
'''

# `vllm serve`'s parser as the dump recorded it: each flag with its choices and default, and the
# other option strings (short aliases, --no- forms, long aliases) on actions the dump does not list.
SERVE = r'''
import argparse
from vllm._recorded import DUMP


class ServeSubcommand:
    def subparser_init(self, subparsers):
        parser = subparsers.add_parser("serve", add_help=False)
        flags = DUMP["flags"]
        extra = [o for o in DUMP["options"] if o not in flags]
        long_aliases = [o for o in extra if o.startswith("--") and not o.startswith("--no-")]
        for i, (flag, spec) in enumerate(flags.items()):
            strings = [flag, *(long_aliases if i == 0 else [])]
            parser.add_argument(*strings, dest=f"flag{{i}}", choices=spec["choices"], default=spec["default"])
        others = [o for o in extra if o not in long_aliases]
        if others:
            parser.add_argument(*others, dest="aliases")
        return parser
'''


def _literal(name: str, key: str) -> str:
    """A module line defining `name` as the Literal of the dump's `key` (left out when it is empty)."""
    return (f"if DUMP[{key!r}]:\n    {name} = typing.Literal[tuple(DUMP[{key!r}])]\n")


REGISTRIES = {
    "vllm/config/cache.py": _literal("CacheDType", "kv_cache_dtypes"),
    "vllm/config/speculative.py": _literal("SpeculativeMethod", "speculative_methods")
    + "import dataclasses\n"
    "SpeculativeConfig = dataclasses.make_dataclass('SpeculativeConfig', DUMP.get('speculative_config_keys', []))\n",
    "vllm/config/kernel.py": _literal("MoEBackend", "moe_backends") + _literal("LinearBackend", "linear_backends"),
    "vllm/model_executor/layers/quantization/__init__.py": _literal("QuantizationMethods", "quantization_methods")
    + "DEPRECATED_QUANTIZATION_METHODS = list(DUMP['deprecated_quantization_methods'])\n",
    "vllm/v1/attention/backends/registry.py": "import enum\n"
    "AttentionBackendEnum = enum.Enum('AttentionBackendEnum', DUMP['attention_backends'])\n",
}

SERVER = r'''
import argparse, json, os, re, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HELP = {help!r}
if "--help=all" in sys.argv:
    print(open(HELP).read())
    sys.exit(0)
p = argparse.ArgumentParser()
p.add_argument("cmd"); p.add_argument("model")
p.add_argument("--port", type=int); p.add_argument("--host"); p.add_argument("--served-model-name")
p.add_argument("--kv-cache-dtype", default="auto"); p.add_argument("--attention-backend")
p.add_argument("--speculative-config"); p.add_argument("--enforce-eager", action="store_true")
p.add_argument("--load-format", default="auto"); p.add_argument("--max-num-seqs", type=int)
p.add_argument("--distributed-executor-backend"); p.add_argument("--tensor-parallel-size", type=int, default=1)
p.add_argument("--max-cudagraph-capture-size", type=int)
args, _ = p.parse_known_args()
if args.distributed_executor_backend == "ray":
    # as vLLM's Ray executor: join the cluster at RAY_ADDRESS as a driver, or fail to start
    import ray
    ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    print(f"INFO [ray_utils.py:300] Ray cluster at {{os.environ['RAY_ADDRESS']}}: {{len(alive)}} node(s) alive; "
          f"tensor_parallel_size={{args.tensor_parallel_size}}", flush=True)
# the lines the recorded logs of this version hold (tests/logs/, tests/logs/v0.33.0/), their
# messages as recorded; the [file.py:NNN] prefix is the recorded one of this version
PREFIX = {{"0.26.0": {{"args": "api_utils.py:273", "init": "core.py:116"}},
          "0.33.0": {{"args": "startup.py:96", "init": "core.py:139"}}}}["{version}"]
chosen = {{"model": args.model, "port": args.port}}
chosen.update({{k: v for k, v in (("kv_cache_dtype", args.kv_cache_dtype if args.kv_cache_dtype != "auto" else None),
                                 ("attention_backend", args.attention_backend),
                                 ("enforce_eager", args.enforce_eager or None),
                                 ("max_num_seqs", args.max_num_seqs)) if v is not None}})
print(f"INFO [{{PREFIX['args']}}] non-default args: {{chosen}}", flush=True)
# vLLM's default capture sizes (as recorded); it captures up to 2 x max_num_seqs when that is set
SIZES = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
top = args.max_cudagraph_capture_size or (2 * args.max_num_seqs if args.max_num_seqs else 512)
sizes = [] if args.enforce_eager else [n for n in SIZES if n <= top]
mode = "<CompilationMode.NONE: 0>" if args.enforce_eager else "<CompilationMode.VLLM_COMPILE: 3>"
cudagraphs = "<CUDAGraphMode.NONE: 0>" if args.enforce_eager else "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>"
print(f"INFO [{{PREFIX['init']}}] Initializing a V1 LLM engine (v{version}) with config: model={{args.model!r}}, "
      f"kv_cache_dtype={{args.kv_cache_dtype}}, enforce_eager={{args.enforce_eager}}, compilation_config={{{{'mode': {{mode}}, "
      f"'cudagraph_mode': {{cudagraphs}}, 'cudagraph_capture_sizes': {{sizes}}}}}}", flush=True)
if os.environ.get("FAKE_VLLM_FREE_GIB"):  # another process holds the GPU: vLLM's check at start
    free = float(os.environ["FAKE_VLLM_FREE_GIB"])
    print(f"ValueError: Free memory on device cuda:0 ({{free:.2f}}/79.18 GiB) on startup is less than desired GPU "
          f"memory utilization (0.9, 71.26 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
          "processes.", flush=True)
    sys.exit(1)
if args.kv_cache_dtype == "nvfp4":
    print("ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=256, "
          "dtype=torch.bfloat16, kv_cache_dtype=nvfp4, block_size=None). Reasons: {{FLASH_ATTN: [kv_cache_dtype not supported]}}.",
          flush=True)
    sys.exit(1)
if args.attention_backend:
    print(f"INFO [cuda.py:448] Using AttentionBackendEnum.{{args.attention_backend}} backend.", flush=True)
else:
    print("INFO [cuda.py:482] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'TRITON_ATTN'].", flush=True)
if "{version}" == "0.26.0":  # no recorded 0.33.0 start reached the KV cache sizing
    print("INFO [kv_cache_utils.py:2177] GPU KV cache size: 524,288 tokens", flush=True)
spec = json.loads(args.speculative_config) if args.speculative_config else None
from vllm._recorded import DUMP
unknown = sorted(set(spec or {{}}) - set(DUMP.get("speculative_config_keys") or set(spec or {{}})))
if unknown:  # this version's SpeculativeConfig has no such field
    print(f"pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n{{unknown[0]}}\n"
          "  Unexpected keyword argument [type=unexpected_keyword_argument]", flush=True)
    sys.exit(1)
MAX_K = int(spec["num_speculative_tokens"]) if spec else 0
SCHEDULE = (spec or {{}}).get("num_speculative_tokens_per_batch_size") or [[1, 1 << 30, MAX_K]]
LOCK = threading.Lock()
state = {{"drafts": 0, "draft_tokens": 0, "accepted": 0, "generations": 0, "in_flight": 0,
         # the request metrics vLLM's /metrics serves (a server-side view for the capacity cross-check)
         "generated": 0, "ttft_count": 0, "ttft_sum": 0.0, "ttft_le_1": 0, "itl_count": 0, "itl_sum": 0.0}}


def draft_k(batch):
    """K for this many requests in flight, as the schedule says (the last range carries on)."""
    k = SCHEDULE[-1][2]
    for lo, hi, each in SCHEDULE:
        if lo <= batch <= hi:
            k = each
    return min(k, MAX_K)


# FAKE_VLLM_STEP_S: one plain engine step's seconds; a test that compares speeds between launches sets
# it long enough that a late wake-up of a loaded machine is a small share of the decode window
STEP_S = float(os.environ.get("FAKE_VLLM_STEP_S", "0.004"))


def step(batch):
    """(tokens one engine step puts out per request, its seconds) with K drafted: the more drafts in
    a batch, the longer the step, so a long draft pays at one stream and costs at many."""
    k = draft_k(batch)
    return 1 + k // 2, STEP_S * (1 + k * k * (batch - 1) / 4)
# FAKE_VLLM_JIT_S: the first engine step at a batch size not seen before stalls every request this
# long and logs vLLM's warning, as Triton's fused_moe_kernel compiling for a new batch size did on the
# H200 (vLLM 0.26.0, 2026-12-06)
JIT_S = float(os.environ.get("FAKE_VLLM_JIT_S", "0"))
seen_batches = set()
compiled_until = [0.0]


def jit(batch):
    """Stall while a kernel for a new batch size compiles (the whole engine waits)."""
    if JIT_S <= 0:
        return
    with LOCK:
        if batch not in seen_batches:
            seen_batches.add(batch)
            compiled_until[0] = time.monotonic() + JIT_S
            print("WARNING [jit_monitor.py:135] Triton kernel JIT compilation during inference: fused_moe_kernel. "
                  "This causes a latency spike; consider extending warmup to cover this shape/config.", flush=True)
    time.sleep(max(0.0, compiled_until[0] - time.monotonic()))
# FAKE_VLLM_STALL_AFTER=N: after N generation requests every later one hangs (no byte sent) while
# /health keeps answering 200, as an engine whose NCCL collective hangs does
STALL_AFTER = int(os.environ.get("FAKE_VLLM_STALL_AFTER", "-1"))
WORDS = "the quiet harbour wakes slowly while gulls circle over the grey water".split()


def answer(prompt):
    m = re.search(r"secret code for (\w+)\?", prompt)
    if m:
        code = re.search(r"secret code for " + m.group(1) + r" is (\d{{5}})", prompt)
        return [code.group(1)] if code else ["none"]
    return None


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, body, ctype="application/json"):
        data = body.encode()
        self.send_response(code); self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, "")
        elif self.path == "/v1/models":
            self.reply(200, json.dumps({{"data": [{{"id": args.served_model_name}}]}}))
        elif self.path == "/metrics":
            self.reply(200, "vllm:spec_decode_num_drafts_total{{engine=\"0\"}} %d\n"
                            "vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} %d\n"
                            "vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} %d\n"
                            % (state["drafts"], state["draft_tokens"], state["accepted"])
                       + "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine=\"0\"}} %d\n"
                         "# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{{engine=\"0\"}} %d\n"
                         "# TYPE vllm:time_to_first_token_seconds histogram\n"
                         "vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"1.0\"}} %d\n"
                         "vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"+Inf\"}} %d\n"
                         "vllm:time_to_first_token_seconds_count{{engine=\"0\"}} %d\n"
                         "vllm:time_to_first_token_seconds_sum{{engine=\"0\"}} %f\n"
                         "# TYPE vllm:inter_token_latency_seconds histogram\n"
                         "vllm:inter_token_latency_seconds_bucket{{engine=\"0\",le=\"+Inf\"}} %d\n"
                         "vllm:inter_token_latency_seconds_count{{engine=\"0\"}} %d\n"
                         "vllm:inter_token_latency_seconds_sum{{engine=\"0\"}} %f\n"
                         % (state["in_flight"], state["generated"], state["ttft_le_1"], state["ttft_count"],
                            state["ttft_count"], state["ttft_sum"], state["itl_count"], state["itl_count"],
                            state["itl_sum"]), "text/plain")
        else:
            self.reply(404, "{{}}")

    def do_POST(self):
        arrived = time.monotonic()
        print(f'INFO:     127.0.0.1 - "POST {{self.path}} HTTP/1.1"', flush=True)  # as uvicorn's access log
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            n = len(body["prompt"].split())
            self.reply(200, json.dumps({{"count": n, "tokens": list(range(n)), "max_model_len": 4096}}))
            return
        prompt = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
        n = body["max_tokens"]
        state["generations"] += 1
        if 0 <= STALL_AFTER < state["generations"]:
            print(f"WARNING [shm_broadcast.py:466] No available shared memory broadcast block found in 60 seconds.", flush=True)
            time.sleep(3600)
        if body.get("stream") is False:
            words = answer(prompt) or [WORDS[i % len(WORDS)] for i in range(n)]
            text = " " + " ".join(words)
            key = "message" if self.path.endswith("/chat/completions") else "text"
            choice = {{key: {{"role": "assistant", "content": text}} if key == "message" else text, "finish_reason": "length"}}
            self.reply(200, json.dumps({{"choices": [choice],
                                        "usage": {{"prompt_tokens": len(prompt.split()), "completion_tokens": len(words)}}}}))
            return
        if args.load_format == "dummy" and not body.get("ignore_eos"):
            # random weights hit an end-of-sequence token early, unless told to ignore it
            n = min(n, max(body.get("min_tokens") or 0, 7))
        words = answer(prompt) or [WORDS[i % len(WORDS)] for i in range(n)]
        self.send_response(200); self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked"); self.end_headers()

        def send(obj):
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data)); self.wfile.flush()

        chat = self.path.endswith("/chat/completions")
        time.sleep(0.01 + 0.00002 * len(prompt.split()))
        with LOCK:
            state["in_flight"] += 1
        try:
            i, due = 0, time.monotonic()
            while i < len(words):
                jit(state["in_flight"])
                per_chunk, seconds = step(state["in_flight"])
                piece = " " + " ".join(words[i:i + per_chunk])
                i += per_chunk
                choice = {{"delta": {{"content": piece}}}} if chat else {{"text": piece}}
                send({{"choices": [choice]}})
                now = time.monotonic()
                with LOCK:
                    state["generated"] += per_chunk
                    if i == per_chunk:  # the first token
                        state["ttft_count"] += 1; state["ttft_sum"] += now - arrived
                        state["ttft_le_1"] += now - arrived <= 1.0
                    else:
                        state["itl_count"] += per_chunk; state["itl_sum"] += now - last
                last = now
                if per_chunk > 1:
                    state["drafts"] += 1; state["accepted"] += per_chunk - 1
                    state["draft_tokens"] += draft_k(state["in_flight"])
                # one engine step per chunk (drafting puts several tokens in each), paced by the clock
                # so that one late wake-up does not delay every later chunk
                due += seconds
                time.sleep(max(0.0, due - time.monotonic()))
        finally:
            with LOCK:
                state["in_flight"] -= 1
        send({{"choices": [], "usage": {{"prompt_tokens": len(prompt.split()), "completion_tokens": len(words)}}}})
        send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


class Server(ThreadingHTTPServer):
    # the listen backlog: http.server's 5 drops connections of a 32-stream wave (ReadError), where
    # vLLM's uvicorn keeps 2048
    request_queue_size = 2048


# as vLLM's API server: the engine core is a child process in the server's process group, stopped
# when the server exits or is sent SIGTERM, but not dying with it: a SIGKILL of the server orphans it
import atexit, signal, subprocess
CORE = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)", f"VLLM::EngineCore {{args.model}}"])
atexit.register(CORE.terminate)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
Server((args.host or "", args.port), H).serve_forever()  # no --host: every interface, as vLLM
'''


def choices_of(version: str) -> dict:
    """What the stand-in of `version` answers to the choices question: its recorded dump, with the
    source-read speculative-config keys where the dump predates that question."""
    import json

    dump = json.loads(recorded_choices(version).read_text())
    if not dump.get("speculative_config_keys") and source_read_keys(version).exists():
        dump["speculative_config_keys"] = json.loads(source_read_keys(version).read_text())["keys"]
    return dump


def write_fake_vllm(root: Path, version: str = "0.26.0") -> Path:
    """Write the fake package of `version` under `root` (put `root` on PYTHONPATH and sys.path to use it)."""
    if version not in VERSIONS:
        raise ValueError(f"no recording of vLLM {version}; recorded: {', '.join(VERSIONS)}")
    files = {
        "vllm/__init__.py": f'__version__ = "{version}"  # FAKE vLLM for tests\n',
        "vllm/_recorded.py": RECORDED.format(dump=str(recorded_choices(version)), keys=str(source_read_keys(version))),
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/cli/__init__.py": "",
        "vllm/entrypoints/cli/main.py": SERVER.format(help=str(HELP[version]), version=version),
        "vllm/entrypoints/cli/serve.py": SERVE.format(),
        f"vllm-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n",
        f"vllm-{version}.dist-info/RECORD": "",
    }
    for rel, body in REGISTRIES.items():
        files[rel] = "import typing\nfrom vllm._recorded import DUMP\n" + body
    for rel in list(files):  # every folder on the way is a package
        parts = Path(rel).parts[:-1]
        for i in range(1, len(parts) + 1):
            if not parts[i - 1].endswith(".dist-info"):
                files.setdefault(str(Path(*parts[:i], "__init__.py")), "")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def use_fake_vllm(tmp_path: Path, monkeypatch, version: str = "0.26.0", name: str = "fake_site") -> Path:
    """The stand-in vLLM of `version` first on this test's import path and its subprocesses'
    PYTHONPATH, with the engine's per-version flag cache emptied; returns its site folder."""
    import importlib

    from autotune.engines import vllm as vllm_engine

    site = write_fake_vllm(tmp_path / name, version)
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    monkeypatch.setattr(vllm_engine, "_flags_cache", {})
    return site


#: the engine, model and fixed lines of a space for the stand-in serving `small_model_dir`'s model: a
#: str.format template (fill `model`); the test's own space text goes around it with its braces doubled
FAKE_GEMMA_SPACE = """engine: vllm
model: {{name: gemma-3-270m, path: {model}, prompt_style: completion, head_dim: 256, n_kv_heads: 1, n_layers: 18,
        params_total_b: 0.27, weight_bits: 16, context_max: 4096}}
fixed: {{max_model_len: 4096, gpu_memory_utilization: 0.5}}
"""


def small_model_dir(tmp_path: Path) -> Path:
    """A model folder whose config.json holds the few facts the stand-in's spaces need."""
    import json

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"head_dim": 256, "num_attention_heads": 4, "num_key_value_heads": 1}))
    return model
