"""Cross-check autotune's single-stream numbers against `vllm bench serve` on the same server.

    python benchmarks/crosscheck_vllm_bench.py --space vllm-gemma3-270m --model DIR --out DIR

Starts vLLM with the space's baseline (engine defaults), then measures the same prompts (the
shipped prose + structured sets, chat endpoint, greedy, `ignore_eos`, fixed output length) with
`vllm bench serve` (openai-chat backend, custom dataset, concurrency 1) and with autotune's client,
with and without a per-request `seed`, interleaved over `--rounds` (bench, autotune+seed,
autotune, bench, ...) so warm-up and drift hit every arm alike. Writes crosscheck.json: each arm's
median over rounds of TTFT, TPOT and single-stream output tok/s, and the relative differences
against vllm bench serve. Needs vLLM (and pandas, which vLLM's custom dataset loader uses).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.bench.client import OpenAIClient  # noqa: E402
from autotune.bench.throughput import load_prompts, user  # noqa: E402
from autotune.engines import get_engine  # noqa: E402
from autotune.launchers.process import ServerProcess  # noqa: E402
from autotune.checkpoint.files import resolve_model  # noqa: E402
from autotune.space.candidates import baseline, load_space  # noqa: E402
from autotune.launchers.base import free_port  # noqa: E402


async def ours(
    base_url: str, model: str, prompts: list[str], max_tokens: int, passes: int, seed: int | None
) -> dict[str, float]:
    async with OpenAIClient(base_url, model, timeout_s=120, seed=seed) as client:
        await client.chat(user(prompts[0]), max_tokens=16)  # warm-up, as vllm bench's --num-warmups 1
        results = []
        for _ in range(passes):
            for prompt in prompts:
                results.append(await client.chat(user(prompt), max_tokens=max_tokens, ignore_eos=True))
    ok = [r for r in results if r.ok and r.n_out]
    return {
        "requests": len(ok),
        "median_ttft_ms": statistics.median(r.ttft_ms for r in ok),
        "median_tpot_ms": statistics.median(r.tpot_ms for r in ok),
        "output_tps": sum(r.n_out for r in ok) / sum(r.t_last - r.t_send for r in ok),
        "mean_n_out": statistics.fmean(r.n_out for r in ok),
    }


def vllm_bench(
    base_url: str, model: str, tokenizer: str, prompts: list[str], max_tokens: int, passes: int, out: Path
) -> dict[str, float]:
    dataset = out / "crosscheck_prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": p}) + "\n" for _ in range(passes) for p in prompts))
    argv = [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve",
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", base_url,
        "--model", model, "--tokenizer", tokenizer, "--dataset-name", "custom", "--dataset-path", str(dataset),
        "--custom-output-len", str(max_tokens), "--skip-chat-template", "--num-prompts", str(len(prompts) * passes),
        "--max-concurrency", "1", "--ignore-eos", "--temperature", "0", "--disable-shuffle", "--num-warmups", "1",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result", "--result-dir", str(out),
        "--result-filename", "vllm_bench.json",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    (out / "vllm_bench.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({done.returncode}); see {out / 'vllm_bench.log'}")
    data = json.loads((out / "vllm_bench.json").read_text())
    return {
        "requests": data["completed"],
        "median_ttft_ms": data["median_ttft_ms"],
        "median_tpot_ms": data["median_tpot_ms"],
        "output_tps": data["output_throughput"],
        "mean_n_out": data["total_output_tokens"] / data["completed"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", default="vllm-gemma3-270m")
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the three arms")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    space = load_space(args.space)
    model = resolve_model(space.model, args.model)
    engine = get_engine(space.engine)
    port = free_port()
    launch = engine.render(baseline(space), model, port)
    served = model.served_name or model.name
    prompts = [p.prompt for s in ("prose", "structured") for p in load_prompts(s)[:3]]
    arms: dict[str, list[dict[str, float]]] = {"vllm_bench_serve": [], "autotune_seed": [], "autotune_no_seed": []}
    with ServerProcess(launch, out / "crosscheck_server.log", startup_timeout_s=space.workload.startup_timeout_s) as server:
        for _ in range(args.rounds):
            arms["vllm_bench_serve"].append(
                vllm_bench(server.base_url, served, model.path or "", prompts, args.max_tokens, args.passes, out)
            )
            for arm, seed in (("autotune_seed", 1234), ("autotune_no_seed", None)):
                arms[arm].append(asyncio.run(ours(server.base_url, served, prompts, args.max_tokens, args.passes, seed)))
    keys = ("median_ttft_ms", "median_tpot_ms", "output_tps")
    medians = {arm: {k: statistics.median(r[k] for r in rounds) for k in keys} for arm, rounds in arms.items()}
    ref = medians["vllm_bench_serve"]
    diff = {arm: {k: (m[k] - ref[k]) / ref[k] for k in keys} for arm, m in medians.items() if arm != "vllm_bench_serve"}
    report = {"rounds": arms, "medians": medians, "relative_difference": diff, "launch": launch.server.argv}
    (out / "crosscheck.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
