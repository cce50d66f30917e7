"""FAKE: a stand-in `vllm` package for exercising autotune's vLLM path where no GPU and no vLLM run.

`write_fake_vllm(root)` writes, under `root`, a package named `vllm` (with a 0.26.0 dist-info) whose
`python -m vllm.entrypoints.cli.main` answers `serve --help=all` with the option lines recorded from
the real vLLM 0.26.0, and `serve MODEL ...` with a small OpenAI-compatible HTTP server: streamed
chat and completions (words at a fixed pace; two tokens per chunk when a speculative config is
given, with the spec-decode counters moving in /metrics), /tokenize, /health, and start-up log
lines in vLLM's wording. `--kv-cache-dtype nvfp4` fails at start with vLLM's real error text.
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

HELP = Path(__file__).resolve().parent.parent / "logs" / "vllm_serve_help_all.txt"

SERVER = r'''
import argparse, json, os, re, sys, time
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
p.add_argument("--load-format", default="auto")
p.add_argument("--distributed-executor-backend"); p.add_argument("--tensor-parallel-size", type=int, default=1)
args, _ = p.parse_known_args()
if args.distributed_executor_backend == "ray":
    # as vLLM's Ray executor: join the cluster at RAY_ADDRESS as a driver, or fail to start
    import ray
    ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    print(f"INFO [ray_utils.py:300] Ray cluster at {{os.environ['RAY_ADDRESS']}}: {{len(alive)}} node(s) alive; "
          f"tensor_parallel_size={{args.tensor_parallel_size}}", flush=True)
print(f"INFO [core.py:90] Initializing a V1 LLM engine (v0.26.0) with config: model={{args.model!r}}, "
      f"kv_cache_dtype={{args.kv_cache_dtype}}, enforce_eager={{args.enforce_eager}}", flush=True)
if args.kv_cache_dtype == "nvfp4":
    print("ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=256, "
          "dtype=torch.bfloat16, kv_cache_dtype=nvfp4, block_size=None). Reasons: {{FLASH_ATTN: [kv_cache_dtype not supported]}}.",
          flush=True)
    sys.exit(1)
backend = args.attention_backend or "FLASH_ATTN"
print(f"INFO [cuda.py:300] Using {{backend}} attention backend out of potential backends: ['FLASH_ATTN', 'TRITON_ATTN'].", flush=True)
print("INFO [kv_cache_utils.py:1000] GPU KV cache size: 524,288 tokens", flush=True)
spec = json.loads(args.speculative_config) if args.speculative_config else None
per_chunk = 2 if spec else 1
state = {{"drafts": 0, "accepted": 0, "generations": 0}}
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
                            % (state["drafts"], state["drafts"] * 4, state["accepted"]), "text/plain")
        else:
            self.reply(404, "{{}}")

    def do_POST(self):
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
        for i in range(0, len(words), per_chunk):
            piece = " " + " ".join(words[i:i + per_chunk])
            choice = {{"delta": {{"content": piece}}}} if chat else {{"text": piece}}
            send({{"choices": [choice]}})
            if spec:
                state["drafts"] += 1; state["accepted"] += 1
            time.sleep(0.004)  # one engine step per chunk: drafting puts several tokens in each
        send({{"choices": [], "usage": {{"prompt_tokens": len(prompt.split()), "completion_tokens": len(words)}}}})
        send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


ThreadingHTTPServer((args.host, args.port), H).serve_forever()
'''


def write_fake_vllm(root: Path) -> Path:
    """Write the fake package under `root` (put `root` on PYTHONPATH and sys.path to use it)."""
    files = {
        "vllm/__init__.py": '__version__ = "0.26.0"  # FAKE vLLM for tests\n',
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/cli/__init__.py": "",
        "vllm/entrypoints/cli/main.py": SERVER.format(help=str(HELP)),
        "vllm-0.26.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n",
        "vllm-0.26.0.dist-info/RECORD": "",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root
