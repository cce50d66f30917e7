"""A/A check of the verdict: how often does autotune call a winner between two identical configs?

    python benchmarks/aa_check.py --repeats 10 [--rounds 2] [--db aa-runs.db] [--json]

Each repeat is one real study on this host (llama.cpp + Gemma 3 270M from PyPI, CPU) over a space
whose two candidates differ only in an environment variable the engine never reads: the baseline
(arm a) and arm b, each launched once, the baseline relaunched once for the noise, then arm b is
confirmed against the baseline with `--rounds` interleaved relaunches each, exactly as
`autotune search` confirms its best. All repeats share one runs.db, so the launch-to-launch noise
estimate grows as it does for a user. Prints each repeat's confirmation and the false-winner count.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.commands import search  # noqa: E402
from autotune.commands.setup import prepare  # noqa: E402
from autotune.study.confirm import confirm  # noqa: E402
from autotune.study.reporter import SilentReporter  # noqa: E402
from autotune.checkpoint.files import resolve_model  # noqa: E402
from autotune.models import ConfirmationLaunch  # noqa: E402
from autotune.trial.run import EngineLaunch  # noqa: E402
from autotune.verdict.noise import NoiseKey  # noqa: E402
from autotune.space.candidates import load_space  # noqa: E402

SPACE = """
name: aa-check
engine: llamacpp
model: {{name: gemma-3-270m-q4_k_m, path: {model}, prompt_style: completion, context_max: 2048}}
hardware: auto
fixed: {{chat_format: gemma, seed: 1234, n_ctx: 1024, n_threads: 1}}
knobs:
  - {{name: AUTOTUNE_AA_ARM, kind: env, values: [a, b], default: a, description: read by nothing}}
workload:
  decode_max_tokens: {tokens}
  prompt_sets: [prose, structured]
  prompts_per_set: 2
  repeats: 2
  prefill_tokens: []
  startup_timeout_s: 120
gates: {{needle: null, qeval: null}}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="confirmation rounds per repeat")
    parser.add_argument("--tokens", type=int, default=64, help="decode tokens per request")
    parser.add_argument("--db", type=Path, default=None, help="runs.db to use (default: a new temporary one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="aa-check-"))
    base_space = load_space("llamacpp-gemma3-270m")
    model = resolve_model(base_space.model, None).path
    space_file = work / "aa.yaml"
    space_file.write_text(SPACE.format(model=model, tokens=args.tokens))
    db = args.db or work / "runs.db"
    rows = []
    for repeat in range(args.repeats):
        t0 = time.monotonic()
        plan = prepare(space_name=str(space_file), model_path=None, db_path=db, study=f"aa-{repeat}",
                              hardware=None, nodes=None, accuracy=False, logs_dir=work / "logs",
                              tries=["AUTOTUNE_AA_ARM=b"])
        outcome = search.run(plan, trials=2, confirm_rounds=0, noise_relaunches=1)
        assert plan.store is not None
        base = next(t for t in outcome.trials if t.number == 0)
        arm_b = next(t for t in outcome.trials if t.number != 0 and t.status == "ok")
        noise = NoiseKey(host=plan.store.save_host(plan.host), engine="llamacpp", metric=plan.space.objective.metric)

        def keep(arm, round_, again, seconds, plan=plan, arm_b=arm_b, base=base, noise=noise):
            sample = None if again.objective is None else plan.store.add_launch_sample(
                noise, plan.study, arm.candidate, again.objective, "confirm", arm.number)
            return plan.store.add_confirmation_launch(ConfirmationLaunch(
                id=0, study=plan.study, best_trial=arm_b.number, baseline_trial=base.number, round=round_,
                trial=arm.number, objective=again.objective, duration_s=round(seconds, 3), sample_id=sample))

        prior = plan.store.launch_noise(noise)
        result = confirm(EngineLaunch(), plan.ctx, arm_b, base, args.rounds, keep, reporter=SilentReporter(),
                         prior=prior)
        plan.store.save_confirmation(result)
        row = {
            "repeat": repeat,
            "trial_ratio": round((arm_b.objective or 0) / (base.objective or 1), 4),
            "confirm_ratio": result.ratio,
            "winner": result.winner,
            "verdict": result.verdict,
            "prior_sigma": prior.sigma if prior else None,
            "prior_df": prior.df if prior else None,
            "seconds": round(time.monotonic() - t0, 1),
        }
        rows.append(row)
        if not args.json:
            print(f"repeat {repeat}: trial ratio x{row['trial_ratio']:.3f}; {result.verdict}", flush=True)
    winners = sum(r["winner"] for r in rows)
    final = plan.store.launch_noise(noise)
    summary = {"repeats": len(rows), "false_winners": winners, "rounds": args.rounds,
               "final_noise_sigma": final.sigma if final else None, "final_noise_df": final.df if final else None,
               "rows": rows}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"false winners: {winners} of {len(rows)}; launch noise now "
              f"{final.describe() if final else 'unknown'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
